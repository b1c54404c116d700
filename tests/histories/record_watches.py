"""Record an activation whose runs, started one after another, were watched (tests/core/test_replay.py):
ten held runs, each delivered once the one before is running, then all released; lifecycle events
off, so nothing awaits their endings at once.

Recorded once by the build before patch ``wfi-gathered-watches`` (7 Dec 2026: a watch activity per
start) and once by the build with it (runs started while a first look is out wait for the next).
From a tree whose ``wf_initiation`` holds that build's ``workflows/`` and ``activities/`` (as the
installed package lays them out), with tests/ beside it:

    cd TREE && /path/to/.venv/bin/python tests/histories/record_watches.py OUT.json   # then gzip OUT.json
"""

import asyncio
import sys

from _recorder import dev_server, spec_of, worker, write

WF = """
name: {name}
on:
  http.request: {{}}
  as: hook
"""
RUNS = 10


async def main(out):
    async with dev_server() as (env, wfi):
        name = "recorded-watches"
        async with worker(env):
            await wfi.activate(spec_of(WF.format(name=name), lifecycle_events=False))
            keys = []
            for i in range(RUNS):
                result = await wfi.deliver(name, {"delivery_id": f"held-{i}", "method": "POST", "body": {"hold": True}})
                keys.append(result.run_key)
                while (await wfi.state(name))["runs"][result.run_key]["status"] != "running":
                    await asyncio.sleep(0.05)
            await asyncio.gather(*(env.client.get_workflow_handle(k).signal("release") for k in keys))
            while (await wfi.state(name))["runs"]:
                await asyncio.sleep(0.1)
            write(await wfi._handle(name).fetch_history(), out)


asyncio.run(main(sys.argv[1]))
