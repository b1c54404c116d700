"""Carries out the calls of a dispatch plan (``core.engine.Dispatcher``) as activities and signals,
and reports what came back to the engine. It decides nothing: which calls, in which order and
with what retries is the plan's and this module's fixed policy; what the results mean is the
engine's.

Each call runs in a task of its own, created in plan order, so the commands of a workflow task
are in the order the plan gave (the SDK runs new tasks in creation order).
Each task is started by :class:`workflows._tasks.Tasks`: what one raises and does not handle
fails the workflow task instead of ending unseen.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
    from wf_initiation._sdk import failed_decoding

    # Activities by reference: a renamed or re-typed activity fails here, not in a running activation.
    # Poll connectors stay by name (third-party ones are registered by manifest name at run time).
    from wf_initiation.activities.lifecycle import LifecycleActivities
    from wf_initiation.activities.runs import RunActivities
    from wf_initiation.activities.shards import ShardActivities
    from wf_initiation.core.connections import redact
    from wf_initiation.core.engine import (
        FIRST_LOOK_SWEEP,
        FIRST_LOOK_WAIT,
        Call,
        ControlCall,
        Decision,
        Dispatcher,
        Engine,
        GrowCall,
        LifecycleEvent,
        MeasureCall,
        PollCall,
        PollItemIn,
        PollResultIn,
        PublishCall,
        ShardFill,
        SignalCall,
        StartCall,
        WatchCall,
    )
    from wf_initiation.core.limits import MIB
    from wf_initiation.wire import (
        ControlRequest,
        ControlRunsRequest,
        GrowRequest,
        GrowResult,
        MeasureShardsRequest,
        PollRequest,
        PollResponse,
        PublishRequest,
        RunOutcome,
        RunToStart,
        StartedRun,
        StartRunsRequest,
        WatchedRun,
        WatchRequest,
    )
    from wf_initiation.wire import poll_activity_name as activity_name_for

    from ._decode import decode
    from ._tasks import Tasks
    from ._telemetry import ActivationTelemetry

START_ATTEMPTS = 8  # then the chunk's runs are started one by one; one that still fails is a start fault


class Executor:
    """Runs plan calls for one activation run.

    ``absorb`` keeps an engine decision's commands for the next dispatch, ``poke`` wakes the main
    loop, ``now`` is the activation's time (never before an instant a task admitted at), ``tasks``
    starts each call's task."""

    def __init__(self, engine: Engine, dispatcher: Dispatcher, telemetry: ActivationTelemetry, *,
                 absorb: Callable[[Decision[Any]], Any], poke: Callable[[], None], now: Callable[[], datetime],
                 tasks: Tasks, retry_after: Callable[[], bool] = lambda: True) -> None:
        self._engine = engine
        self._honours_retry_after = retry_after  # the run's patch (workflows/_compat.py), asked only when a source asks
        self._dispatcher = dispatcher
        self._telemetry = telemetry
        self._absorb = absorb
        self._poke = poke
        self._now = now
        self._spawn = tasks.spawn

    def run(self, calls: list[Call], hold: timedelta | None) -> None:
        for call in calls:
            if type(call) is StartCall:
                self._spawn(self._start(call, hold if call.hold else None), "start runs")
            elif type(call) is ControlCall:
                self._spawn(self._control(call), "control run")
            elif type(call) is SignalCall:
                self._spawn(self._signal(call), "signal run")
            elif type(call) is PublishCall:
                self._spawn(self._publish(call), "publish lifecycle")
            elif type(call) is WatchCall:
                self._spawn(self._watch(call), "watch runs")
            elif type(call) is PollCall:
                self._spawn(self._poll(call), f"poll {call.command.entry}")
            elif type(call) is MeasureCall:
                self._spawn(self._measure(call), "growth: how full is each shard")
            elif type(call) is GrowCall:
                self._spawn(self._grow(call), f"growth: split into {call.command.to} shards")

    # ------------------------------------------------------------------ runs
    async def _start(self, call: StartCall, hold: timedelta | None) -> None:
        run = self._engine.spec.run
        bounded = self._dispatcher.bounded
        # A regular activity unless ``hold``: then a local one that first sleeps the hold; it holds
        # the workflow task (and so every update's acknowledgement) until start_workflow returns.
        # Idempotent either way: the run key is the workflow id, so a retry after a crash cannot
        # start a second run.
        execute = workflow.execute_local_activity_method if hold is not None else workflow.execute_activity_method
        failure: ActivityError | None = None
        try:
            results: list[StartedRun] = await execute(
                RunActivities.start_runs,
                StartRunsRequest(
                    workflow_type=run.workflow_type, task_queue=run.task_queue,
                    execution_timeout_seconds=run.execution_timeout.total_seconds() if run.execution_timeout else None,
                    runs=[RunToStart(run_key=c.run_key, input=c.input, trace=self._telemetry.carrier(c.run_key))
                          for c in call.runs],
                    not_before_seconds=hold.total_seconds() if hold is not None else 0.0,
                    # A held start keeps the workflow task open: it leaves the publishing to the activation.
                    publish_started=hold is None and self._engine.spec.policies.lifecycle_events,
                ),
                start_to_close_timeout=timedelta(seconds=15),
                retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=10),
                                         maximum_attempts=START_ATTEMPTS if bounded else 0),
                summary=f"start {len(call.runs)} run(s)",
            )
        except ActivityError as exc:
            if not bounded:
                raise
            failure = exc
        finally:
            self._dispatcher.start_ended(call)
        if failure is not None:
            self._start_failed(call, failure)
            self._poke()
            return
        now = self._now()
        for r in results:
            self._dispatcher.started(r.run_key)
            if r.error is not None and bounded:
                self._absorb(self._engine.run_start_failed(r.run_key, r.error, now))
                continue
            self._absorb(self._engine.run_started(r.run_key, r.run_id, now, published=r.published))
            if r.terminal_status:
                self._absorb(self._engine.run_finished(r.run_key, r.terminal_status, now))
        self._poke()

    def _start_failed(self, call: StartCall, exc: ActivityError) -> None:
        """A start activity failed for good: a cause that cannot pass (non-retryable, or an input the
        start cannot decode) isolates its runs; a transient one only starts the chunk again."""
        cause = exc.cause
        permanent = isinstance(cause, ApplicationError) and (cause.non_retryable or failed_decoding(cause))
        for fault in self._dispatcher.start_failed(call, permanent=permanent, error=f"the start activity failed: {cause}"):
            self._absorb(self._engine.run_start_failed(fault.run_key, fault.error, self._now()))

    async def _watch(self, call: WatchCall) -> None:
        try:
            outcomes: list[RunOutcome] = await workflow.execute_activity_method(
                RunActivities.watch_runs, self._watch_request(call),
                start_to_close_timeout=timedelta(minutes=10), heartbeat_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
                summary=f"watch {len(call.runs)} run(s)",
            )
        finally:
            self._dispatcher.watch_ended(call)
        now = self._now()
        for o in outcomes:
            self._absorb(self._engine.run_finished(o.run_key, o.status, now, published=o.published))
        self._poke()

    def _watch_request(self, call: WatchCall) -> WatchRequest:
        """The watch's runs; with lifecycle events on, what it needs to publish their endings itself."""
        spec = self._engine.spec
        publish = spec.policies.lifecycle_events
        runs = [WatchedRun(run_key=r.run_key, run_id=r.run_id, causation=self._engine.causation(r.run_key) if publish else None)
                for r in call.runs]
        if call.first_look:  # runs started meanwhile wait for the next look (core.engine.Dispatcher)
            return WatchRequest(runs=runs, publish_for=spec.workflow if publish else None, first_look=True,
                                max_wait_seconds=FIRST_LOOK_WAIT, first_sweep_seconds=FIRST_LOOK_SWEEP)
        return WatchRequest(runs=runs, publish_for=spec.workflow if publish else None)

    async def _control(self, call: ControlCall) -> None:
        self._dispatcher.control_began(call)
        retry = RetryPolicy(maximum_interval=timedelta(seconds=30))  # transient errors retry (the run may be open)
        try:
            if call.paged:
                results: list[str] = await workflow.execute_activity_method(
                    RunActivities.control_runs,
                    ControlRunsRequest(runs=[ControlRequest(run_key=c.run_key, action=c.action, reason=c.reason)
                                             for c in call.commands]),
                    start_to_close_timeout=timedelta(minutes=5), heartbeat_timeout=timedelta(seconds=30),
                    retry_policy=retry, summary=f"{call.command.action} {len(call.commands)} run(s)",
                )
            else:
                command = call.command
                results = [await workflow.execute_activity_method(
                    RunActivities.control_run, ControlRequest(run_key=command.run_key, action=command.action, reason=command.reason),
                    start_to_close_timeout=timedelta(seconds=30), retry_policy=retry,
                )]
        finally:
            self._dispatcher.control_ended(call)
            if self._engine.deactivation_status() is not None or (call.paged and self._dispatcher.controls_waiting):
                self._poke()  # only then: histories before it must replay
        self._absorb(self._engine.runs_controlled([c.run_key for c in call.commands], results))

    # ------------------------------------------------------------------ signals and lifecycle events
    async def _signal(self, call: SignalCall) -> None:
        command = call.command
        handle = workflow.get_external_workflow_handle(command.workflow_id)
        error = None
        try:
            await handle.signal(command.signal, command.payload)
        except FailureError as exc:
            error = f"{command.workflow_id}: {exc}"
            if command.key is None:
                self._absorb(self._engine.record_error(self._now(), "signal_failed", error))
        if command.key is not None:
            self._dispatcher.signal_ended(call)
            self._absorb(self._engine.command_done(command.key, error, self._now()))
            self._poke()

    async def _publish(self, call: PublishCall) -> None:
        events = [LifecycleEvent(connector=c.connector, payload=c.payload) for c in call.events]
        try:
            await workflow.execute_activity_method(
                LifecycleActivities.publish, PublishRequest(events=events), start_to_close_timeout=timedelta(seconds=15),
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
                summary=f"publish {len(call.events)} lifecycle event(s)",
            )
        finally:
            self._dispatcher.publish_ended(call)
        for c in call.events:
            self._absorb(self._engine.command_done(c.key, None, self._now()))
        self._poke()

    # ------------------------------------------------------------------ growth (scale.grow_at)
    async def _measure(self, call: MeasureCall) -> None:
        request = MeasureShardsRequest(workflow=self._engine.spec.workflow, shards=call.command.shards)
        try:
            fills: list[ShardFill] = await workflow.execute_activity_method(
                ShardActivities.measure_shards, request, start_to_close_timeout=timedelta(minutes=1),
                retry_policy=RetryPolicy(maximum_attempts=3), summary=f"growth: how full is each of {request.shards} shards",
            )
        except ActivityError as exc:
            self._absorb(self._engine.measure_failed(str(exc.cause or exc), self._now()))
        else:
            self._absorb(self._engine.shards_measured(fills, self._now()))
        self._poke()

    async def _grow(self, call: GrowCall) -> None:
        """The split of a growth: its last step rebinds this shard, which ends the growth in the engine
        (and continues as new: this call's answer then lands nowhere, which is as well)."""
        c = call.command
        request = GrowRequest(spec=self._engine.spec, to=c.to, task_queue=workflow.info().task_queue, reason=c.reason)
        try:
            result: GrowResult = await workflow.execute_activity_method(
                ShardActivities.grow, request, start_to_close_timeout=timedelta(minutes=30),
                heartbeat_timeout=timedelta(seconds=30), retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
                summary=f"growth: split into {c.to} shards ({c.reason})",
            )
        except ActivityError as exc:
            self._absorb(self._engine.growth_refused(c.to, str(exc.cause or exc), self._now()))
        else:
            if not result.ok:
                self._absorb(self._engine.growth_refused(c.to, result.message, self._now()))
        self._poke()

    # ------------------------------------------------------------------ polls

    def _retry_after(self, cause: BaseException) -> timedelta | None:
        """How long the failed poll's source asked to be left alone (its error's ``next_retry_delay``,
        set from an HTTP ``Retry-After``), when this run honours it."""
        delay = cause.next_retry_delay if isinstance(cause, ApplicationError) else None
        return delay if delay and self._honours_retry_after() else None

    async def _poll(self, call: PollCall) -> None:
        c = call.command
        request = PollRequest(connector=c.connector, config=c.config, connection=c.connection, cursor=c.cursor, limit=c.limit)
        try:
            # Decoded here, not by the SDK: a response the converter cannot decode would otherwise
            # fail the workflow task on every attempt instead of failing this poll.
            raw = await workflow.execute_activity(
                activity_name_for(c.connector), request, result_type=RawValue,
                start_to_close_timeout=self._engine.spec.policies.poll.timeout,
                retry_policy=RetryPolicy(maximum_attempts=1),  # backoff is the engine's (POLL-2)
                summary=f"poll {c.entry} from cursor {(c.cursor or '')[:100]}",
            )
            response = decode(raw, PollResponse, max_bytes=4 * MIB, what="the poll response")
            result = PollResultIn(items=[PollItemIn(payload=i.payload, cursor_after=i.cursor_after, problem=i.problem)
                                         for i in response.items],
                                  cursor=response.cursor, more=response.more, stable_order=response.stable_order,
                                  notices=[redact(n) for n in response.notices])
        except ActivityError as exc:
            cause = exc.cause if exc.cause is not None else exc
            # Built-in connectors redact their errors; this also strips URL/DSN passwords from any other's.
            self._absorb(self._engine.poll_failed(c.entry, c.seq, redact(str(cause)), self._now(),
                                                  retry_after=self._retry_after(cause)))
        except (TypeError, ValueError) as exc:  # a response that does not convert is a failed poll, not a stuck one
            self._absorb(self._engine.poll_failed(c.entry, c.seq, f"unusable poll response: {exc}", self._now()))
        else:
            self._absorb(self._engine.poll_succeeded(c.entry, c.seq, c.version, result, self._now()))
        finally:
            self._poke()
