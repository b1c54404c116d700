"""Crash and restart: thousands of deliveries while the worker is SIGKILLed and the server restarts."""

from __future__ import annotations

import asyncio
import pathlib
import random
from collections import defaultdict

import pytest
from temporalio.client import Client

from tests.support.activation import make_spec, unique
from tests.support.replay import diagnose
from tests.support.restart import connect, listed, ride_out
from tests.support.temporal import DEV_SERVER_ARGS, binary
from tests.support.waits import assert_eventually, assert_settles
from tests.support.worker_proc import DevServerProcess, WorkerProcess, free_port
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import Disposition

# Longer than the suite's 480 s, by its own bounds: up to 420 s of sending (the wait_for below) and
# 600 s of settling (assert_settles in _verify), plus the server's, the worker's and the activation's
# starts: 1,200 s. A wedge fails sooner, by assert_settles's 200 s stall.
pytestmark = [pytest.mark.crash, pytest.mark.timeout(1200)]

DISTINCT = 1500
KEYS = 12
CLIENTS = 8


def hook(i: int, variant: str = "") -> dict:
    return {"delivery_id": f"evt-{i}", "method": "POST", "body": {"key": f"k{i % KEYS}", "n": i, "v": variant}}


async def test_no_accepted_event_is_lost_or_run_twice_across_worker_kills_and_a_server_restart(tmp_path: pathlib.Path) -> None:
    # proves: INIT-7, EXT-3, EXT-4, EXT-8, EXT-11, TRIG-11, SCHED-5
    server = DevServerProcess(binary("temporal"), str(tmp_path / "temporal.db"), free_port(), DEV_SERVER_ARGS)
    server.start()
    task_queue = unique("restart")
    name = unique("orders")
    client = await connect(server.address)
    wfi = WfiClient(client, task_queue=task_queue, max_attempts=400)
    spec = make_spec(tmp_path, f"""
        name: {name}
        on:
          http.request: {{}}
          queue_by: "{{{{ request.body.key }}}}"
    """, task_queue=task_queue)
    worker = WorkerProcess(server.address, task_queue)
    worker.start()
    await wfi.activate(spec)

    rng = random.Random(7)
    plan: list[tuple[int, str]] = [(i, "") for i in range(DISTINCT)]
    plan += [(rng.randrange(DISTINCT), "") for _ in range(DISTINCT * 3 // 10)]  # ~30% duplicates
    plan += [(rng.randrange(DISTINCT), "changed") for _ in range(40)]  # conflicting payloads
    rng.shuffle(plan)
    acks: dict[str, list[Disposition]] = defaultdict(list)
    ack_runs: dict[str, set[str | None]] = defaultdict(set)
    done = asyncio.Event()

    answered = [0]

    async def sender(worklist: list[tuple[int, str]]) -> None:
        for i, variant in worklist:
            result = await wfi.deliver(name, hook(i, variant))
            acks[f"evt-{i}"].append(result.disposition)
            ack_runs[f"evt-{i}"].add(result.run_key)
            answered[0] += 1

    async def answered_more(than: int) -> None:
        assert answered[0] >= than + len(plan) // 8 or done.is_set(), "deliveries still flowing before the next kill"

    async def chaos() -> None:
        for kill in range(4):
            # Each kill comes after an eighth of the plan was acknowledged since the last restart:
            # while deliveries flow, however fast this machine is today.
            await assert_eventually(lambda since=answered[0]: answered_more(since), timeout=300, interval=0.05)
            if done.is_set():
                return
            worker.kill()
            await asyncio.sleep(0.5)  # the worker's outage under test: callers meet a dead worker
            if kill == 2:  # the dev server itself stops and restarts on its SQLite file
                server.stop()
                # The server's outage under test, nothing to wait on: for 1 s callers meet no server.
                await asyncio.sleep(1.0)
                server.start()
                await connect(server.address)  # up again: the worker can connect
            worker.start(timeout=60)

    chaos_task = asyncio.create_task(chaos())
    try:
        # Bounded: a caller whose update was lost in the server restart times out and retries.
        await asyncio.wait_for(asyncio.gather(*(sender(plan[c::CLIENTS]) for c in range(CLIENTS))), timeout=420)
        done.set()
        await chaos_task
        if worker.proc is None or worker.proc.poll() is not None:
            worker.start(timeout=60)
        assert worker.starts >= 4, "the worker was killed and restarted at least three times"
        await _verify(wfi, client, name, acks, ack_runs)
    finally:
        worker.stop()
        server.stop()


async def _verify(
    wfi: WfiClient, client: Client, name: str, acks: dict[str, list[Disposition]], ack_runs: dict[str, set[str | None]]
) -> None:
    open_runs: list[dict[str, str]] = [{}]

    async def settled() -> dict:
        state = await wfi.state(name, include_events=True)
        open_runs[0] = {key: run["status"] for key, run in state["runs"].items()}
        assert not state["runs"], f"{len(state['runs'])} runs not yet terminal"
        return state

    # The backlog of queued runs drains at the speed of this machine: wait while it drains, and fail
    # once nothing changed for 200 s (longer than a start activity's 8 attempts take to give up).
    try:
        state = await assert_settles(settled, lambda: open_runs[0], stall=200, timeout=600)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{await diagnose(client, name, 'runs_pending', 'runs_starting', 'runs_running', 'queues')}") from None
    events = state["events"]
    # A retry (or a second client sending the very same delivery) shares the update id and gets the
    # original disposition back; a later delivery gets `duplicate`; either way one run key.
    accepted = set(acks)
    assert len(accepted) == DISTINCT
    for delivery_id, dispositions in acks.items():
        assert set(dispositions) <= {Disposition.ACCEPTED, Disposition.QUEUED, Disposition.DUPLICATE, Disposition.CONFLICT}
        assert Disposition.ACCEPTED in dispositions or Disposition.QUEUED in dispositions, delivery_id
        assert len(ack_runs[delivery_id]) == 1, f"{delivery_id}: every acknowledgement names the same run"
        record = events[f"request\x1f{delivery_id}"]
        assert record["run_key"] and record["released_at"], f"{delivery_id}: acknowledged, retained, run terminal"
    conflicted = {d for d, ds in acks.items() if Disposition.CONFLICT in ds}
    recorded = {e["delivery_id"] for e in state["errors"] if e["kind"] == "conflict"}
    assert conflicted and recorded == conflicted, "every conflicting delivery is recorded as an initiation error"

    run_keys = {events[f"request\x1f{d}"]["run_key"] for d in accepted}
    assert len(run_keys) == DISTINCT, "one run key per distinct event"
    started: dict[str, object] = {}
    query = f'WfiActivation = "{state["activation_id"]}" AND WorkflowType = "wfi.EchoRun"'
    for wf in await ride_out(lambda: listed(client, query)):
        assert wf.id not in started, f"{wf.id} started twice"
        started[wf.id] = wf.start_time
    missing = run_keys - set(started)
    assert not missing, f"{len(missing)} accepted events have no run, e.g. {sorted(missing)[:3]}"
    assert set(started) == run_keys, "no run exists for an event that was not accepted"

    by_key: dict[str, list[tuple[int, object]]] = defaultdict(list)
    for d in accepted:
        record = events[f"request\x1f{d}"]
        by_key[f"k{int(d.split('-')[1]) % KEYS}"].append((record["seq"], started[record["run_key"]]))
    for key, runs in by_key.items():
        runs.sort()
        starts = [s for _, s in runs]
        assert starts == sorted(starts), f"queue {key}: runs started out of acceptance order"
