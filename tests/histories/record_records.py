"""Record the first run of an activation that continued as new to retire its released dedup entries
into the compact form (tests/core/test_replay.py): 4,500 suppressed deliveries by ``deliver_many``.

Recorded with the build before patch ``wfi-fewer-records`` (6 Dec 2026), which carried the 2,000
newest as full records and continued as new past 4,000; the current build continues past 2,500
unless the history says otherwise. From a tree whose ``wf_initiation`` holds that build's
``workflows/`` and ``activities/`` (as the installed package lays them out), with tests/ beside it:

    cd TREE && /path/to/.venv/bin/python tests/histories/record_records.py OUT.json   # then gzip OUT.json
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
"""


def hook(i, go):
    return {"delivery_id": i, "method": "POST", "body": {"go": go}}


async def main(out):
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=shutil.which("temporal"), search_attributes=list(ALL),
                                                data_converter=pydantic_data_converter)
    try:
        tq, name = "rec", "recorded-records"
        with tempfile.TemporaryDirectory() as tmp:
            spec = make_spec(pathlib.Path(tmp), WF.format(name=name), task_queue=tq, lifecycle_events=False)
        async with Worker(env.client, task_queue=tq, plugins=[WfiPlugin(sample_runs=True)]):
            wfi = WfiClient(env.client, task_queue=tq)
            await wfi.activate(spec)
            first = (await wfi._handle(name).describe()).run_id
            for b in range(9):  # one at a time: the run takes each update whole
                await wfi.deliver_many(name, [(None, hook(f"b{b}-{i}", go=(b == 8 and i == 0))) for i in range(500)])
            for _ in range(200):  # the run continues as new once its last update is taken
                if (await wfi._handle(name).describe()).run_id != first:
                    break
                await asyncio.sleep(0.1)
            else:
                raise SystemExit("the run did not continue as new")
            history = await env.client.get_workflow_handle(f"wfi-activation:{name}", run_id=first).fetch_history()
        kinds = {}
        for e in history.events:
            kinds[e.event_type] = kinds.get(e.event_type, 0) + 1
        print(len(history.events), "events", kinds)
        pathlib.Path(out).write_text(history.to_json())
    finally:
        await env.shutdown()


asyncio.run(main(sys.argv[1]))
