"""An activation growing itself (issue 35 item 3) through a worker SIGKILLed during its automatic split.

The worker (a subprocess, its capacity lowered so shards fill in seconds) is killed as soon as the
split's first new shard exists, before shard 0 has switched; deliveries go on from a client that
retries. Once a worker is back, the split completes (its activity is retried: the split is
idempotent), the activation runs on twice its shards, recorded once in the operator log, and no
delivery is lost or run twice: a queue key's events run one at a time in order and ids taken before
the growth are still duplicates.
"""

from __future__ import annotations

import asyncio
import pathlib
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from tests.support.activation import make_spec, unique
from tests.support.hostile import hook, still_serves
from tests.support.replay import assert_replays
from tests.support.restart import connect, listed, ride_out
from tests.support.temporal import DEV_SERVER_ARGS, binary
from tests.support.waits import assert_eventually
from tests.support.worker_proc import DevServerProcess, WorkerProcess, free_port
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import _growth, _intake
from wf_initiation.core.limits import BYTES_PER_LIVE_RECORD, STATE_BASE_BYTES
from wf_initiation.core.sharding import lane_of
from wf_initiation.wire import ACTIVATE_UPDATE, ECHO_RUN_WORKFLOW, shard_workflow_id

WORKFILE = """
name: {name}
on:
  http.request: {{}}
  as: hook
  when: "{{{{ hook.body.go }}}}"
  queue_by: "{{{{ hook.body.k }}}}"
"""
CAPACITY = STATE_BASE_BYTES + 300 * BYTES_PER_LIVE_RECORD  # about 300 retained ids per shard
CHECK_SECONDS = 1.0
FILL_AFTER_SPLIT = 100
"""Filler ids sent once the split began: a parent keeps every id it took until its retention (a day
here) ends, so a split that began late (the check lags on a loaded machine) must leave it room."""


async def exists(client: Client, workflow_id: str) -> bool:
    """Whether the server has the workflow (asked of it alone: no worker needed)."""
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


async def switched(client: Client, workflow: str, activation_id: str) -> bool:
    """Whether shard 0 accepted the grown binding (the split's last step), read from its histories."""
    for run in await ride_out(lambda: listed(client, f'WorkflowId = "{shard_workflow_id(workflow, 0)}"')):
        history = await ride_out(client.get_workflow_handle(run.id, run_id=run.run_id).fetch_history)
        for event in history.events:
            if event.HasField("workflow_execution_update_accepted_event_attributes"):
                request = event.workflow_execution_update_accepted_event_attributes.accepted_request
                if request.input.name == ACTIVATE_UPDATE and activation_id.encode() in request.input.args.payloads[0].data:
                    return True
    return False


async def runs_of(client: Client, name: str) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for wf in await ride_out(lambda: listed(client, f"WorkflowType = '{ECHO_RUN_WORKFLOW}'")):
        if wf.id.startswith(f"{name}@"):
            found.setdefault(wf.id.rsplit("/", 1)[-1], []).append((wf.start_time, wf.close_time))
    return found


@pytest.mark.crash
async def test_an_automatic_split_killed_half_way_completes_and_loses_or_doubles_nothing(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: EXT-3, EXT-8, EXT-11
    monkeypatch.setattr(_intake, "CAPACITY_BYTES", CAPACITY)  # as in the worker: the histories replay here
    monkeypatch.setattr(_growth, "GROW_CHECK_EVERY", timedelta(seconds=CHECK_SECONDS))
    server = DevServerProcess(binary("temporal"), str(tmp_path / "temporal.db"), free_port(), DEV_SERVER_ARGS)
    server.start()
    task_queue = unique("grow-crash")
    worker = WorkerProcess(server.address, task_queue, capacity_bytes=CAPACITY, grow_check_seconds=CHECK_SECONDS,
                           log_path=str(tmp_path / "worker.log"))
    name = unique("grow-crash")
    spec = make_spec(tmp_path, WORKFILE.format(name=name), task_queue=task_queue, lifecycle_events=False,
                     scale={"shards": 2, "grow_at": 0.3, "max_shards": 4})
    key = next(k for k in (f"k-{n}" for n in range(100)) if lane_of(f'"{k}"', 4) >= 2)  # its lane moves at the split
    try:
        client = await connect(server.address)
        wfi = WfiClient(client, task_queue=task_queue, max_attempts=400)
        worker.start()
        await wfi.activate(spec)
        keyed: list[Any] = []
        filled: list[str] = []
        stop = asyncio.Event()

        async def deliver_keyed() -> None:  # a deferred delivery is sent again later, as a sender does
            ident = f"{key}-e{len(keyed)}"

            async def taken() -> None:
                result = await wfi.deliver(name, hook(ident, go=True, k=key, sleep_seconds=0.3))
                assert result.disposition.value in ("accepted", "queued"), result
                keyed.append(result)

            # as long as the growth may take on a loaded machine (the kill, the restart, the split): deferred till then
            await assert_eventually(taken, timeout=300, interval=1)

        fill_sent, fill_limit = 0, 1 << 30  # the limit is set once the split began

        async def traffic() -> None:
            nonlocal fill_sent
            tick = 0
            while not stop.is_set():
                if fill_sent < fill_limit:
                    batch = [f"fill-{fill_sent + i}" for i in range(25)]
                    results = await wfi.deliver_many(name, [(None, hook(i, go=False, k="f")) for i in batch])
                    filled.extend(i for i, r in zip(batch, results) if r.disposition.value == "suppressed")
                    fill_sent += 25
                tick += 1
                if tick % 3 == 0:
                    await deliver_keyed()
                await asyncio.sleep(0.5)  # a steady rate: the shards fill in seconds, not at once

        for _ in range(3):
            await deliver_keyed()
        sender = asyncio.create_task(traffic())

        async def split_began() -> None:
            assert await exists(client, shard_workflow_id(name, 2))

        await assert_eventually(split_began, timeout=120, interval=0.02)
        fill_limit = fill_sent + FILL_AFTER_SPLIT
        worker.kill()  # the split's new shards are starting; shard 0 has not switched
        grown_id = spec.grown(4).activation_id
        assert not await switched(client, name, grown_id), "killed during the split, before its last step"
        worker.start()

        async def grown() -> None:
            assert await WfiClient(client, task_queue=task_queue).shards(name) == 4
            assert await switched(client, name, grown_id)

        await assert_eventually(grown, timeout=180, interval=1)
        stop.set()
        await asyncio.wait_for(sender, timeout=360)  # its last keyed delivery may wait 300 s
        await deliver_keyed()

        state = await wfi.state(name)
        grows = [a for a in state["operator_log"] if a["action"] == "grow"]
        assert len(grows) == 1 and grows[0]["detail"].startswith("from 2 to 4 shards"), grows

        async def each_ran_once_in_order() -> None:
            runs = await runs_of(client, name)
            assert all(len(spans) == 1 for spans in runs.values()), {k: v for k, v in runs.items() if len(v) > 1}
            assert set(runs) == {r.delivery_id for r in keyed}, "every keyed event ran; no suppressed id did"
            spans = [runs[r.delivery_id][0] for r in keyed]
            assert all(span[1] is not None for span in spans), ("not all ended yet", spans)
            for n, ((_, closed), (started, _)) in enumerate(zip(spans, spans[1:])):
                assert started >= closed, f"e{n + 1} started before e{n} ended: {spans}"

        await assert_eventually(each_ran_once_in_order, timeout=180)
        again = await wfi.deliver_many(name, [(None, hook(i, go=False, k="f")) for i in filled])
        assert {r.disposition.value for r in again} == {"duplicate"}, "ids taken before and during the growth"
        assert (await wfi.activate(spec)).outcome == "unchanged", "wfi activate keeps the shards it grew to"
        await still_serves(wfi, client, name, go=True, k="after")
        for shard in range(4):
            await assert_replays(client, shard_workflow_id(name, shard))
    finally:
        worker.stop()
        server.stop()
