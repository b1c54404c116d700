"""Crash test of scheduled initiation: a real worker process is SIGKILLed around run starts.

A ``1s`` interval schedule runs on the dev server; the worker process is killed five times, each
time as soon as the activation's state shows a run admitted but not yet started (``starting``) or
after at most two seconds, and started again. Runs go to a task queue no worker serves, so each
stays open: what is checked is that every occurrence of the span was *started* exactly once —
none lost, none twice — and that the engine admitted each instant once (SCHED-5).
"""

from __future__ import annotations

import asyncio
import pathlib
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from tests.support.activation import make_spec, unique
from tests.support.replay import assert_replays
from tests.support.waits import assert_eventually
from tests.support.worker_proc import WorkerProcess
from wf_initiation.client import WfiClient
from wf_initiation.core import schedule as seq
from wf_initiation.errors import WfiError
from wf_initiation.wire import OperatorRequest

KILLS = 5


async def kill_while_starting(wfi: WfiClient, name: str, worker: WorkerProcess) -> bool:
    """Kill the worker as soon as a run is `starting` (True), or after 2 s regardless (False)."""
    deadline = asyncio.get_running_loop().time() + 2.0
    while asyncio.get_running_loop().time() < deadline:
        try:
            if (await wfi.summary(name))["runs_starting"] > 0:
                worker.kill()
                return True
        except WfiError:  # the activation is not up yet
            pass
        await asyncio.sleep(0.005)
    worker.kill()
    return False


@pytest.mark.crash
@pytest.mark.slow
async def test_killing_the_worker_around_run_starts_gives_each_occurrence_exactly_one_run(
    dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: SCHED-5, SCHED-13
    client: Client = dev_env.client
    name = unique("crash")
    spec = make_spec(tmp_path, f"name: {name}\non:\n  time.schedule: {{interval: 1s}}\n", task_queue=task_queue,
                     run_queue=unique("no-worker"), late_after="1m")
    wfi = WfiClient(client, task_queue=task_queue, max_attempts=200)
    worker = WorkerProcess(client.service_client.config.target_host, task_queue)
    worker.start()
    caught_starting = 0
    try:
        await wfi.activate(spec)
        for _ in range(KILLS):
            caught_starting += await kill_while_starting(wfi, name, worker)
            worker.start()
        restarted = datetime.now(UTC)

        async def admitted_after_the_last_restart() -> None:  # a last stretch of undisturbed occurrences
            occurrences = (await wfi.state(name))["schedules"]["schedule"]["occurrences"]
            assert any(o["disposition"] == "admitted" and seq.parse_instant(o["scheduled_at"]) > restarted
                       for o in occurrences), "no occurrence admitted since the last restart"

        await assert_eventually(admitted_after_the_last_restart, timeout=30)
        await wfi.operate(name, OperatorRequest(action="pause"))
        state = await wfi.state(name)
        await check_each_started_once(client, spec.activation_id, state)
    finally:
        worker.stop()
        await assert_replays(client, f"wfi-activation:{name}")  # what the crashes wrote replays with this code
    print(f"kills landing while a run was starting: {caught_starting}/{KILLS}")
    assert worker.starts == KILLS + 1


async def check_each_started_once(client: Client, activation_id: str, state: dict) -> None:
    """Every admitted instant of the span has exactly one run execution (the worker must be up)."""
    sched = state["schedules"]["schedule"]
    log = [(seq.parse_instant(o["scheduled_at"]), o["disposition"]) for o in sched["occurrences"]]
    admitted = [t for t, d in log if d == "admitted"]
    assert len(admitted) >= 8 and [d for _, d in log if d != "admitted"] == [], log
    grid = seq.occurrences_between(seq.parse_schedule({"interval": "1s"}), admitted[0] - timedelta(seconds=1), admitted[-1], 1000)
    assert admitted == grid, "every instant of the span admitted once, none lost across the kills"

    expected = {f"{activation_id}/schedule/{t.strftime('%Y%m%dT%H%M%SZ')}" for t in admitted}

    async def all_started() -> None:
        # A start activity lost with a killed worker is retried after its start_to_close timeout (60 s).
        for run_key in sorted(expected):
            try:
                await client.get_workflow_handle(run_key).describe()
            except RPCError as exc:
                raise AssertionError(f"{run_key} not started yet: {exc}") from exc

    await assert_eventually(all_started, timeout=150, interval=1.0)
    query = f"WfiActivation = '{activation_id}' AND WorkflowType = 'wfi.EchoRun'"

    async def each_started_once() -> Counter[str]:
        ids = Counter([w.id async for w in client.list_workflows(query)])
        assert set(ids) == expected, f"missing {sorted(expected - set(ids))}, extra {sorted(set(ids) - expected)}"
        return ids

    started = await assert_eventually(each_started_once, timeout=60)
    assert max(started.values()) == 1, "no occurrence has a second execution"
    assert state["counters"]["runs_started"] == len(admitted)
