"""The schedule options teams know from Temporal Schedules on real servers: ``jitter``,
``pause_on_failure`` with the notes of pause and resume, ``remaining_runs`` and ``wfi operate trigger``
(deployment ``schedule:``, docs/deployment.md "Schedule options"; the pure rules:
tests/core/test_schedule_options.py).

Jitter runs an hourly schedule through hours of workflow time on the time-skipping server; the
others run a seconds-long interval in real time on the dev server (on the time-skipping server the
watch activity's wait for a run's result skips time, and a rebind left its clock stopped). Each test
ends by showing the activation still works: a later occurrence or a trigger starts its run. Runs
are found by their run keys (the occurrence identity, SCHED-13).
"""

from __future__ import annotations

import pathlib
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.api.testservice.v1 import SleepRequest
from temporalio.client import WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.cli import wfi as cli
from tests.support.replay import assert_replays, assert_replays_history
from tests.support.runs import describe_or_none
from tests.support.waits import assert_eventually
from wf_initiation.cli.state import render_state
from wf_initiation.client import WfiClient
from wf_initiation.core import schedule as seq
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.engine._schedule import jitter_delay
from wf_initiation.core.runinput import RunInput
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import OperatorRequest, workflow_id_for

LATE_AFTER = timedelta(minutes=1)  # the deployment's default
HOURLY = 'name: {name}\non:\n  time.schedule: {{cron: "0 * * * *", timezone: UTC}}\n'
Activate = Callable[[ActivationSpec], Awaitable[None]]


@workflow.defn(name="test.FailsWhenScheduled", sandboxed=False)
class FailsWhenScheduled:
    """A run that fails when an occurrence started it and completes when an operator triggered it."""

    @workflow.run
    async def run(self, input: RunInput) -> dict[str, Any]:
        if not input.payload.get("triggered_by"):
            raise ApplicationError("scheduled runs of this test fail", non_retryable=True)
        return {"run_key": input.initiation.run_key}


@workflow.defn(name="test.StallsWhenScheduled", sandboxed=False)
class StallsWhenScheduled:
    """A run that never ends (its execution timeout ends it) when an occurrence started it."""

    @workflow.run
    async def run(self, input: RunInput) -> dict[str, Any]:
        if not input.payload.get("triggered_by"):
            await workflow.wait_condition(lambda: False)
        return {"run_key": input.initiation.run_key}


@asynccontextmanager
async def serving(env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[WfiClient]:
    """A worker with the plugin and this module's run workflows, and a client of its activations."""
    async with Worker(env.client, task_queue=task_queue, workflows=[FailsWhenScheduled, StallsWhenScheduled],
                      plugins=[WfiPlugin(sample_runs=True)]):
        yield WfiClient(env.client, task_queue=task_queue)


def ident(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def hours_after(moment: datetime, n: int) -> list[datetime]:
    """The next ``n`` full hours after ``moment`` (the instants of an hourly schedule)."""
    first = moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    return [first + timedelta(hours=k) for k in range(n)]


async def skip_to(env: WorkflowEnvironment, instant: datetime) -> None:
    """Skip the server's clock to ``instant``, five minutes at a time, each with the server's own sleep
    and a long RPC deadline: it returns once the workflow tasks due meanwhile are done, which takes
    longer than the SDK's default deadline on a loaded machine (tests/integration/test_schedule_timeskipping.py).
    Longer steps across an occurrence of an activation that had continued as new (a rebind) never
    returned on this server; five-minute ones do."""
    while (left := instant - await env.get_current_time()) > timedelta(0):
        request = SleepRequest()
        request.duration.FromTimedelta(min(left, timedelta(minutes=5)))
        await env.client.test_service.unlock_time_skipping_with_sleep(request, timeout=timedelta(minutes=6))


async def schedule_of(wfi: WfiClient, name: str) -> dict[str, Any]:
    return (await wfi.state(name))["schedules"]["schedule"]


async def finished(env: WorkflowEnvironment, run_key: str) -> Any:
    """The run's description once it is closed (skipping time while it runs)."""

    async def closed() -> Any:
        desc = await describe_or_none(env.client, run_key)
        assert desc is not None and desc.status != WorkflowExecutionStatus.RUNNING, f"run {run_key} not closed yet"
        return desc

    return await assert_eventually(closed, timeout=60)


async def operator_page(env: WorkflowEnvironment, name: str) -> str:
    handle = env.client.get_workflow_handle(workflow_id_for(name))
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return str(metadata.current_details)


async def admitted(wfi: WfiClient, name: str, n: int) -> dict[str, Any]:
    async def done() -> dict[str, Any]:
        st = await schedule_of(wfi, name)
        assert sum(st["counts"].get(k, 0) for k in ("admitted", "caught_up")) >= n, st["counts"]
        return st

    return await assert_eventually(done, timeout=60)


# ------------------------------------------------------------------------------- jitter


async def test_jittered_occurrences_begin_after_their_own_delay_and_keep_their_instants(
    ts_env: WorkflowEnvironment, ts_activate: Activate, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: SCHED-5, SCHED-6, SCHED-7, SCHED-12, SCHED-13
    name = unique("jitter")
    spec = make_spec(tmp_path, HOURLY.format(name=name), task_queue=task_queue, schedule={"jitter": "30m"})
    async with serving(ts_env, task_queue) as wfi:
        await ts_activate(spec)
        instants = hours_after(await ts_env.get_current_time(), 3)
        dues = [t + jitter_delay(f"{spec.activation_id}\x1fschedule", t, timedelta(minutes=30)) for t in instants]
        assert len(set(d - t for d, t in zip(dues, instants, strict=True))) == 3, "a delay of its own for each"
        summary = (await wfi.summary(name))["schedules"]["schedule"]
        assert (summary["next"], summary["next_at"]) == (instants[0].isoformat(), dues[0].isoformat())
        await skip_to(ts_env, instants[-1] + timedelta(minutes=45))
        st = await admitted(wfi, name, 3)
        recorded = {seq.parse_instant(o["utc"]): o for o in st["occurrences"]}
        assert list(recorded) == instants and {o["disposition"] for o in st["occurrences"]} == {"admitted"}
        for instant, due in zip(instants, dues, strict=True):
            fired = seq.parse_instant(recorded[instant]["fired_at"])
            # Admitted at its delay, or later when the timer fired after the wake-ahead: on time either way.
            assert due <= fired < due + LATE_AFTER, ("fired_at is the admitted (jittered) instant", instant, due, fired)
            run_key = f"{spec.activation_id}/schedule/{ident(instant)}"
            result = await ts_env.client.get_workflow_handle(run_key).result()
            payload = result["input"]["bindings"]["schedule"]
            assert seq.parse_instant(payload["scheduled_at"]) == instant
            assert seq.parse_instant(payload["fired_at"]) == fired
            desc = await describe_or_none(ts_env.client, run_key)
            assert desc is not None and desc.start_time >= due and datetime.fromisoformat(result["started_at"]) >= due, (
                "the run began after its delay, never before")
        page = await operator_page(ts_env, name)
        assert "jitter 30m" in page and "(jitter: admitted " in page, page
        history = await ts_env.client.get_workflow_handle(workflow_id_for(name)).fetch_history()
        await assert_replays_history(history, f"{name}-jitter")  # jittered instants are decided deterministically


# ------------------------------------------------------------------------------- pause_on_failure, notes, trigger


@pytest.mark.parametrize(("status", "run_type"), [("failed", "test.FailsWhenScheduled"), ("timed_out", "test.StallsWhenScheduled")])
async def test_a_failed_run_pauses_its_schedule_an_operator_triggers_one_run_and_resumes_with_a_note(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: pathlib.Path, status: str, run_type: str,
) -> None:
    # On the dev server: the time-skipping server skips time while the watch activity awaits a run's
    # result, so a run's end could be learned only after later occurrences were due.
    # proves: SCHED-8, SCHED-13
    name = unique("pause")
    spec = make_spec(tmp_path, f"name: {name}\non:\n  time.schedule: {{interval: 4s}}\n", task_queue=task_queue,
                     schedule={"pause_on_failure": True},
                     run={"workflow_type": run_type, "task_queue": task_queue, "execution_timeout": "1s"})
    async with serving(dev_env, task_queue) as wfi:
        try:
            await wfi.activate(spec)
            await paused_runs_resume_and_go_on(dev_env, wfi, spec, status)
            await assert_replays(dev_env.client, workflow_id_for(name))
        finally:
            await dev_env.client.get_workflow_handle(workflow_id_for(name)).terminate("test over")


async def paused_runs_resume_and_go_on(env: WorkflowEnvironment, wfi: WfiClient, spec: ActivationSpec, status: str) -> None:
    name = spec.workflow

    async def paused() -> dict[str, Any]:
        st = await schedule_of(wfi, name)
        assert st["paused"] and st["failed_run"], st
        return st

    st = await assert_eventually(paused, timeout=60)
    failed = st["failed_run"]
    assert failed.startswith(f"{spec.activation_id}/schedule/") and "trigger" not in failed
    assert (await finished(env, failed)).status.name == status.upper()
    assert failed in st["note"] and status.replace("_", " ") in st["note"]
    summary = await wfi.summary(name)
    assert summary["status"] == "paused" and failed in render_state(summary, None)
    assert failed in await operator_page(env, name)

    # An operator starts one run now: its own identity, no occurrence consumed, once per action id.
    action = unique("rerun")
    triggered = await wfi.operate(name, OperatorRequest(action="trigger", action_id=action, note="rerun by hand"))
    run_key = f"{spec.activation_id}/schedule/trigger-{action}"
    assert triggered.ok and run_key in triggered.message, triggered.message
    assert (await finished(env, run_key)).status == WorkflowExecutionStatus.COMPLETED, "a triggered run completes here"
    again = await wfi.operate(name, OperatorRequest(action="trigger", action_id=action, note="rerun by hand"))
    assert (again.ok, again.message) == (True, triggered.message), "the same update: Temporal answers it once"
    after = await schedule_of(wfi, name)
    assert (after["next_instant"], after["last_instant"], after["counts"]) == (
        st["next_instant"], st["last_instant"], st["counts"]), "the sequence is where it was"
    assert [t["run_key"] for t in after["triggers"]] == [run_key]

    # Resume with a note: the occurrences that fell while paused are missed (policy skip), the next one runs.
    resumed = await wfi.operate(name, OperatorRequest(action="resume", entry="schedule", note="warehouse fixed"))
    assert resumed.ok and resumed.message == "resumed schedule (note: warehouse fixed)"
    resumed_at = datetime.now(UTC)
    st = await schedule_of(wfi, name)
    assert (st["failed_run"], st["note"]) == (None, "warehouse fixed")
    assert "warehouse fixed" in await operator_page(env, name) or st["paused"], "shown until a run pauses it again"

    async def an_occurrence_after_the_resume_started_its_run() -> None:
        occurrences = (await schedule_of(wfi, name))["occurrences"]
        later = [o for o in occurrences if o["run_key"] and seq.parse_instant(o["utc"]) > resumed_at - timedelta(seconds=1)]
        assert later and await describe_or_none(env.client, later[0]["run_key"]) is not None, occurrences[-3:]

    await assert_eventually(an_occurrence_after_the_resume_started_its_run, timeout=60)


# ------------------------------------------------------------------------------- remaining_runs


async def test_after_remaining_runs_the_schedule_is_inactive_and_a_new_limit_goes_on(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # On the dev server, in real time: a 2-second interval plays an hourly schedule (a rebind on the
    # time-skipping server left its clock stopped: the next skip never returned).
    # proves: INIT-4, INIT-5, SCHED-9
    name = unique("limited")
    workfile = f"name: {name}\non:\n  time.schedule: {{interval: 2s}}\n"
    spec = make_spec(tmp_path, workfile, task_queue=task_queue, schedule={"remaining_runs": 2})
    async with serving(dev_env, task_queue) as wfi:
        try:
            await wfi.activate(spec)
            await limited_then_more(dev_env, wfi, spec, make_spec(tmp_path, workfile, task_queue=task_queue,
                                                                  schedule={"remaining_runs": 3}))
            await assert_replays(dev_env.client, workflow_id_for(name))
        finally:
            await dev_env.client.get_workflow_handle(workflow_id_for(name)).terminate("test over")


async def limited_then_more(env: WorkflowEnvironment, wfi: WfiClient, spec: ActivationSpec, more: ActivationSpec) -> None:
    name = spec.workflow

    async def inactive() -> dict[str, Any]:
        st = (await wfi.summary(name))["schedules"]["schedule"]
        assert not st["active"] and st["remaining_runs"] == 0, st
        return st

    st = await assert_eventually(inactive, timeout=60)
    assert st["counts"] == {"admitted": 2} and "remaining_runs" in st["inactive_reason"]
    assert "remaining runs: 0 of 2" in await operator_page(env, name)
    occurrences = (await schedule_of(wfi, name))["occurrences"]
    assert [o["disposition"] for o in occurrences] == ["admitted", "admitted"]
    for o in occurrences:
        assert (await finished(env, o["run_key"])).status == WorkflowExecutionStatus.COMPLETED
    exhausted_at = datetime.now(UTC)
    triggered = await wfi.operate(name, OperatorRequest(action="trigger"))
    assert triggered.ok and "/schedule/trigger-" in triggered.message, "an operator can still start a run"
    assert (await wfi.summary(name))["schedules"]["schedule"]["counts"] == {"admitted": 2}, "nothing admitted since"

    assert (await wfi.activate(more)).outcome == "rebound"

    async def a_new_occurrence_started_its_run() -> None:
        st = await schedule_of(wfi, name)
        later = [o for o in st["occurrences"] if seq.parse_instant(o["utc"]) > exhausted_at]
        assert st["run_limit"] == 3 and later and later[0]["run_key"].startswith(more.activation_id), st["occurrences"][-3:]
        assert await describe_or_none(env.client, later[0]["run_key"]) is not None

    await assert_eventually(a_new_occurrence_started_its_run, timeout=60)


# ------------------------------------------------------------------------------- trigger across continue-as-new


async def test_a_trigger_is_once_only_per_action_id_across_continue_as_new(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: SCHED-5
    name = unique("trigger")
    spec = make_spec(tmp_path, f"name: {name}\non:\n  time.schedule: {{interval: 1s}}\n", task_queue=task_queue,
                     max_history_events=200)
    async with serving(dev_env, task_queue) as wfi:
        try:
            await wfi.activate(spec)
            await once_across_continue_as_new(dev_env, wfi, spec)
            await assert_replays(dev_env.client, workflow_id_for(name))
        finally:
            await dev_env.client.get_workflow_handle(workflow_id_for(name)).terminate("test over")


async def once_across_continue_as_new(env: WorkflowEnvironment, wfi: WfiClient, spec: ActivationSpec) -> None:
    name = spec.workflow
    first_run = (await env.client.get_workflow_handle(workflow_id_for(name)).describe()).run_id
    action = unique("now")
    run_key = f"{spec.activation_id}/schedule/trigger-{action}"
    assert (await wfi.operate(name, OperatorRequest(action="trigger", action_id=action))).ok
    started = (await finished(env, run_key)).run_id

    async def continued() -> None:  # an occurrence a second: past 200 history events within a minute
        assert (await env.client.get_workflow_handle(workflow_id_for(name)).describe()).run_id != first_run

    await assert_eventually(continued, timeout=180, interval=1.0)
    again = await wfi.operate(name, OperatorRequest(action="trigger", action_id=action))
    assert (again.ok, again.message) == (True, "already applied"), "a new run of the activation: the engine's answer"
    assert (await finished(env, run_key)).run_id == started, "one run for the action id, never a second"
    st = await schedule_of(wfi, name)
    assert [t["action_id"] for t in st["triggers"]] == [action], "its record was carried"
    assert not any("/schedule/trigger-" in (o["run_key"] or "") for o in st["occurrences"]), "never an occurrence"
    count = st["counts"]["admitted"]

    async def more_occurrences() -> None:
        assert (await schedule_of(wfi, name))["counts"]["admitted"] > count

    await assert_eventually(more_occurrences, timeout=60)
    other = await wfi.operate(name, OperatorRequest(action="trigger"))
    assert other.ok and "(accepted)" in other.message, "the activation still works: another trigger starts its run"


# ------------------------------------------------------------------------------- the command line


async def test_wfi_reads_the_schedule_options_from_the_deployment_file_and_operates_with_notes_and_trigger(
    worker: Worker, dev_env: WorkflowEnvironment, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: SCHED-13
    name = unique("cli-sched")
    workfile = tmp_path / f"{name}.yaml"
    workfile.write_text(f'name: {name}\non:\n  time.schedule: {{cron: "0 3 * * *", timezone: Europe/Berlin}}\n  as: nightly\n')
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(textwrap.dedent(f"""\
        temporal: {{address: "{dev_env.client.service_client.config.target_host}", task_queue: {task_queue}}}
        workflows:
          {name}:
            run: {{workflow_type: wfi.EchoRun, task_queue: {task_queue}}}
            schedule: {{jitter: 20m, pause_on_failure: true, remaining_runs: 30}}
        """))
    dep = ("--deployment", str(deployment), "--workflow", name)
    try:
        assert (await cli("activate", str(workfile), "--deployment", str(deployment))).code == 0
        paused = await cli("operate", *dep, "pause", "--note", "supplier outage")
        assert (paused.code, paused.stdout.strip()) == (0, "pause: ok: paused nightly (note: supplier outage)"), paused.stderr
        summary = await cli("state", *dep, "--summary")
        assert "(paused at " in summary.stdout and ": supplier outage)" in summary.stdout, summary.stdout
        assert "remaining runs: 30 of 30 (remaining_runs)" in summary.stdout
        triggered = await cli("operate", *dep, "trigger", "--action-id", "by-hand-1", "--note", "rerun")
        assert triggered.code == 0 and "/nightly/trigger-by-hand-1 (accepted) (note: rerun)" in triggered.stdout, (
            triggered.stdout + triggered.stderr)
        shown = await cli("state", *dep, "--summary")
        assert "triggered at " in shown.stdout and "by by-hand-1: accepted" in shown.stdout, shown.stdout
        resumed = await cli("operate", *dep, "resume", "--note", "supplier back", "--json")
        assert resumed.code == 0 and resumed.json()["message"] == "resumed nightly (note: supplier back)"
        info = await cli("state", *dep, "--summary", "--json")
        nightly = info.json()["schedules"]["nightly"]
        assert (nightly["jitter"], nightly["pause_on_failure"], nightly["remaining_runs"], nightly["note"]) == (
            1200.0, True, 30, "supplier back")

        async def the_triggered_run_completed() -> None:
            key = [t["run_key"] for t in (await cli("state", *dep, "--summary", "--json")).json()["schedules"]["nightly"]["triggers"]]
            desc = await describe_or_none(dev_env.client, key[0])
            assert desc is not None and desc.status == WorkflowExecutionStatus.COMPLETED

        await assert_eventually(the_triggered_run_completed, timeout=60)
    finally:
        await dev_env.client.get_workflow_handle(workflow_id_for(name)).terminate("test over")
