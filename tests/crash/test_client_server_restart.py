"""WfiClient rides out a restart of the server with the same update id (split from
tests/integration/test_hostile_minor.py: the test stops and restarts a dev server of its own)."""

from __future__ import annotations

import asyncio
import pathlib

import pytest
from temporalio.client import WorkflowExecutionStatus

from tests.support.activation import make_spec, unique
from tests.support.hostile import HOOK, hook, run_started, still_serves
from tests.support.restart import connect, listed, ride_out
from tests.support.runs import describe_or_none
from tests.support.temporal import DEV_SERVER_ARGS, binary
from tests.support.worker_proc import DevServerProcess, WorkerProcess, free_port
from wf_initiation.client import WfiClient
from wf_initiation.wire import workflow_id_for


@pytest.mark.crash
async def test_wfi_client_rides_out_a_server_restart_with_the_same_update_id(tmp_path: pathlib.Path) -> None:
    # proves: EXT-8, EXT-3
    server = DevServerProcess(binary("temporal"), str(tmp_path / "temporal.db"), free_port(), DEV_SERVER_ARGS)
    server.start()
    task_queue = unique("restart")
    worker = WorkerProcess(server.address, task_queue)
    try:
        client = await connect(server.address)
        wfi = WfiClient(client, task_queue=task_queue, max_attempts=400)
        name = unique("restart")
        worker.start()
        await wfi.activate(make_spec(tmp_path, HOOK.format(name=name, extra=""), task_queue=task_queue))
        server.stop()
        delivery = asyncio.create_task(wfi.deliver(name, hook("during-restart")))
        # A test's own direct calls ride out the restart too (tests/support/restart.py).
        described = asyncio.create_task(describe_or_none(client, workflow_id_for(name)))
        listing = asyncio.create_task(ride_out(lambda: listed(client, f"WorkflowId = '{workflow_id_for(name)}'")))
        # The outage under test, nothing to wait on: for 1.5 s the callers meet no server (transport
        # errors) and retry, and none of them may finish meanwhile.
        await asyncio.sleep(1.5)
        assert not delivery.done() and not described.done() and not listing.done()
        server.start()
        result = await asyncio.wait_for(delivery, timeout=120)
        desc = await asyncio.wait_for(described, timeout=120)
        assert desc is not None and desc.status == WorkflowExecutionStatus.RUNNING
        assert [e.id for e in await asyncio.wait_for(listing, timeout=120)] == [workflow_id_for(name)]
        assert result.disposition.value == "accepted"
        again = await wfi.deliver(name, hook("during-restart"))
        assert again.run_key == result.run_key
        await run_started(client, result.run_key, timeout=120)
        await still_serves(wfi, client, name)
    finally:
        worker.stop()
        server.stop()
