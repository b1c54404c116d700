"""Large operator actions against a real activation (issue 11 item 7): a backfill of 3,000 minutes
never completed its workflow task (past the worker's deadlock timeout, retried with the same input)
and wedged the activation. Now it is worked off in bounded chunks across tasks, and the whole
documented range (MAX_BACKFILL occurrences) works. The budgets are proven by what the tasks did
(their count, their start activities' bytes) and by every task completing: a task past the
deadlock timeout on a loaded machine is retried with its input and completes, which one too big
for its budget never would. Each test ends with a normal delivery accepted and its run started."""

from __future__ import annotations

import pathlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.activation import make_spec, unique
from tests.support.hostile import (
    assert_budgets_kept,
    completed_tasks,
    scheduled_bytes_per_task,
    still_serves,
    task_failures,
)
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.limits import ADMIT_PER_TASK, ENUMERATE_PER_TASK, MAX_BACKFILL
from wf_initiation.wire import OperatorRequest

TICKS = """
name: {name}
on:
  - time.schedule: {{cron: "* * * * *", timezone: UTC, end: "{end}"}}
    as: tick
{guard}
  - http.request: {{}}
    as: hook
"""
HOURLY = """    when: "{{ tick.scheduled_at.endswith(':00:00+00:00') }}\""""


async def activate(wfi: WfiClient, tmp_path: pathlib.Path, task_queue: str, *, guard: str = "") -> tuple[str, Any]:
    name = unique("backfill")
    # Runs go to a task queue no worker polls: they are started (that is what is checked), never run;
    # they stay open on the session's dev server, which is discarded with the session.
    # The schedule ended a day ago: only a backfill admits its (past) occurrences while the test runs.
    end = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    spec = make_spec(tmp_path, TICKS.format(name=name, guard=guard, end=end), task_queue=task_queue,
                     run_queue=f"{task_queue}-runs")
    await wfi.activate(spec)
    return name, spec


def minute_range(minutes: int) -> tuple[str, str]:
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(days=10)
    return start.isoformat(), (start + timedelta(minutes=minutes - 1)).isoformat()


async def backfill(wfi: WfiClient, name: str, minutes: int) -> str:
    start, end = minute_range(minutes)
    result = await wfi.operate(name, OperatorRequest(action="backfill", entry="tick", start=start, end=end,
                                                     action_id=f"bf-{uuid.uuid4().hex}"))
    assert result.ok, result
    return result.message


async def job_done(wfi: WfiClient, name: str, *, timeout: float) -> dict[str, Any]:
    async def check() -> dict[str, Any]:
        (job,) = (await wfi.state(name))["schedules"]["tick"]["jobs"]
        assert job["status"] in ("done", "refused"), job
        return job

    return await assert_eventually(check, timeout=timeout, interval=1.0)


def runs_of(activation_id: str) -> str:
    """Visibility query of the runs an activation started (not the activation itself)."""
    return f"WfiActivation = '{activation_id}' AND WorkflowType != 'wfi.Activation'"


async def test_a_backfill_of_3000_minutes_is_worked_off_and_every_occurrence_gets_its_run(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: SCHED-5, SCHED-9, SCHED-12
    client = dev_env.client
    name, spec = await activate(wfi, tmp_path, task_queue)
    message = await backfill(wfi, name, 3000)
    assert "job" in message, message
    job = await job_done(wfi, name, timeout=240)
    assert (job["status"], job["total"], job["admitted"]) == ("done", 3000, 3000), job

    async def all_started() -> None:
        summary = await wfi.summary(name)
        assert summary["counters"].get("runs_started") == 3000 and summary["runs_starting"] == 0, summary

    await assert_eventually(all_started, timeout=300, interval=1.0)
    # The budget by what each task did: starts within the byte budgets, admission spread over at
    # least total / ADMIT_PER_TASK tasks; a task past the deadlock timeout on a loaded machine is
    # retried with its input and completes (a task too big for its budget never would).
    assert_budgets_kept(await scheduled_bytes_per_task(client, name))
    assert await completed_tasks(client, name) >= 3000 // ADMIT_PER_TASK
    assert await task_failures(client, name, slow_retried=True) == []
    started = (await client.count_workflows(runs_of(spec.activation_id))).count
    assert started == 3000
    await still_serves(wfi, client, name)


async def test_a_backfill_at_the_limit_completes_and_one_past_it_is_refused_with_nothing_admitted(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: SCHED-5, SCHED-9
    client = dev_env.client
    name, _ = await activate(wfi, tmp_path, task_queue, guard=HOURLY)
    await backfill(wfi, name, MAX_BACKFILL)
    job = await job_done(wfi, name, timeout=300)
    first = datetime.fromisoformat(job["first"])
    hourly = sum((first + timedelta(minutes=k)).minute == 0 for k in range(MAX_BACKFILL))
    assert (job["status"], job["total"], job["admitted"], job["other"]) == (
        "done", MAX_BACKFILL, hourly, MAX_BACKFILL - hourly), job
    assert await completed_tasks(client, name) >= MAX_BACKFILL // ENUMERATE_PER_TASK, "enumeration spread over tasks"
    assert await task_failures(client, name, slow_retried=True) == []

    other_name, _ = await activate(wfi, tmp_path, task_queue, guard=HOURLY)
    await backfill(wfi, other_name, MAX_BACKFILL + 1)
    refused = await job_done(wfi, other_name, timeout=120)
    assert refused["status"] == "refused" and refused["admitted"] == 0 and "split it" in refused["message"]
    assert (await wfi.summary(other_name))["counters"].get("runs_started", 0) == 0
    small = await backfill(wfi, other_name, ADMIT_PER_TASK // 2)  # a small range is admitted at once, as before
    assert "job" not in small and small.endswith(f"{ADMIT_PER_TASK // 2} in range"), small
    await still_serves(wfi, client, other_name)
    await still_serves(wfi, client, name)
