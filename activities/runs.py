"""Activities that touch runs: start them idempotently, learn their terminal outcomes, control them.

Runs are ordinary Temporal workflow executions. The workflow id of a run *is* its idempotency key
(derived from the activation and the event identity or occurrence instant), started with
``REJECT_DUPLICATE`` + ``USE_EXISTING``: a retried activity, a replay or a restart can never start a
second run for one event (SCHED-5, EXT-3).

A run that can never be started (its input is over the server's payload limit, or cannot be
encoded) is reported per run (``StartedRun.error``) instead of failing the whole activity, so one
bad run never holds up the others of its chunk; the activation records it as a start fault.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from wf_initiation._sdk import refused_for_good, started_new_run
from wf_initiation.activities._watch import MIN_INTERVAL, TERMINAL, RunWatcher
from wf_initiation.activities.clock import sleep_at_least
from wf_initiation.activities.lifecycle import Publisher
from wf_initiation.core.engine import LifecycleEvent, transition_event
from wf_initiation.wire import (
    CONTROL_RUN_ACTIVITY,
    CONTROL_RUNS_ACTIVITY,
    START_RUNS_ACTIVITY,
    WATCH_RUNS_ACTIVITY,
    WFI_ACTIVATION,
    WFI_WORKFLOW,
    ControlRequest,
    ControlRunsRequest,
    RunOutcome,
    RunToStart,
    StartedRun,
    StartRunsRequest,
    WatchRequest,
)

if TYPE_CHECKING:
    from wf_initiation.telemetry import WfiTelemetry


# The longest a report of ended runs waits for more endings of the same burst (see watch_runs).
MAX_LINGER = 1.0
# Cancel / terminate calls of one control page made at once (a page holds up to 100 runs).
CONTROLS_AT_ONCE = 16
# Seconds between a watch's heartbeats (its heartbeat timeout is 30 s, workflows/_executor.py).
HEARTBEAT_EVERY = 10.0


class RunActivities:
    """Activities bound to a client (the plugin constructs this with the worker's client)."""

    def __init__(self, client: Client, telemetry: WfiTelemetry | None = None, *, publish_client: Client | None = None):
        """``publish_client``: the client lifecycle events are signalled with (default ``client``)."""
        from wf_initiation.telemetry import NO_TELEMETRY  # OpenTelemetry only where runs are started

        self._client = client
        self._telemetry = telemetry or NO_TELEMETRY
        self._publisher = Publisher(publish_client or client)

    @activity.defn(name=START_RUNS_ACTIVITY)
    async def start_runs(self, req: StartRunsRequest) -> list[StartedRun]:
        """Start each run at most once; already-started or closed ids are reported, not errors.
        With ``publish_started``, also publish the ``workflow.started`` event of each run reported
        started (best effort: one it could not publish is left to the activation)."""
        await sleep_at_least(req.not_before_seconds)
        started = list(await asyncio.gather(*(self._start_one(req, r) for r in req.runs)))
        if req.publish_started:
            inputs = {r.run_key: r.input for r in req.runs}
            now = datetime.now(UTC)
            ran = [r for r in started if r.error is None and r.run_id is not None]
            await self._publish(ran, [transition_event(inputs[r.run_key].initiation.workflow, r.run_key, r.run_id, None,
                                                       inputs[r.run_key].initiation.causation, now) for r in ran])
        return started

    async def _publish(self, reported: list[StartedRun] | list[RunOutcome], events: list[LifecycleEvent]) -> None:
        """Publish the events of the runs ``reported``; mark them published when it succeeded."""
        if await self._publisher.publish_or_leave(events):
            for r in reported:
                r.published = True

    async def _start_one(self, req: StartRunsRequest, run: RunToStart) -> StartedRun:
        timeout = timedelta(seconds=req.execution_timeout_seconds) if req.execution_timeout_seconds else None
        initiation = run.input.initiation
        try:
            with self._telemetry.start_run(run.trace, {"wfi.workflow": initiation.workflow, "wfi.run_key": run.run_key}):
                handle = await self._client.start_workflow(
                    req.workflow_type, run.input, id=run.run_key, task_queue=req.task_queue,
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                    execution_timeout=timeout,
                    search_attributes=TypedSearchAttributes([
                        SearchAttributePair(WFI_WORKFLOW, initiation.workflow),
                        SearchAttributePair(WFI_ACTIVATION, initiation.activation_id),
                    ]),
                    static_summary=f"{initiation.workflow} run from trigger {run.input.trigger.name}",
                    # When this worker also serves the run's task queue, its first task comes back with the
                    # start response: one matching hop less between admission and the run's first line.
                    request_eager_start=True,
                )
            # USE_EXISTING answers a retried start with the running run: count only a real start.
            if started_new_run(handle):
                self._telemetry.run_started(initiation.workflow, run.input.trigger.name, initiation.accepted_at,
                                            initiation.scheduled_at)
            return StartedRun(run_key=run.run_key, run_id=handle.result_run_id)
        except WorkflowAlreadyStartedError:
            return await self._describe_closed(run.run_key)
        except RPCError as exc:
            if not refused_for_good(exc):
                raise  # transient (server unavailable, ...): the activity is retried
            return StartedRun(run_key=run.run_key, error=f"the server refused the start: {exc.message}")
        except ValueError as exc:  # the input cannot be encoded (e.g. pydantic serialisation)
            return StartedRun(run_key=run.run_key, error=f"the run input cannot be encoded: {exc}")

    async def _describe_closed(self, run_key: str) -> StartedRun:
        desc = await self._client.get_workflow_handle(run_key).describe()
        status = TERMINAL.get(desc.status) if desc.status else None
        return StartedRun(run_key=run_key, run_id=desc.run_id, already_started=True, terminal_status=status)

    @activity.defn(name=WATCH_RUNS_ACTIVITY)
    async def watch_runs(self, req: WatchRequest) -> list[RunOutcome]:
        """Wait until at least one run is terminal (a first look: every one), or max_wait; report every terminal one.

        Bounded: the runs are watched through visibility queries and a few describe calls at a time,
        never a long poll per run (``activities._watch``), and one run that cannot be watched never
        fails the watch of the others.
        """
        watcher = RunWatcher(self._client, [r.run_key for r in req.runs], first_sweep=req.first_sweep_seconds,
                             first_look=req.first_look)
        sweeping = asyncio.create_task(watcher.run())
        heartbeat = asyncio.create_task(_heartbeat_forever())
        # A sweep finds the endings of its interval at once; lingering for the next sweep or two brings
        # the rest of a burst in the same answer (one activity and one workflow task for many runs).
        # A small watch is long-polled and answers at once (a queue's head).
        linger = req.linger_seconds if watcher.long_polled else max(req.linger_seconds, 2 * MIN_INTERVAL)
        try:
            if req.first_look:  # nothing awaits these endings at once: every one in one report, or what max_wait found
                await asyncio.wait([sweeping], timeout=req.max_wait_seconds)
            else:
                await wait_for_burst([*watcher.outcomes.values(), sweeping], max_wait=req.max_wait_seconds, linger=linger)
            if sweeping.done():
                sweeping.result()  # raises what stopped the sweeps (a bug of ours): the activity retries
            outcomes = [RunOutcome(run_key=key, status=f.result()) for key, f in watcher.outcomes.items() if f.done()]
        finally:
            heartbeat.cancel()
            sweeping.cancel()
        if req.publish_for is not None and outcomes:
            runs = {r.run_key: r for r in req.runs}
            now = datetime.now(UTC)
            await self._publish(outcomes, [transition_event(req.publish_for, o.run_key, runs[o.run_key].run_id, o.status,
                                                            runs[o.run_key].causation, now) for o in outcomes])
        return outcomes

    @activity.defn(name=CONTROL_RUN_ACTIVITY)
    async def control_run(self, req: ControlRequest) -> str:
        """Cancel or terminate a run; ``applied``, or ``not applied: ...`` when the run had already closed.

        Only the server's definite answer that the run is not open (``NOT_FOUND``: closed, or never
        existed) is final. Any other error (the server unreachable, overloaded, restarting) is raised,
        so the activity is retried: a control that was decided is never dropped (under
        ``cancel_other`` the next run waits for it).
        """
        return await self._control_one(req)

    @activity.defn(name=CONTROL_RUNS_ACTIVITY)
    async def control_runs(self, req: ControlRunsRequest) -> list[str]:
        """Cancel or terminate a page of runs, ``CONTROLS_AT_ONCE`` calls at a time; one answer per
        run, in order, as :meth:`control_run` gives it.

        A transient error of any run fails the activity after the others were tried: it is retried
        whole, and a repeated cancel or terminate of a run changes nothing (a closed run answers
        ``not applied``).
        """
        room = asyncio.Semaphore(CONTROLS_AT_ONCE)

        async def one(control: ControlRequest) -> str:
            async with room:
                result = await self._control_one(control)
                activity.heartbeat()
                return result

        results = await asyncio.gather(*(one(c) for c in req.runs), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return [str(r) for r in results]

    async def _control_one(self, req: ControlRequest) -> str:
        handle = self._client.get_workflow_handle(req.run_key)
        try:
            if req.action == "terminate":
                await handle.terminate(reason=req.reason)
            else:
                await handle.cancel()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            return f"not applied: the run is not open ({exc.message})"
        return "applied"

    def all(self) -> list[Any]:
        return [self.start_runs, self.watch_runs, self.control_run, self.control_runs]


async def wait_for_burst(
    tasks: Iterable[asyncio.Future[Any]], *, max_wait: float, linger: float, max_linger: float = MAX_LINGER,
) -> None:
    """Wait until one task is done (at most ``max_wait``), then while more keep finishing less than
    ``linger`` apart, for at most ``max_linger`` more: a burst of run endings comes back in one
    report (each report costs the activation a task, a new watch activity and a lifecycle publish)."""
    done, pending = await asyncio.wait(set(tasks), timeout=max_wait, return_when=asyncio.FIRST_COMPLETED)
    until = time.monotonic() + max_linger
    while done and pending and (left := until - time.monotonic()) > 0:
        done, pending = await asyncio.wait(pending, timeout=min(linger, left), return_when=asyncio.FIRST_COMPLETED)


async def _heartbeat_forever() -> None:
    """A heartbeat every HEARTBEAT_EVERY seconds, the first after that long: each is a write to the
    activation's state on the server, and most watches (a first look) end well within the interval."""
    while True:
        await asyncio.sleep(HEARTBEAT_EVERY)
        activity.heartbeat()


