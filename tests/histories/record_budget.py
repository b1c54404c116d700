"""Record an activation history that goes past the per-task delivery budget (tests/core/test_replay.py).

    .venv/bin/python tests/histories/record_budget.py OUT.json   # from the repository root; then gzip OUT.json
"""

import asyncio
import os
import pathlib
import shutil
import sys
import tempfile

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

sys.path.insert(0, os.getcwd())
from tests.support.activation import make_spec  # noqa: E402
from wf_initiation.client import WfiClient  # noqa: E402
from wf_initiation.plugin import WfiPlugin  # noqa: E402
from wf_initiation.wire.search_attributes import ALL  # noqa: E402

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
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=shutil.which("temporal"), search_attributes=list(ALL), data_converter=pydantic_data_converter)
    try:
        tq = "rec"
        name = "recorded-budget"
        with tempfile.TemporaryDirectory() as tmp:
            spec = make_spec(pathlib.Path(tmp), WF.format(name=name), task_queue=tq)
        async with Worker(env.client, task_queue=tq, plugins=[WfiPlugin(sample_runs=True)]):
            wfi = WfiClient(env.client, task_queue=tq)
            await wfi.activate(spec)
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
            history = await wfi._handle(name).fetch_history()
        pathlib.Path(out).write_text(history.to_json())
        kinds = {}
        for e in history.events:
            kinds[e.event_type] = kinds.get(e.event_type, 0) + 1
        print(len(history.events), "events", kinds)
    finally:
        await env.shutdown()

asyncio.run(main(sys.argv[1]))
