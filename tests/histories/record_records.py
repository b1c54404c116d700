"""Record the first run of an activation that continued as new to retire its released dedup entries
into the compact form (tests/core/test_replay.py): 4,500 suppressed deliveries by ``deliver_many``.

Recorded with the build before patch ``wfi-fewer-records`` (6 Dec 2026), which carried the 2,000
newest as full records and continued as new past 4,000; the current build continues past 2,500
unless the history says otherwise. From a tree whose ``wf_initiation`` holds that build's
``workflows/`` and ``activities/`` (as the installed package lays them out), with tests/ beside it:

    cd TREE && /path/to/.venv/bin/python tests/histories/record_records.py OUT.json   # then gzip OUT.json
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
"""


def hook(i, go):
    return {"delivery_id": i, "method": "POST", "body": {"go": go}}


async def main(out):
    async with dev_server() as (env, wfi):
        name = "recorded-records"
        async with worker(env):
            await wfi.activate(spec_of(WF.format(name=name), lifecycle_events=False))
            first = (await wfi._handle(name).describe()).run_id
            for b in range(9):  # one at a time: the run takes each update whole
                await wfi.deliver_many(name, [(None, hook(f"b{b}-{i}", go=(b == 8 and i == 0))) for i in range(500)])
            for _ in range(200):  # the run continues as new once its last update is taken
                if (await wfi._handle(name).describe()).run_id != first:
                    break
                await asyncio.sleep(0.1)
            else:
                raise SystemExit("the run did not continue as new")
            write(await env.client.get_workflow_handle(f"wfi-activation:{name}", run_id=first).fetch_history(), out)


asyncio.run(main(sys.argv[1]))
