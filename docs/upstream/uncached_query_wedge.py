"""An activation on a worker without a workflow cache (max_cached_workflows=0), queried by 8 clients
for N seconds while its sheet poll (every 200 ms) appends events; then one delivery, retried for up
to 10 minutes. Run from the repository root, best beside a CPU hog (`python3 -c "while True: pass"`):

    .venv/bin/python docs/upstream/uncached_query_wedge.py 90 --guard-on

With `--guard-on` the stale-time guard is forced on for this queue (as before the fix): a query
picked up after the poll's events arrived replays them at a stale time, the guard fails that
activation, the SDK sends a completion core rejects ("Workflow completion had a legacy query
response along with other commands"), and the run is stuck: every update is refused with
"Workflow Task in failed state" for as long as it was watched (2 of 2 runs; the longer one was
still refused after 5 minutes when stopped; temporalio 1.35.0, CLI 1.9.1 / server 1.32.0). Without
it (the plugin's behaviour now) the guard stands down on an uncached worker and the delivery is
accepted at once.
"""
import asyncio
import collections
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, ".")
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.conftest import DEV_SERVER_ARGS, _converter, binary
from tests.test_deactivate import hook, spec_for, write_sheet
from wf_initiation import _uncached
from wf_initiation.client import WfiClient
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire.search_attributes import ALL


async def main(seconds: float, guard_on: bool) -> None:
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=binary("temporal"), search_attributes=list(ALL),
                                                dev_server_extra_args=DEV_SERVER_ARGS, data_converter=_converter())
    tmp = pathlib.Path(tempfile.mkdtemp())
    try:
        client = env.client
        spec = spec_for(tmp, "q", "stale", missed={"policy": "catch_up", "bound": 100}, schedule_wake_ahead="0s")
        write_sheet(tmp, [("t1", "")])
        worker = Worker(client, task_queue="q", plugins=[WfiPlugin(sample_runs=True)], max_cached_workflows=0)
        if guard_on:
            _uncached.record("q", max_cached_workflows=None)
        async with worker:
            wfi = WfiClient(client, task_queue="q", max_attempts=3)
            await wfi.activate(spec)
            h = client.get_workflow_handle("wfi-activation:stale")
            end = time.monotonic() + seconds
            out = collections.Counter()
            async def querier():
                while time.monotonic() < end:
                    try:
                        await asyncio.wait_for(h.query("summary"), 15); out["ok"] += 1
                    except Exception as e:
                        out[type(e).__name__ + ":" + str(e)[:50]] += 1
            await asyncio.gather(*(querier() for _ in range(8)))
            print("queries", dict(out), flush=True)
            t0 = time.monotonic()
            i = 0
            while time.monotonic() - t0 < 600:
                i += 1
                try:
                    r = await asyncio.wait_for(wfi.deliver("stale", hook(f"after{i}"), entry="hook"), 30)
                    print(f"delivery accepted {time.monotonic()-t0:.1f}s after the queries stopped: {r.disposition}", flush=True)
                    break
                except Exception as e:
                    print(f"{time.monotonic()-t0:.1f}s: {type(e).__name__}: {str(e)[:90]}", flush=True)
                    await asyncio.sleep(5)
            async for ev in h.fetch_history_events():
                if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                    a = ev.workflow_task_failed_event_attributes
                    print("WFT failed at event", ev.event_id, ev.event_time.ToDatetime(), a.cause, a.failure.message[:160], flush=True)
    finally:
        await env.shutdown()

asyncio.run(main(float(sys.argv[1]), "--guard-on" in sys.argv))
