"""Helpers for the hostile-input tests (tests/test_hostile_*.py): plain-client senders, run checks."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import Any

from temporalio.api.enums.v1 import WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowExecutionStatus

from tests.support.restart import listed, ride_out
from tests.support.runs import describe_or_none
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.limits import KIB, MAX_START_BYTES, MAX_TASK_BYTES
from wf_initiation.wire import workflow_id_for

HOOK = """
name: {name}
on:
  http.request: {{}}
  as: hook
{extra}
"""


def hook(ident: str, **body: Any) -> dict[str, Any]:
    return {"delivery_id": ident, "method": "POST", "body": body}


def nested(depth: int) -> Any:
    """A JSON value whose objects nest ``depth`` levels."""
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


async def plain_signal(client: Client, workflow: str, payload: Any, entry: str | None = None) -> None:
    """What a bridge with a plain Temporal client does: signal ``deliver_signal`` directly."""
    await client.get_workflow_handle(workflow_id_for(workflow)).signal(
        "deliver_signal", {"entry": entry, "payload": payload})


async def plain_update(client: Client, workflow: str, payload: Any, entry: str | None = None) -> Any:
    """The ``deliver`` update from a plain Temporal client (no checks before sending)."""
    return await client.get_workflow_handle(workflow_id_for(workflow)).execute_update(
        "deliver", {"entry": entry, "payload": payload}, id=f"plain-{uuid.uuid4().hex}", result_type=dict)


async def run_started(client: Client, run_key: str, *, timeout: float = 60.0) -> None:
    """Wait until the run with this key exists (its start went through)."""
    async def check() -> None:
        desc = await describe_or_none(client, run_key)
        assert desc is not None, f"run {run_key} not started yet"
        assert desc.status is not None

    await assert_eventually(check, timeout=timeout, interval=0.2)


async def still_serves(
    wfi: WfiClient, client: Client, workflow: str, ident: str = "normal-after", *, entry: str | None = None, **extra: Any,
) -> None:
    """The ending of every hostile test: a normal delivery is accepted and its run starts."""
    result = await wfi.deliver(workflow, hook(ident, **extra), entry=entry)
    assert result.disposition.value == "accepted", result
    await run_started(client, result.run_key)
    desc = await describe_or_none(client, result.run_key)
    assert desc is not None and desc.status in (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.COMPLETED)


async def errors_of(wfi: WfiClient, workflow: str, kind: str) -> list[dict[str, Any]]:
    state = await wfi.state(workflow)
    return [e for e in state["errors"] if e["kind"] == kind]


async def histories(client: Client, workflow: str) -> list[Any]:
    """The histories of every run of the activation (continue-as-new makes several)."""
    wid = workflow_id_for(workflow)
    runs = [w.run_id for w in await ride_out(lambda: listed(client, f"WorkflowId = '{wid}'"))]
    return [await ride_out(client.get_workflow_handle(wid, run_id=run_id).fetch_history) for run_id in runs]


# Failed workflow tasks that are no failure of ours, each followed by a task that includes what it
# missed: the server refuses a completion while new events arrived (a continue-as-new meeting new
# signals), drops a sticky queue (a worker slow to answer under load), or fails the task in flight
# itself (identity "history-service") when the signals buffered meanwhile pass its 2 MB buffer
# (history.maximumBufferedEventsSizeInBytes): 15 signals of 200 KB do that.
BENIGN_TASK_FAILURES = frozenset({
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND,
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_STICKY_TASK_QUEUE,
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_FORCE_CLOSE_COMMAND,
})


# The server refusing a completion that accepts an update the same history already shows accepted
# and completed: the SDK sent the acceptance again (seen once in CI on a loaded machine, cf.
# temporalio/sdk-rust#888, "always with a workflow task timeout"); the refusal changes nothing and
# the next task goes on. Benign only when the history proves the update ran exactly once.
_REPEATED_ACCEPTANCE = re.compile(r"for Update (\S+): received \*update\.Acceptance message while in state Completed")


def _repeated_acceptance(events: Sequence[Any], at: int, message: str) -> bool:
    """Whether the task failure at ``events[at]`` refused an update accepted and completed earlier,
    once each, in this history."""
    named = _REPEATED_ACCEPTANCE.search(message)
    if named is None:
        return False
    uid = named.group(1)
    accepted = [i for i, e in enumerate(events) if e.HasField("workflow_execution_update_accepted_event_attributes")
                and e.workflow_execution_update_accepted_event_attributes.accepted_request.meta.update_id == uid]
    completed = [i for i, e in enumerate(events) if e.HasField("workflow_execution_update_completed_event_attributes")
                 and e.workflow_execution_update_completed_event_attributes.meta.update_id == uid]
    return len(accepted) == 1 and len(completed) == 1 and accepted[0] < completed[0] < at


DEADLOCK = "[TMPRL1101]"
"""The SDK's failure of a workflow task that did not yield within its deadlock timeout (2 s of wall
time): on a machine loaded to several times its cores a task well inside its budget can take that
long (CI: one task of a 3,000-minute backfill admitting its 100 occurrences)."""


def _went_on(events: Sequence[Any], at: int) -> bool:
    """Whether a workflow task completed after ``events[at]`` with no failure but the deadlock
    timeout's between: the task was retried with its input and its work fit in the end."""
    for event in events[at + 1:]:
        if event.HasField("workflow_task_completed_event_attributes"):
            return True
        if event.HasField("workflow_task_failed_event_attributes") and \
                DEADLOCK not in event.workflow_task_failed_event_attributes.failure.message:
            return False
    return False


async def task_failures(client: Client, workflow: str, *, slow_retried: bool = False) -> list[str]:
    """Cause and message of the activation's failed workflow tasks, in every run (there must be none).

    ``slow_retried``: a task past the deadlock timeout that was retried and then completed is left
    out; the test proves the task's budget by what each task did instead (a count from the history),
    so a slow machine does not fail it and a task too big for its budget still does."""
    failures = []
    for history in await histories(client, workflow):
        events = list(history.events)
        for at, event in enumerate(events):
            if not event.HasField("workflow_task_failed_event_attributes"):
                continue
            attrs = event.workflow_task_failed_event_attributes
            if attrs.cause in BENIGN_TASK_FAILURES or (
                    attrs.cause == WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_BAD_UPDATE_WORKFLOW_EXECUTION_MESSAGE
                    and _repeated_acceptance(events, at, attrs.failure.message)) or (
                    slow_retried and DEADLOCK in attrs.failure.message and _went_on(events, at)):
                continue
            failures.append(f"{WorkflowTaskFailedCause.Name(attrs.cause)}: {attrs.failure.message}")
    return failures


async def scheduled_bytes_per_task(client: Client, workflow: str) -> dict[tuple[int, int], list[int]]:
    """Input bytes of the activities each workflow task of the activation scheduled (every run)."""
    per_task: dict[tuple[int, int], list[int]] = {}
    for n, history in enumerate(await histories(client, workflow)):
        for e in history.events:
            if e.HasField("activity_task_scheduled_event_attributes"):
                attrs = e.activity_task_scheduled_event_attributes
                size = sum(len(p.data) for p in attrs.input.payloads)
                per_task.setdefault((n, attrs.workflow_task_completed_event_id), []).append(size)
    return per_task


def assert_budgets_kept(per_task: dict[tuple[int, int], list[int]]) -> None:
    """Each task's start activities within the byte budgets (``scheduled_bytes_per_task``)."""
    for sizes in per_task.values():
        assert all(size <= MAX_START_BYTES + 64 * KIB for size in sizes), sizes
        assert sum(sizes) <= MAX_TASK_BYTES + 64 * KIB, sizes


async def completed_tasks(client: Client, workflow: str) -> int:
    """How many workflow tasks of the activation completed, every run."""
    return sum(e.HasField("workflow_task_completed_event_attributes")
               for h in await histories(client, workflow) for e in h.events)
