"""Queue keys across shards (core.sharding, lanes) through a SIGKILLed worker and a restarted server.

Deliveries by update and by signal go on while the worker is killed and the server restarted: an
event taken by its id's shard and routed to its key's shard is taken there exactly once (an update
sent on again by the retrying client, a signal passed on by the id's shard), each key's runs never
overlap and start in the order the key's shard took them, and no id runs twice.
"""

from __future__ import annotations

import asyncio
import pathlib

import pytest

from tests.support.activation import KEYED_HOOKS, make_spec, unique
from tests.support.hostile import hook, still_serves
from tests.support.restart import connect, listed, ride_out
from tests.support.temporal import DEV_SERVER_ARGS, binary
from tests.support.waits import assert_eventually, until_length
from tests.support.worker_proc import DevServerProcess, WorkerProcess, free_port
from wf_initiation.client import WfiClient
from wf_initiation.wire import ECHO_RUN_WORKFLOW

WORKFILE = KEYED_HOOKS
KEYS = [f"k-{n}" for n in range(6)]
SIGNAL_PACE = 0.05
"""Seconds between two signals of the signal sender: ~20 a second, before, during and after the outage."""


@pytest.mark.crash
async def test_keyed_events_across_shards_run_once_in_order_through_a_killed_worker_and_a_restarted_server(
    tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-8, EXT-11, EXT-3
    server = DevServerProcess(binary("temporal"), str(tmp_path / "temporal.db"), free_port(), DEV_SERVER_ARGS)
    server.start()
    task_queue = unique("lanes-crash")
    worker = WorkerProcess(server.address, task_queue)
    name = unique("lanes-crash")
    try:
        client = await connect(server.address)
        wfi = WfiClient(client, task_queue=task_queue, max_attempts=400)
        worker.start()
        await wfi.activate(make_spec(tmp_path, WORKFILE.format(name=name), task_queue=task_queue,
                                     lifecycle_events=False, scale={"shards": 4}))
        answers: list = []
        signalled: list[str] = []
        stop = asyncio.Event()

        async def by_update(key: str) -> None:
            n = 0
            while not stop.is_set():
                answers.append(await wfi.deliver(name, hook(f"{key}-u{n}", k=key, sleep_seconds=0.1)))
                n += 1

        async def by_signal() -> None:
            # Paced: unpaced, ~90 signals/s queued ~60 runs per key, one at a time; draining them took
            # 63 s alone and past the 180 s below with the suite's four workers on a slow machine.
            n = 0
            while not stop.is_set():
                ident = f"s{n}"
                await wfi.signal_delivery(name, hook(ident, k=KEYS[n % len(KEYS)], sleep_seconds=0.1))
                signalled.append(ident)
                n += 1
                await asyncio.sleep(SIGNAL_PACE)

        senders = [asyncio.create_task(by_update(k)) for k in KEYS[:3]] + [asyncio.create_task(by_signal())]
        await until_length(answers, 6)  # traffic flows before the kill
        worker.kill()
        await asyncio.sleep(1.0)  # the worker's outage under test, nothing to wait on: callers meet a dead worker
        server.stop()
        await asyncio.sleep(1.0)  # the server's outage under test: callers meet no server
        server.start()
        worker.start()
        await until_length(answers, len(answers) + 12)  # and again after both are back
        stop.set()
        await asyncio.wait_for(asyncio.gather(*senders), timeout=240)
        assert answers and {r.disposition.value for r in answers} <= {"accepted", "queued"}, \
            {r.disposition.value for r in answers}
        assert signalled

        async def taken_once_in_order() -> None:
            runs: dict[str, list] = {}
            for wf in await ride_out(lambda: listed(client, f"WorkflowType = '{ECHO_RUN_WORKFLOW}'")):
                if wf.id.startswith(f"{name}@"):
                    runs.setdefault(wf.id.rsplit("/", 1)[-1], []).append(wf)
            assert not {i: len(w) for i, w in runs.items() if len(w) > 1}, "an id ran twice"
            expected = {r.delivery_id for r in answers} | set(signalled)
            missing = sorted(expected - set(runs))[:5]
            if missing:  # what the activation holds of them tells a backlog (queued) from a loss (none)
                held = {i: await wfi.delivery(name, "hook", i) for i in missing}
                raise AssertionError(f"{len(expected - set(runs))} not run (yet); of the first: {held}")
            for key in KEYS:
                records = [await wfi.delivery(name, "hook", i) for i in expected if _key_of(i) == key]
                spans = sorted((r["seq"], runs[r["delivery_id"]][0]) for r in records if r)
                assert all(wf.close_time is not None for _, wf in spans), f"key {key}: not all ended yet"
                for (_, a), (_, b) in zip(spans, spans[1:]):
                    assert b.start_time >= a.close_time, f"key {key}: {a.id} and {b.id} overlapped or ran out of order"

        def _key_of(ident: str) -> str:
            if ident.startswith("s"):
                return KEYS[int(ident[1:]) % len(KEYS)]
            return ident.rsplit("-u", 1)[0]

        await assert_eventually(taken_once_in_order, timeout=180)
        await still_serves(wfi, client, name, k="after")
    finally:
        worker.stop()
        server.stop()


@pytest.mark.crash
async def test_a_split_moving_queue_keys_keeps_their_order_through_a_killed_worker_and_a_restarted_server(
    tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-11, EXT-8, INIT-4
    server = DevServerProcess(binary("temporal"), str(tmp_path / "temporal.db"), free_port(), DEV_SERVER_ARGS)
    server.start()
    task_queue = unique("lanes-split-crash")
    worker = WorkerProcess(server.address, task_queue)
    name = unique("lanes-split-crash")

    def spec(shards: int):  # noqa: ANN202
        return make_spec(tmp_path, WORKFILE.format(name=name), task_queue=task_queue, lifecycle_events=False,
                         scale={"shards": shards})

    try:
        client = await connect(server.address)
        wfi = WfiClient(client, task_queue=task_queue, max_attempts=400)
        worker.start()
        await wfi.activate(spec(2))
        sent: dict[str, list] = {k: [] for k in KEYS}
        all_sent: list = []  # every answer, in any key's order: how much traffic flowed
        stop = asyncio.Event()

        async def by_update(key: str) -> None:  # one sender per key: the key's order is the sending order
            sender = WfiClient(client, task_queue=task_queue, max_attempts=400)
            n = 0
            while not stop.is_set():
                sent[key].append(await sender.deliver(name, hook(f"{key}-u{n}", k=key, sleep_seconds=0.3)))
                all_sent.append(sent[key][-1])
                n += 1

        senders = [asyncio.create_task(by_update(k)) for k in KEYS]
        await until_length(all_sent, 2 * len(KEYS))  # traffic flows before the kill
        worker.kill()
        split = asyncio.create_task(wfi.activate(spec(4)))
        await asyncio.sleep(1.0)  # the worker's outage under test, nothing to wait on: the split meets a dead worker
        server.stop()
        await asyncio.sleep(1.0)  # the server's outage under test: callers meet no server
        server.start()
        worker.start()
        done = await asyncio.wait_for(split, timeout=180)
        assert "split from 2 into 4 shards" in (done.note or ""), done
        await until_length(all_sent, len(all_sent) + 2 * len(KEYS))  # and again on the four shards
        stop.set()
        await asyncio.wait_for(asyncio.gather(*senders), timeout=240)
        odd = [r for rs in sent.values() for r in rs if r.disposition.value not in ("accepted", "queued")]
        assert not odd, odd

        async def each_key_ran_once_in_order() -> None:
            runs: dict[str, list] = {}
            for wf in await ride_out(lambda: listed(client, f"WorkflowType = '{ECHO_RUN_WORKFLOW}'")):
                if wf.id.startswith(f"{name}@"):
                    runs.setdefault(wf.id.rsplit("/", 1)[-1], []).append(wf)
            assert not {i: len(w) for i, w in runs.items() if len(w) > 1}, "an id ran twice"
            for key, results in sent.items():
                ran = [runs.get(r.delivery_id, [None])[0] for r in results]
                assert all(wf is not None and wf.close_time is not None for wf in ran), f"key {key}: not all ended yet"
                for a, b in zip(ran, ran[1:]):
                    assert b.start_time >= a.close_time, f"key {key}: {b.id} started before {a.id} ended"

        await assert_eventually(each_key_ran_once_in_order, timeout=240)
        await still_serves(wfi, client, name, k="after-split")
    finally:
        worker.stop()
        server.stop()
