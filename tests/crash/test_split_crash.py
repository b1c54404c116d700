"""A split of a live activation (issue 21 item 4) through a SIGKILLed worker and a restarted server.

The worker is killed as the split begins and the server is restarted while it waits; deliveries and
redeliveries go on from clients whose routing predates the split. Once a worker is back the split
completes, every id taken before it is still answered with its first run, and no id runs twice.
"""

from __future__ import annotations

import asyncio
import pathlib
from collections import Counter

import pytest

from tests.support.activation import make_spec, unique
from tests.support.hostile import hook, still_serves
from tests.support.restart import connect, listed, ride_out
from tests.support.temporal import DEV_SERVER_ARGS, binary
from tests.support.waits import assert_eventually, until_length
from tests.support.worker_proc import DevServerProcess, WorkerProcess, free_port
from wf_initiation.client import WfiClient
from wf_initiation.core.sharding import shard_of
from wf_initiation.wire import ECHO_RUN_WORKFLOW

WORKFILE = """
name: {name}
on:
  http.request: {{}}
  as: hook
"""


@pytest.mark.crash
async def test_a_split_survives_a_killed_worker_and_a_restarted_server(tmp_path: pathlib.Path) -> None:
    # proves: EXT-3, EXT-8
    server = DevServerProcess(binary("temporal"), str(tmp_path / "temporal.db"), free_port(), DEV_SERVER_ARGS)
    server.start()
    task_queue = unique("split-crash")
    worker = WorkerProcess(server.address, task_queue)
    name = unique("split-crash")

    def spec(shards: int):  # noqa: ANN202
        return make_spec(tmp_path, WORKFILE.format(name=name), task_queue=task_queue, lifecycle_events=False,
                         scale={"shards": shards})

    try:
        client = await connect(server.address)
        wfi = WfiClient(client, task_queue=task_queue, max_attempts=400)
        worker.start()
        await wfi.activate(spec(2))
        before = [f"d-{i}" for i in range(40)]
        first = {r.delivery_id: r for r in await asyncio.gather(*(wfi.deliver(name, hook(i)) for i in before))}
        stale = WfiClient(client, task_queue=task_queue, max_attempts=400)
        assert await stale.shards(name) == 2

        sent: list = []
        stop = asyncio.Event()

        async def traffic() -> None:
            n = 0
            while not stop.is_set():
                sent.append(await stale.deliver(name, hook(before[n % len(before)])))
                sent.append(await stale.deliver(name, hook(f"n-{n}")))
                n += 1

        sender = asyncio.create_task(traffic())
        await until_length(sent, 4)  # traffic flows before the kill
        worker.kill()
        split = asyncio.create_task(wfi.activate(spec(4)))
        await asyncio.sleep(1.0)  # the worker's outage under test, nothing to wait on: the split meets a dead worker
        server.stop()
        await asyncio.sleep(1.0)  # the server's outage under test: callers meet no server
        server.start()
        worker.start()
        done = await asyncio.wait_for(split, timeout=180)
        assert "split from 2 into 4 shards" in (done.note or ""), done
        await until_length(sent, len(sent) + 20)  # traffic flows on the four shards
        stop.set()
        await asyncio.wait_for(sender, timeout=180)
        assert all(r.disposition.value in ("accepted", "duplicate") for r in sent), sent

        assert any(shard_of("hook", i, 4) >= 2 for i in before)
        # Own update ids: each redelivery is judged by the activation (the same id would be answered by
        # its first attempt, `accepted`, where that run still knows it).
        again = await asyncio.gather(*(stale.deliver(name, hook(i), update_id=f"again-{i}") for i in before))
        assert [(r.disposition.value, r.run_key) for r in again] == [("duplicate", first[i].run_key) for i in before]

        async def each_id_ran_once() -> None:
            runs = Counter(wf.id.rsplit("/", 1)[-1] for wf in await ride_out(
                lambda: listed(client, f"WorkflowType = '{ECHO_RUN_WORKFLOW}'")) if wf.id.startswith(f"{name}@"))
            assert set(before) <= set(runs)
            assert not {k: n for k, n in runs.items() if n > 1}, "an id ran twice"

        await assert_eventually(each_id_ran_once, timeout=120)
        await still_serves(wfi, client, name)
    finally:
        worker.stop()
        server.stop()
