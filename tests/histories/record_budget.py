"""Record an activation history that goes past the per-task delivery budget (tests/core/test_replay.py).

    .venv/bin/python tests/histories/record_budget.py OUT.json   # from the repository root; then gzip OUT.json
"""

import asyncio
import sys

from _recorder import dev_server, spec_of, worker, write

WF = """
name: {name}
on:
  http.request: {{}}
  as: hook
  when: "{{{{ hook.body.go }}}}"
  queue_by: "{{{{ hook.body.key }}}}"
"""


def hook(i, go, key="k"):
    return {"delivery_id": i, "method": "POST", "body": {"go": go, "key": key}}


async def main(out):
    async with dev_server() as (env, wfi):
        name = "recorded-budget"
        async with worker(env):
            await wfi.activate(spec_of(WF.format(name=name)))
            first = (await wfi._handle(name).describe()).run_id  # the run continues as new to retire records
            batches = [[(None, hook(f"b{b}-{i}", go=(i % 100 == 0), key=f"k{i % 3}")) for i in range(500)] for b in range(4)]
            sigs = [wfi.signal_delivery(name, hook(f"s{i}", go=(i % 50 == 0), key=f"k{i % 3}")) for i in range(600)]
            await asyncio.gather(*(wfi.deliver_many(name, b) for b in batches), *sigs)
            for _ in range(600):
                s = await wfi.summary(name)
                if s["counters"].get("deliveries", 0) >= 2600 and s["runs_pending"] == s["runs_starting"] == s["runs_running"] == 0:
                    break
                await asyncio.sleep(0.5)
            else:
                raise SystemExit(f"not settled: {s}")
            print(s["counters"])
            write(await env.client.get_workflow_handle(f"wfi-activation:{name}", run_id=first).fetch_history(), out)


asyncio.run(main(sys.argv[1]))
