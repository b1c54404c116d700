"""Activities that touch runs: start them idempotently, learn their terminal outcomes, control them.

Runs are ordinary Temporal workflow executions. The workflow id of a run *is* its idempotency key
(derived from the activation and the event identity or occurrence instant), started with
``REJECT_DUPLICATE`` + ``USE_EXISTING``: a retried activity, a replay or a restart can never start a
second run for one event (SCHED-5, EXT-3).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

from pydantic import BaseModel, Field
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecutionStatus as Status, WorkflowHistoryEventFilterType
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from activities.lifecycle import Publisher
from workfile.engine._subscriptions import LifecycleEvent, lifecycle_event_payload, lifecycle_transition
from workfile.runinput import Causation, RunInput
from workflows.search_attributes import WFI_ACTIVATION, WFI_WORKFLOW

_STATUS = {
    Status.COMPLETED: "completed",
    Status.FAILED: "failed",
    Status.CANCELED: "cancelled",
    Status.TERMINATED: "terminated",
    Status.TIMED_OUT: "timed_out",
}

# Close events, with the attribute that names the next run of a chain (retry, cron, continue-as-new).
_CLOSE_EVENTS = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED: ("completed", "workflow_execution_completed_event_attributes"),
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED: ("failed", "workflow_execution_failed_event_attributes"),
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT: ("timed_out", "workflow_execution_timed_out_event_attributes"),
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW: (None, "workflow_execution_continued_as_new_event_attributes"),
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED: ("cancelled", None),
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED: ("terminated", None),
}

# The longest a report of ended runs waits for more endings of the same burst (see _first_outcomes).
MAX_LINGER = 1.0


class RunToStart(BaseModel):
    run_key: str
    input: RunInput


class StartRunsRequest(BaseModel):
    workflow_type: str
    task_queue: str
    execution_timeout_seconds: float | None = None
    runs: list[RunToStart]
    publish_workflow: str | None = Field(
        default=None, description="Workflow identity whose lifecycle events this activity publishes for the runs it "
        "reports (started, and terminal when seen); None: the activation publishes them itself.")
    requested_at: datetime | None = Field(default=None, description="The `at` of the workflow.started events.")
    settle_seconds: float = Field(
        default=0.0, description="After starting, wait up to this long for a run to end (then linger for the others): "
        "a quick run's outcome comes back with its start, without a watch activity of its own.")
    linger_seconds: float = 0.05


class StartedRun(BaseModel):
    run_key: str
    run_id: str | None = None
    already_started: bool = False
    terminal_status: str | None = Field(default=None, description="Set when the run had ended (before or while settling).")
    closed_at: datetime | None = None
    published: bool = Field(default=False, description="Its lifecycle events (started, and terminal if set) are out.")
    error: str | None = None


class WatchedRun(BaseModel):
    run_key: str
    run_id: str | None = None
    causation: Causation | None = Field(default=None, description="For the terminal lifecycle event, when published here.")


class WatchRequest(BaseModel):
    runs: list[WatchedRun]
    max_wait_seconds: float = 300.0
    linger_seconds: float = 0.05
    publish_workflow: str | None = Field(
        default=None, description="Workflow identity whose terminal lifecycle events this activity publishes.")


class RunOutcome(BaseModel):
    run_key: str
    status: str
    closed_at: datetime | None = None
    published: bool = False


class ControlRequest(BaseModel):
    run_key: str
    action: str
    reason: str


class RunActivities:
    """Activities bound to a client (the plugin constructs this with the worker's client)."""

    def __init__(self, client: Client):
        self._client = client
        self._publisher = Publisher(client)

    @activity.defn(name="wfi.start_runs")
    async def start_runs(self, req: StartRunsRequest) -> list[StartedRun]:
        """Start each run at most once; already-started or closed ids are reported, not errors.

        With ``settle_seconds``, also wait briefly for outcomes; with ``publish_workflow``, publish
        what is reported. A retry starts nothing twice and republishes identical events (duplicates
        at the receivers: same delivery id, same payload).
        """
        results = list(await asyncio.gather(*(self._start_one(req, r) for r in req.runs)))
        running = [WatchedRun(run_key=r.run_key, run_id=r.run_id) for r in results if r.terminal_status is None]
        if req.settle_seconds > 0 and running:
            outcomes = await self._first_outcomes(running, req.settle_seconds, req.linger_seconds)
            for r in results:
                if r.run_key in outcomes:
                    r.terminal_status, r.closed_at = outcomes[r.run_key]
        if req.publish_workflow is not None:
            causations = {r.run_key: r.input.initiation.causation for r in req.runs}
            requested_at = req.requested_at or datetime.now(timezone.utc)
            events = [e for r in results for e in _started_events(req.publish_workflow, r, causations[r.run_key], requested_at)]
            await self._publisher.publish(events)
            for r in results:
                r.published = True
        return results

    async def _start_one(self, req: StartRunsRequest, run: RunToStart) -> StartedRun:
        timeout = timedelta(seconds=req.execution_timeout_seconds) if req.execution_timeout_seconds else None
        try:
            handle = await self._client.start_workflow(
                req.workflow_type, run.input, id=run.run_key, task_queue=req.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                execution_timeout=timeout,
                memo={"wfi_activation": run.input.initiation.activation_id},
                search_attributes=TypedSearchAttributes([
                    SearchAttributePair(WFI_WORKFLOW, run.input.initiation.workflow),
                    SearchAttributePair(WFI_ACTIVATION, run.input.initiation.activation_id),
                ]),
                static_summary=f"{run.input.initiation.workflow} run from trigger {run.input.trigger.name}",
                # When this worker also serves the run's task queue, its first task comes back with the
                # start response: one matching hop less between admission and the run's first line.
                request_eager_start=True,
            )
            return StartedRun(run_key=run.run_key, run_id=handle.result_run_id)
        except WorkflowAlreadyStartedError:
            return await self._describe_closed(run.run_key)

    async def _describe_closed(self, run_key: str) -> StartedRun:
        desc = await self._client.get_workflow_handle(run_key).describe()
        status = _STATUS.get(desc.status) if desc.status else None
        return StartedRun(run_key=run_key, run_id=desc.run_id, already_started=True, terminal_status=status,
                          closed_at=desc.close_time if status else None)

    @activity.defn(name="wfi.watch_runs")
    async def watch_runs(self, req: WatchRequest) -> list[RunOutcome]:
        """Wait until at least one run is terminal (or max_wait); report every terminal one.

        Bounded: one activity watches many runs, so open activities do not grow with runs in flight.
        With ``publish_workflow``, the terminal lifecycle events are published before returning.
        """
        heartbeat = asyncio.create_task(_heartbeat_forever())
        try:
            closed = await self._first_outcomes(req.runs, req.max_wait_seconds, req.linger_seconds)
        finally:
            heartbeat.cancel()
        outcomes = [RunOutcome(run_key=k, status=status, closed_at=at) for k, (status, at) in closed.items()]
        if req.publish_workflow is not None and outcomes:
            watched = {r.run_key: r for r in req.runs}
            await self._publisher.publish([
                _terminal_event(req.publish_workflow, o.run_key, watched[o.run_key].run_id, o.status, o.closed_at,
                                watched[o.run_key].causation or Causation()) for o in outcomes])
            for o in outcomes:
                o.published = True
        return outcomes

    async def _first_outcomes(
        self, runs: Iterable[WatchedRun], max_wait: float, linger: float,
    ) -> dict[str, tuple[str, datetime | None]]:
        """Outcomes of the runs that end within ``max_wait``.

        After the first outcome, more are collected while they keep arriving less than ``linger``
        apart, for at most ``MAX_LINGER``: a burst of endings comes back in one report instead of
        one activity per ending (each report makes the activation watch the rest again).
        """
        tasks = {asyncio.create_task(self._outcome(r)): r for r in runs}
        try:
            pending: set[asyncio.Task[tuple[str, datetime | None]]] = set(tasks)
            done, pending = await asyncio.wait(pending, timeout=max_wait, return_when=asyncio.FIRST_COMPLETED)
            until = time.monotonic() + MAX_LINGER
            while done and pending and time.monotonic() < until:
                done, pending = await asyncio.wait(pending, timeout=min(linger, until - time.monotonic()),
                                                   return_when=asyncio.FIRST_COMPLETED)
            return {tasks[t].run_key: t.result() for t in tasks if t.done() and not t.cancelled()}
        finally:
            for t in tasks:
                t.cancel()

    async def _outcome(self, run: WatchedRun) -> tuple[str, datetime | None]:
        """The terminal status and close time of a run, following its chain (retries, continue-as-new).

        One long poll on the close event: status and time come from the event itself, so the time is
        the same however often it is read (a republished lifecycle event stays identical).
        """
        run_id = run.run_id
        while True:
            handle = self._client.get_workflow_handle(run.run_key, run_id=run_id)
            async for event in handle.fetch_history_events(
                wait_new_event=True, event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT
            ):
                status, next_run = _close_status(event)
                if next_run:
                    run_id = next_run
                    break
                return status or "failed", event.event_time.ToDatetime(tzinfo=timezone.utc)
            else:  # no close event: the run is gone (retention); its outcome cannot be known any more
                return "failed", None

    @activity.defn(name="wfi.control_run")
    async def control_run(self, req: ControlRequest) -> str:
        handle = self._client.get_workflow_handle(req.run_key)
        try:
            if req.action == "terminate":
                await handle.terminate(reason=req.reason)
            else:
                await handle.cancel()
        except Exception as exc:  # an already-closed run needs no control; report, don't retry forever
            return f"not applied: {exc}"
        return "applied"

    def all(self) -> list[Any]:
        return [self.start_runs, self.watch_runs, self.control_run]


def _close_status(event: HistoryEvent) -> tuple[str | None, str | None]:
    """(status, run id the chain continues in) of a close event."""
    status, attributes = _CLOSE_EVENTS.get(event.event_type, ("failed", None))
    next_run = getattr(getattr(event, attributes), "new_execution_run_id", "") if attributes else ""
    return status, next_run or None


def _started_events(workflow: str, run: StartedRun, causation: Causation, requested_at: datetime) -> list[LifecycleEvent]:
    started = lifecycle_event_payload(workflow, run.run_key, run.run_id, "started", None, requested_at, causation)
    events = [LifecycleEvent(connector="workflow.started", payload=started)]
    if run.terminal_status is not None:
        events.append(_terminal_event(workflow, run.run_key, run.run_id, run.terminal_status, run.closed_at, causation))
    return events


def _terminal_event(
    workflow: str, run_key: str, run_id: str | None, status: str, closed_at: datetime | None, causation: Causation,
) -> LifecycleEvent:
    transition = lifecycle_transition(status)
    at = closed_at or datetime.fromtimestamp(0, timezone.utc)  # a run gone past retention: no recorded time
    payload = lifecycle_event_payload(workflow, run_key, run_id, transition, status, at, causation)
    return LifecycleEvent(connector=f"workflow.{transition}", payload=payload)


async def _heartbeat_forever() -> None:
    while True:
        activity.heartbeat()
        await asyncio.sleep(10)


