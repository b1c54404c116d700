"""Record an activation that takes 700 signals in one workflow task while its held-bytes budget has
no room (tests/core/test_replay.py): the first waits, the rest arrive behind it.

The held-bytes budget is lowered to 2,500 bytes (as tests/integration/test_signal_durability.py
does; the replay test lowers it too): a run waits for ``release`` and two queued 1 KB events fill
the budget. The worker is stopped while the signals are sent, so the next task holds them all.
Recorded once with the build before patch ``wfi-quiet-waiting`` (6 Dec 2026: each signal behind a
waiting one tried the oldest again, a try of the task's budget each) and once with it:

    cd TREE && /path/to/.venv/bin/python tests/histories/record_waiting.py OUT.json   # then gzip OUT.json
"""

import asyncio
import sys

from _recorder import dev_server, spec_of, worker, write

from wf_initiation.core.engine import _intake

_intake.MAX_HELD_BYTES = 2_500  # the engine is passed through the workflow sandbox: this is the activation's
SIGNALS = 700
WF = """
name: recorded-waiting
on:
  http.request: {}
  as: hook
  when: "{{ hook.body.go }}"
  queue_by: "{{ hook.body.key }}"
"""


def hook(ident, go, key, **body):
    return {"delivery_id": ident, "method": "POST", "body": {"go": go, "key": key, **body}}


async def main(out):
    async with dev_server() as (env, wfi):
        name = "recorded-waiting"
        async with worker(env):
            await wfi.activate(spec_of(WF, lifecycle_events=False))
            head = await wfi.deliver(name, hook("head", True, "q", hold=True))
            for i in range(2):
                await wfi.deliver(name, hook(f"u{i}", True, "q", text="x" * 1000))
        handle = env.client.get_workflow_handle(f"wfi-activation:{name}")
        for i in range(SIGNALS):  # no worker: the next workflow task takes them all
            await handle.signal("deliver_signal", {"entry": None, "payload": hook(f"s{i}", False, f"k{i}", text="y" * 500)})
        async with worker(env):
            for _ in range(600):
                summary = await wfi.summary(name)
                if summary["inbox"]["waiting_signals"] + summary["signals"]["deferred_listed"] == SIGNALS:
                    break
                await asyncio.sleep(0.2)
            else:
                raise SystemExit(f"the signals were not kept: {summary}")
            await env.client.get_workflow_handle(head.run_key).signal("release")
            for _ in range(600):
                summary = await wfi.summary(name)
                if summary["inbox"]["waiting_signals"] == 0 and summary["runs_running"] == 0:
                    break
                await asyncio.sleep(0.2)
            else:
                raise SystemExit(f"not settled: {summary}")
            print(summary["counters"])
            write(await handle.fetch_history(), out)


asyncio.run(main(sys.argv[1]))
