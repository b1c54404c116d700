"""Scheduled initiation over weeks and months of workflow time, on the time-skipping test server.

A daily 09:00 ``Europe/Berlin`` schedule runs for 30 days with the worker stopped for ten of them,
under ``missed: skip`` and under ``missed: catch_up`` with a bound smaller than the gap; the exact
runs, the skipped occurrences and the overflow range are checked against instants computed here
with ``zoneinfo`` alone (no croniter). Then DST days in ``America/New_York`` through the live
activation (SCHED-2).

Time skipping advances only while this client awaits a workflow result or calls ``env.sleep``.
The server has no visibility list: runs are found by their run keys (the occurrence identity,
SCHED-13) and read with ``get_workflow_handle(run_key)``.

Two things about the time-skipping server shape these tests:

* It holds its clock still while a workflow task is scheduled (its ``scheduleWorkflowTask`` time
  lock), so with no worker the first timer that fires stops the clock: a worker outage of days
  cannot happen there by itself. :func:`worker_outage` releases that one lock for the outage and
  takes it back before the new worker starts, so the clock runs through the outage as a real
  server's does, while the activation's workflow task waits for a worker.
* Tasks left on a stopped worker's sticky queue never move there (it has no sticky
  schedule-to-start timeout and no ``ResetStickyTaskQueue``), so the workers that stop run with
  ``max_cached_workflows=0``. Such a worker evicts the activation after every task, also while
  its run-start local activity is in flight, and sometimes drops that task (sdk-core warns "local
  activities when using max_cached_workflows=0 are likely to be dropped or retried"); the task
  then times out and is retried (the start is idempotent). With the default 10 s task timeout each
  drop holds the clock for 10 s, so those tests start the activation workflow themselves with a
  short task timeout, then activate through ``WfiClient.activate`` as usual.

The tests run on their own time-skipping server: they move its clock months ahead and change its
lock count, which must not touch the activations of other test modules.
"""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import pytest_asyncio
from temporalio.api.testservice.v1 import LockTimeSkippingRequest, SleepRequest, UnlockTimeSkippingRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.runs import describe_or_none
from tests.support.temporal import start_time_skipping
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import OperatorRequest, workflow_id_for
from wf_initiation.workflows.activation import ActivationWorkflow

# These tests skip a time-skipping server through months of schedule; two at once on a 2-core
# machine slowed the server's sleep calls past their RPC timeout. One xdist worker runs them in turn.
pytestmark = pytest.mark.xdist_group("timeskipping")

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
LATE_AFTER = timedelta(minutes=1)
BOUND = 3
TASK_TIMEOUT = timedelta(seconds=2)


@pytest_asyncio.fixture(scope="module")
async def ts_env() -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping server for this module alone (see the module docstring)."""
    env = await start_time_skipping()
    yield env
    await env.shutdown()


@pytest.fixture
async def activations(ts_env: WorkflowEnvironment) -> AsyncIterator[list[str]]:
    """Names of the workflows whose activations the test started; terminated after the test so that
    their timers never stop a later test's clock."""
    names: list[str] = []
    yield names
    for name in names:
        try:
            await ts_env.client.get_workflow_handle(workflow_id_for(name)).terminate("test over")
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise


def worker(env: WorkflowEnvironment, task_queue: str, *, cached: bool = False) -> Worker:
    return Worker(env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)], **({} if cached else {"max_cached_workflows": 0}))


async def start_activation(env: WorkflowEnvironment, wfi: WfiClient, spec: ActivationSpec) -> None:
    """The activation workflow, started with a short task timeout (module docstring), then activated."""
    await env.client.start_workflow(ActivationWorkflow.run, args=[spec, None], id=workflow_id_for(spec.workflow),
                                    task_queue=wfi.task_queue, task_timeout=TASK_TIMEOUT)
    assert (await wfi.activate(spec)).outcome == "unchanged", "it was started just before"


# ------------------------------------------------------------------ instants, computed without croniter


def daily(zone: ZoneInfo, at: time, after: datetime, until: datetime) -> list[datetime]:
    """UTC instants of the local wall time ``at`` each day, ``after < t <= until`` (no gap or fold at ``at``)."""
    day, out = after.astimezone(zone).date(), []
    while (t := datetime.combine(day, at, tzinfo=zone).astimezone(UTC)) <= until:
        out += [t] if t > after else []
        day += timedelta(days=1)
    return out


def local_noon(zone: ZoneInfo, start: datetime, days: int) -> datetime:
    return datetime.combine(start.astimezone(zone).date() + timedelta(days=days), time(12), tzinfo=zone)


def next_transition(zone: ZoneInfo, after: datetime, spring: bool) -> date:
    """The next local date after ``after`` on which the UTC offset rises (``spring``) or falls."""
    day = after.astimezone(zone).date() + timedelta(days=1)
    while True:
        before, later = (datetime.combine(day, time(h), tzinfo=zone).utcoffset() for h in (0, 23))
        if before != later and (later > before) == spring:
            return day
        day += timedelta(days=1)


def ident(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# ------------------------------------------------------------------ the server's clock


SKIP_STEP = timedelta(hours=6)


SLEEP_RPC_TIMEOUT = timedelta(minutes=6)


async def sleep_until(env: WorkflowEnvironment, instant: datetime) -> None:
    """Skip to ``instant`` six hours at a time, so that no single sleep call waits out many held
    tasks. Each call is the time-skipping server's own sleep with a long RPC deadline: it returns
    only once the workflow tasks due meanwhile are done, which took longer than the SDK's default
    deadline ("Timeout expired") while the machine ran other tests, and once 3 minutes (a CI run
    17 minutes long)."""
    while (left := instant - await env.get_current_time()) > timedelta(0):
        request = SleepRequest()
        request.duration.FromTimedelta(min(left, SKIP_STEP))
        await env.client.test_service.unlock_time_skipping_with_sleep(request, timeout=SLEEP_RPC_TIMEOUT)


async def worker_outage(env: WorkflowEnvironment, first_missed: datetime, until: datetime) -> None:
    """With no worker polling, let the server's clock run past ``first_missed`` on to ``until``.

    The first timer to fire schedules a workflow task, whose time lock would stop the clock until a
    worker completes the task. One ``unlock`` lets the clock reach that timer; once it is there the
    task's lock stands in for this client's, ``sleep`` skips to ``until``, and ``lock`` takes this
    client's lock back, so the task's lock is released by the next worker as usual. Call it with
    no worker running and no workflow task or activity pending (see :func:`quiet`).
    """
    await env.client.test_service.unlock_time_skipping(UnlockTimeSkippingRequest())

    async def clock_reached_the_first_missed_occurrence() -> None:
        assert await env.get_current_time() >= first_missed

    await assert_eventually(clock_reached_the_first_missed_occurrence, timeout=10)
    await sleep_until(env, until)
    await env.client.test_service.lock_time_skipping(LockTimeSkippingRequest())


async def quiet(wfi: WfiClient, name: str) -> dict[str, Any]:
    """Wait until the activation has no run starting or running and nothing pending; its state."""

    async def settled() -> dict[str, Any]:
        state = await wfi.state(name)
        s = state["summary"]
        assert s["runs_pending"] == s["runs_starting"] == s["runs_running"] == 0, s
        desc = (await wfi._handle(name).describe()).raw_description
        assert not desc.pending_activities and not desc.HasField("pending_workflow_task")
        return state

    return await assert_eventually(settled, timeout=90)  # a wait, not a timed assertion: CI runs four suites beside it


# ------------------------------------------------------------------ runs


async def run_of(client: Client, run_key: str) -> dict[str, Any] | None:
    """The finished run's result plus its Temporal start time and type; None when there is no such run."""
    desc = await describe_or_none(client, run_key)
    if desc is None:
        return None
    return {**await client.get_workflow_handle(run_key).result(), "start_time": desc.start_time, "type": desc.workflow_type, "run_id": desc.run_id}


async def runs_by_instant(client: Client, spec: ActivationSpec, instants: list[datetime]) -> dict[datetime, dict[str, Any] | None]:
    return {t: await run_of(client, f"{spec.activation_id}/schedule/{ident(t)}") for t in instants}


def check_run(run: dict[str, Any] | None, spec: ActivationSpec, instant: datetime, zone: ZoneInfo) -> datetime:
    """One new EchoRun per occurrence, keyed by its instant; begun no earlier than it; returns fired_at."""
    assert run is not None, f"no run for {instant.isoformat()}"
    assert run["type"] == "wfi.EchoRun" and run["input"]["trigger"]["name"] == "schedule"
    assert run["run_key"] == f"{spec.activation_id}/schedule/{ident(instant)}"
    payload = run["input"]["bindings"]["schedule"]
    assert payload["scheduled_at"] == instant.astimezone(zone).isoformat()  # intended instant, local, with offset
    fired = parse(payload["fired_at"])
    assert fired.utcoffset() is not None and fired >= instant
    assert run["start_time"] >= instant and parse(run["started_at"]) >= instant
    return fired


def by_disposition(sched: dict[str, Any], disposition: str) -> list[datetime]:
    return [parse(o["utc"]) for o in sched["occurrences"] if o["disposition"] == disposition]


def span(rng: dict[str, Any]) -> tuple[datetime, datetime, int]:
    return parse(rng["first"]), parse(rng["last"]), rng["count"]


# ------------------------------------------------------------------ 30 days, worker stopped for 10


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["skip", "catch_up"])
async def test_thirty_days_with_a_ten_day_outage_give_exactly_the_runs_the_missed_policy_allows(
    ts_env: WorkflowEnvironment, task_queue: str, tmp_path: pathlib.Path, activations: list[str], policy: str
) -> None:
    # proves: SCHED-5, SCHED-6, SCHED-7, SCHED-8, SCHED-9, SCHED-10, SCHED-12, SCHED-13, COMP-2
    name = unique(f"daily-{policy}")
    missed_policy = {"policy": "skip"} if policy == "skip" else {"policy": "catch_up", "bound": BOUND}
    spec = make_spec(tmp_path, f'name: {name}\non:\n  time.schedule: {{cron: "0 9 * * *", timezone: Europe/Berlin}}\n',
                     task_queue=task_queue, missed=missed_policy, late_after="1m")
    client = ts_env.client
    wfi = WfiClient(client, task_queue=task_queue)

    async with worker(ts_env, task_queue):
        activations.append(name)
        await start_activation(ts_env, wfi, spec)
        activated = await ts_env.get_current_time()
        stop, restart, end = (local_noon(BERLIN, activated, days) for days in (10, 20, 30))
        grid = daily(BERLIN, time(9), activated, end)
        on_time = [t for t in grid if not stop < t < restart]
        missed = [t for t in grid if stop < t < restart]
        await sleep_until(ts_env, stop)
        await quiet(wfi, name)
    await worker_outage(ts_env, missed[0], restart)
    # The last worker caches the activation (nothing runs after it stops: the test's activations are
    # terminated); an uncached one replays the whole history every task, 2.5 min of CPU per test.
    async with worker(ts_env, task_queue, cached=True):
        await sleep_until(ts_env, end)
        state = await quiet(wfi, name)
        sched = state["schedules"]["schedule"]
        caught, held = ([], []) if policy == "skip" else (missed[:BOUND], missed[BOUND:])

        assert len(grid) in (30, 31) and len(missed) == 10
        assert sched["policy"] == policy and sched["bound"] == (None if policy == "skip" else BOUND)
        recorded = {parse(o["utc"]): (o["disposition"], o.get("fired_at")) for o in sched["occurrences"]}
        assert by_disposition(sched, "admitted") == on_time, ("on-time occurrences keep their instants (SCHED-7)",
                                                              {t: recorded.get(t) for t in on_time if recorded.get(t, ("",))[0] != "admitted"})
        assert by_disposition(sched, "caught_up") == caught, "the earliest missed ones, in instant order (SCHED-8)"
        if policy == "skip":
            assert by_disposition(sched, "skipped_missed") == missed
            assert sched["counts"] == {"admitted": len(on_time), "skipped_missed": len(missed)}
            assert [(span(r), r["status"]) for r in sched["missed_ranges"]] == [((missed[0], missed[-1], 10), "skipped")]
            assert sched["overflow"] == []
        else:
            assert sched["counts"] == {"admitted": len(on_time), "caught_up": BOUND, "overflowed": len(held)}
            assert sched["missed_ranges"] == []
            (rng,) = sched["overflow"]
            assert (span(rng), rng["status"]) == ((held[0], held[-1], len(held)), "awaiting_operator")
            assert state["summary"]["status"] == "needs_operator"
        assert [o["run_key"] for o in sched["occurrences"] if o["run_key"]] == [
            f"{spec.activation_id}/schedule/{ident(t)}" for t in sorted(on_time + caught)]

        runs = await runs_by_instant(client, spec, grid)
        assert [t for t, r in runs.items() if r is not None] == sorted(on_time + caught), "exactly these runs"
        assert state["summary"]["counters"]["runs_started"] == len(on_time + caught), "and no other"
        for t in on_time:
            assert check_run(runs[t], spec, t, BERLIN) - t <= LATE_AFTER, "on time: within late_after"
        for t in caught:
            assert check_run(runs[t], spec, t, BERLIN) >= restart, "caught up after the restart, instant kept"
        assert len({r["run_id"] for r in runs.values() if r is not None}) == len(on_time + caught)

        if policy == "catch_up":
            decided = await wfi.operate(name, OperatorRequest(
                action="decide_overflow", range_id=rng["range_id"], choice="admit_all", action_id=unique("op")))
            assert decided.ok and decided.message == f"{len(held)} admitted, 0 skipped", decided.message
            after_state = await quiet(wfi, name)
            after = after_state["schedules"]["schedule"]
            assert after["overflow"][0]["status"] == "admitted"
            assert after["counts"]["caught_up"] == len(missed)
            late = await runs_by_instant(client, spec, held)
            assert all(check_run(late[t], spec, t, BERLIN) >= end for t in held), "admitted at the decision"
            assert [t for t, r in (await runs_by_instant(client, spec, grid)).items() if r is not None] == grid
            assert after_state["summary"]["counters"]["runs_started"] == len(grid)


# ------------------------------------------------------------------ DST days through the live activation


async def dst_runs(
    env: WorkflowEnvironment, task_queue: str, tmp_path: pathlib.Path, activations: list[str],
    cron: str, day: date, dst: dict[str, str],
) -> dict[str, list[str]]:
    """For each DST policy, activate a ``cron`` schedule in New York from the day before ``day`` to the day
    after, run through those days, and return the ``scheduled_at`` of every run, per policy."""
    start = datetime.combine(day - timedelta(days=1), time(0), tzinfo=NEW_YORK)
    finish = datetime.combine(day + timedelta(days=2), time(0), tzinfo=NEW_YORK)
    wfi = WfiClient(env.client, task_queue=task_queue)
    specs: dict[str, ActivationSpec] = {}
    async with worker(env, task_queue, cached=True):
        for label, policy in dst.items():
            name = unique(f"dst-{label}")
            config = (f'{{cron: "{cron}", timezone: America/New_York, start: "{start.isoformat()}", '
                      f'end: "{finish.isoformat()}", dst: {{{policy}}}}}')
            specs[label] = make_spec(tmp_path, f"name: {name}\non:\n  time.schedule: {config}\n", task_queue=task_queue)
            activations.append(name)
            await wfi.activate(specs[label])
        await sleep_until(env, finish + timedelta(hours=1))
        out: dict[str, list[str]] = {}
        for label, spec in specs.items():
            sched = (await quiet(wfi, spec.workflow))["schedules"]["schedule"]
            assert sched["active"] is False, "the schedule ended at its end"
            keys = [o["run_key"] for o in sched["occurrences"]]
            assert all(keys) and [o["disposition"] for o in sched["occurrences"]] == ["admitted"] * len(keys)
            results = [await run_of(env.client, key) for key in keys]
            out[label] = []
            for o, run in zip(sched["occurrences"], results, strict=True):
                check_run(run, spec, parse(o["utc"]), NEW_YORK)
                out[label].append(run["input"]["bindings"]["schedule"]["scheduled_at"])
    return out


@pytest.mark.slow
async def test_a_0230_schedule_on_the_spring_forward_day_fires_at_0300_or_not_at_all_as_configured(
    ts_env: WorkflowEnvironment, task_queue: str, tmp_path: pathlib.Path, activations: list[str]
) -> None:
    # proves: SCHED-2, SCHED-6, SCHED-12
    day = next_transition(NEW_YORK, await ts_env.get_current_time() + timedelta(days=2), spring=True)
    runs = await dst_runs(ts_env, task_queue, tmp_path, activations, "30 2 * * *", day,
                          {"default": "", "shift": "gap: shift", "skip": "gap: skip"})
    before, after = day - timedelta(days=1), day + timedelta(days=1)
    shifted = [f"{before}T02:30:00-05:00", f"{day}T03:00:00-04:00", f"{after}T02:30:00-04:00"]
    assert runs == {"default": shifted, "shift": shifted, "skip": [shifted[0], shifted[2]]}


@pytest.mark.slow
async def test_a_0130_schedule_on_the_fall_back_day_fires_first_last_or_both_as_configured(
    ts_env: WorkflowEnvironment, task_queue: str, tmp_path: pathlib.Path, activations: list[str]
) -> None:
    # proves: SCHED-2, SCHED-6, SCHED-12, SCHED-13
    day = next_transition(NEW_YORK, await ts_env.get_current_time() + timedelta(days=2), spring=False)
    runs = await dst_runs(ts_env, task_queue, tmp_path, activations, "30 1 * * *", day,
                          {"default": "", "first": "fold: first", "last": "fold: last", "both": "fold: both"})
    before, after = day - timedelta(days=1), day + timedelta(days=1)
    first, last = f"{day}T01:30:00-04:00", f"{day}T01:30:00-05:00"
    edges = [f"{before}T01:30:00-04:00", f"{after}T01:30:00-05:00"]
    assert runs == {
        "default": [edges[0], first, edges[1]], "first": [edges[0], first, edges[1]],
        "last": [edges[0], last, edges[1]], "both": [edges[0], first, last, edges[1]],
    }
