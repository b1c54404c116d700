"""The activation workflow: a thin Temporal shell around the pure engine.

One long-lived workflow per workflow identity (id ``wfi-activation:<workflow>``), so webhook
bridges address a stable id; each (re)activation with a different binding hash becomes a new
*activation id* inside it (INIT-4), and everything the previous activation accepted is carried on
untouched (INIT-5, TRIG-12). Deliveries arrive as updates (disposition returned once durable,
EXT-8) or signals (disposition queryable); run starts, outcome watching and polls are activities.
State is restored in ``@workflow.init`` so deliveries in the first task after continue-as-new are
not lost (TEMPORAL-NOTES).
"""

from __future__ import annotations

import asyncio
import struct
import zlib
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
    from wf_initiation.activities.clock import WAIT_ACTIVITY
    from wf_initiation.activities.runs import ControlRequest, RunOutcome, RunToStart, StartedRun, StartRunsRequest, WatchedRun, WatchRequest
    from wf_initiation.core.activation import ActivationSpec
    from wf_initiation.core.connections import redact
    from wf_initiation.activities.poll import PollRequest, PollResponse, activity_name_for
    from wf_initiation.core.engine import Engine, EngineState, PollCall, PollItemIn, PollResultIn, initial_state, operator, summary
    from wf_initiation.core.engine._poll import abandon_in_flight
    from wf_initiation.core.engine import _deactivate
    from wf_initiation.activities.lifecycle import PublishRequest
    from wf_initiation.core.engine import _subscriptions as subs
    from wf_initiation.core.engine._subscriptions import LifecycleEvent, SubscribeRequest, UnsubscribeRequest
    from wf_initiation.core.engine._types import ControlRun, DeliveryResult, PublishEvent, SignalRun, StartRun

    from . import search_attributes as sa
    from ._fresh import FreshTimeGuard
    from ._telemetry import ActivationTelemetry
    from wf_initiation.wire import (
        DEACTIVATE_UPDATE, MAX_BULK, ActivateResult, DeactivatedResult, DeactivateRequest, DeactivateResult,
        DeliveryRequest, OperatorRequest, OperatorResult,
    )

START_BATCH = 100
MAX_START_ACTIVITIES = 4
LOCAL_START_MAX = 10
WATCH_BATCH = 200
MAX_WATCHERS = 8
MAX_POLLS = 4
PUBLISH_BATCH = 200
WAKE_AHEAD_PATCH = "wfi-schedule-wake-ahead"
POLL_NOW_PATCH = "wfi-poll-now-survives-flight"


def workflow_id_for(workflow_name: str) -> str:
    return f"wfi-activation:{workflow_name}"


_STATE_HEADER = struct.Struct("<4sI")


def encode_state(engine: Engine) -> bytes:
    """State for continue-as-new: zlib'd JSON plus the packed retired dedup entries (see _codec)."""
    engine.retire_released()
    body = zlib.compress(engine.state.model_dump_json().encode(), 6)
    return _STATE_HEADER.pack(b"WFS1", len(body)) + body + engine.retired.pack()


def decode_state(blob: bytes) -> EngineState:
    magic, size = _STATE_HEADER.unpack_from(blob)
    if magic != b"WFS1":
        raise ValueError("unknown activation state format")
    start = _STATE_HEADER.size
    state = EngineState.model_validate_json(zlib.decompress(blob[start : start + size]))
    state.compact_events = blob[start + size :]
    return state


@workflow.defn(name="wfi.Activation")
class ActivationWorkflow:
    @workflow.init
    def __init__(self, spec: ActivationSpec, state: bytes | None = None) -> None:
        now = workflow.now()
        restored = decode_state(state) if state else initial_state(spec, now)
        abandon_in_flight(restored)  # a poll of the previous run never reports here (POLL-10)
        self._engine = Engine(spec, restored)
        self._pending_spec: ActivationSpec | None = None
        self._wake = False
        self._timers: set[datetime] = set()
        self._starting: set[str] = set()
        self._start_backlog: list[StartRun] = []
        self._watched: set[str] = set()
        self._watchers = 0
        self._start_tasks = 0
        self._admitted_until = datetime.min.replace(tzinfo=workflow.now().tzinfo)  # see _anticipate
        self._polls_in_flight = 0
        self._engine.outbox.extend(self._engine.pending_starts())
        self._acking: set[str] = set()  # keys of kept signals/publishes in flight (engine hook)
        self._engine.outbox.extend(subs.unacked_commands(self._engine))
        self._controls = 0  # control_run activities in flight (a deactivation completes after them)
        _deactivate.on_start(self._engine, spec, now)  # started with a deactivated activation's state
        self._telemetry = ActivationTelemetry(self._engine)  # replay-safe traces and metrics

    # ------------------------------------------------------------------ main loop
    @workflow.run
    async def run(self, spec: ActivationSpec, state: bytes | None = None) -> DeactivatedResult:
        """Runs until deactivated (docs/lifecycle.md); the result carries the final state."""
        self._fresh_guard = FreshTimeGuard().start()  # time-based decisions only at a task's real time
        self._publish(initial=True)
        while True:
            now = workflow.now()
            self._engine.tick(now)
            _deactivate.progress(self._engine)  # controls running runs while deactivating; else nothing
            hold = self._anticipate(now)
            if not self._dispatch(hold) and hold is not None:
                await self._wait(hold)  # nothing started: still record nothing before the instant
            self._publish()
            if self._deactivated():
                return await self._complete()
            if self._should_continue_as_new():
                await self._continue_as_new()
            self._wake = False
            self._arm_timer(self._now())
            await workflow.wait_condition(lambda: self._wake)

    def _anticipate(self, now: datetime) -> timedelta | None:
        """Woken ``schedule_wake_ahead`` before an occurrence: admit it at its instant now, and return
        how long this task must hold before anything it decided takes effect.

        Deciding ahead changes nothing the decision depends on: this task is held until the instant
        (by the start, which sleeps first, or by a wait), so no delivery, outcome or operator action
        can reach the activation in between. Held from the task's start, which the server stamped,
        on the worker's monotonic clock: the run cannot begin before its instant whatever the
        worker's wall clock says (SCHED-6; activities.clock)."""
        ahead = self._wake_ahead()
        instant = self._engine.next_occurrence()
        if instant is None or not now < instant <= now + ahead:
            return None
        self._engine.tick_schedules(instant)
        self._admitted_until = instant
        return instant - now

    async def _wait(self, hold: timedelta) -> None:
        await workflow.execute_local_activity(
            WAIT_ACTIVITY, hold.total_seconds(), result_type=float,
            start_to_close_timeout=hold + timedelta(seconds=10),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=50)),
            summary=f"hold until {self._admitted_until.isoformat()}",
        )

    def _now(self) -> datetime:
        """workflow.now(), but never before an instant this task admitted at."""
        return max(workflow.now(), self._admitted_until)

    def _wake_ahead(self) -> timedelta:
        """``schedule_wake_ahead`` for a schedule activation; zero in a run begun by a build without it
        (a patch: its history has timers at the instants and no wait activities, and must replay)."""
        ahead = self._engine.spec.policies.schedule_wake_ahead
        if not ahead or self._engine.next_occurrence() is None or not workflow.patched(WAKE_AHEAD_PATCH):
            return timedelta(0)
        return ahead

    def _arm_timer(self, now: datetime) -> None:
        """One timer per earlier deadline, never cancelled: a cancelled timer costs a history event
        on every wake-up (and trips the time-skipping test server); a stale one just wakes us once."""
        wake = self._engine.next_wakeup(self._wake_ahead())
        if wake is None or (self._timers and min(self._timers) <= wake):
            return
        self._timers.add(wake)
        asyncio.create_task(self._timer(wake, max(wake - now, timedelta(milliseconds=1))), name="deadline")

    async def _timer(self, deadline: datetime, delay: timedelta) -> None:
        try:
            await workflow.sleep(delay, summary=f"next deadline {deadline.isoformat()}")
        finally:
            self._timers.discard(deadline)
            self._poke()

    def _poke(self) -> None:
        self._wake = True

    # ------------------------------------------------------------------ commands
    def _dispatch(self, hold: timedelta | None = None) -> bool:
        """Execute the engine's commands; with ``hold``, starts wait that long first (in the task).
        Returns whether a start holding the task was issued."""
        held = False
        commands = self._engine.take_commands()
        for c in commands:
            if isinstance(c, StartRun) and c.run_key not in self._starting:
                self._starting.add(c.run_key)
                self._start_backlog.append(c)
        # Start activities are counted and created here, synchronously, in one place: which commands
        # a workflow task emits must never depend on the order in which waiting coroutines resume.
        while self._start_backlog and self._start_tasks < MAX_START_ACTIVITIES:
            chunk, self._start_backlog = self._start_backlog[:START_BATCH], self._start_backlog[START_BATCH:]
            self._start_tasks += 1
            # Anticipated occurrences start from inside the task, after the hold: the run begins at
            # its instant plus a start call, not after the task, an activity task and the call.
            local = hold is not None and len(chunk) <= LOCAL_START_MAX
            held |= local
            asyncio.create_task(self._start_runs(chunk, hold if local else None), name="start runs")
        for c in commands:
            if isinstance(c, ControlRun):
                asyncio.create_task(self._control(c), name="control run")
            elif isinstance(c, SignalRun) and c.key not in self._acking:
                self._acking.add(c.key) if c.key else None
                asyncio.create_task(self._signal(c), name="signal run")
        publishes = [c for c in commands if isinstance(c, PublishEvent) and c.key not in self._acking]
        for i in range(0, len(publishes), PUBLISH_BATCH):
            self._acking.update(c.key for c in publishes[i : i + PUBLISH_BATCH])
            asyncio.create_task(self._publish_events(publishes[i : i + PUBLISH_BATCH]), name="publish lifecycle")
        self._ensure_watchers()
        for request in self._engine.polls_due(workflow.now()):
            asyncio.create_task(self._poll(request), name=f"poll {request.entry}")
        return held

    async def _start_runs(self, chunk: list[StartRun], hold: timedelta | None = None) -> None:
        run = self._engine.spec.run
        # A regular activity unless ``hold``: then a local one that first sleeps the hold; it holds
        # the workflow task (and so every update's acknowledgement) until start_workflow returns.
        # Idempotent either way: the run key is the workflow id, so a retry after a crash cannot
        # start a second run.
        execute = workflow.execute_local_activity if hold is not None else workflow.execute_activity
        try:
            results: list[StartedRun] = await execute(
                "wfi.start_runs",
                StartRunsRequest(
                    workflow_type=run.workflow_type, task_queue=run.task_queue,
                    execution_timeout_seconds=run.execution_timeout.total_seconds() if run.execution_timeout else None,
                    runs=[RunToStart(run_key=c.run_key, input=c.input, trace=self._telemetry.carrier(c.run_key)) for c in chunk],
                    not_before_seconds=hold.total_seconds() if hold is not None else 0.0,
                ),
                result_type=list[StartedRun],
                start_to_close_timeout=timedelta(seconds=15),
                retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=10)),
                summary=f"start {len(chunk)} run(s)",
            )
        finally:
            self._start_tasks -= 1
            self._starting.difference_update(c.run_key for c in chunk)
        now = self._now()
        for r in results:
            self._engine.run_started(r.run_key, r.run_id, now)
            if r.terminal_status:
                self._engine.run_finished(r.run_key, r.terminal_status, now)
        self._poke()

    def _ensure_watchers(self) -> None:
        unwatched = [r for r in self._engine.state.runs.values() if r.status == "running" and r.run_key not in self._watched]
        while unwatched and self._watchers < MAX_WATCHERS:
            chunk, unwatched = unwatched[:WATCH_BATCH], unwatched[WATCH_BATCH:]
            self._watched.update(r.run_key for r in chunk)
            self._watchers += 1
            asyncio.create_task(self._watch([WatchedRun(run_key=r.run_key, run_id=r.temporal_run_id) for r in chunk]))

    async def _watch(self, runs: list[WatchedRun]) -> None:
        try:
            outcomes: list[RunOutcome] = await workflow.execute_activity(
                "wfi.watch_runs", WatchRequest(runs=runs), result_type=list[RunOutcome],
                start_to_close_timeout=timedelta(minutes=10), heartbeat_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
                summary=f"watch {len(runs)} run(s)",
            )
        finally:
            self._watchers -= 1
            self._watched.difference_update(r.run_key for r in runs)
        now = self._now()
        for o in outcomes:
            self._engine.run_finished(o.run_key, o.status, now)
        self._poke()

    async def _control(self, command: ControlRun) -> None:
        self._controls += 1
        try:
            await workflow.execute_activity(
                "wfi.control_run", ControlRequest(run_key=command.run_key, action=command.action, reason=command.reason),
                result_type=str, start_to_close_timeout=timedelta(seconds=30),
            )
        finally:
            self._controls -= 1
            if self._engine.state.deactivation is not None:  # only then: histories before it must replay
                self._poke()

    async def _signal(self, command: SignalRun) -> None:
        handle = workflow.get_external_workflow_handle(command.workflow_id)
        error = None
        try:
            await handle.signal(command.signal, command.payload)
        except FailureError as exc:
            error = f"{command.workflow_id}: {exc}"
            if command.key is None:
                self._engine.record_error(self._now(), "signal_failed", error)
        if command.key is not None:
            self._acking.discard(command.key)
            subs.command_done(self._engine, command.key, error, self._now())
            self._poke()

    async def _publish_events(self, chunk: list[PublishEvent]) -> None:
        events = [LifecycleEvent(connector=c.connector, payload=c.payload) for c in chunk]
        try:
            await workflow.execute_activity(
                "wfi.publish_lifecycle", PublishRequest(events=events), start_to_close_timeout=timedelta(seconds=15),
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
                summary=f"publish {len(chunk)} lifecycle event(s)",
            )
        finally:
            self._acking.difference_update(c.key for c in chunk)
        for c in chunk:
            subs.command_done(self._engine, c.key, None, self._now())
        self._poke()

    async def _poll(self, call: PollCall) -> None:
        request = PollRequest(connector=call.connector, config=call.config, connection=call.connection,
                              cursor=call.cursor, limit=call.limit)
        try:
            response: PollResponse = await workflow.execute_activity(
                activity_name_for(call.connector), request, result_type=PollResponse,
                start_to_close_timeout=self._engine.spec.policies.poll.timeout,
                retry_policy=RetryPolicy(maximum_attempts=1),  # backoff is the engine's (POLL-2)
                summary=f"poll {call.entry} from cursor {call.cursor}",
            )
            result = PollResultIn(items=[PollItemIn(payload=i.payload, cursor_after=i.cursor_after, problem=i.problem)
                                         for i in response.items],
                                  cursor=response.cursor, more=response.more, stable_order=response.stable_order)
        except ActivityError as exc:
            cause = exc.cause if exc.cause is not None else exc
            # Built-in connectors redact their errors; this also strips URL/DSN passwords from any other's.
            self._engine.poll_failed(call.entry, call.seq, redact(str(cause)), self._now())
        except (TypeError, ValueError) as exc:  # a response that does not convert is a failed poll, not a stuck one
            self._engine.poll_failed(call.entry, call.seq, f"unusable poll response: {exc}", self._now())
        else:
            self._engine.poll_succeeded(call.entry, call.seq, call.version, result, self._now())
        finally:
            self._poke()

    # ------------------------------------------------------------------ continue-as-new
    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        budget = self._engine.spec.policies.max_history_events
        return self._pending_spec is not None or info.is_continue_as_new_suggested() or info.get_current_history_length() > budget

    async def _continue_as_new(self) -> None:
        # Let in-flight starts report (they are quick); watchers and polls are simply re-issued.
        # Starts in the backlog are re-issued by the next run (their runs are `starting` in the state).
        await workflow.wait_condition(lambda: self._start_tasks == 0)
        if self._engine.state.deactivation is not None:  # let its controls land (the next run would repeat them)
            await workflow.wait_condition(lambda: self._controls == 0)
        await workflow.wait_condition(workflow.all_handlers_finished)
        spec = self._pending_spec or self._engine.spec
        workflow.continue_as_new(args=[spec, encode_state(self._engine)])

    # ------------------------------------------------------------------ deactivation (docs/lifecycle.md)
    @workflow.update(name=DEACTIVATE_UPDATE)
    def deactivate(self, request: DeactivateRequest) -> DeactivateResult:
        outcome = _deactivate.deactivate(self._engine, request, self._now())
        self._poke()
        return DeactivateResult(ok=outcome.ok, message=outcome.message, action_id=request.action_id,
                                status=outcome.status, remaining=outcome.remaining)  # type: ignore[arg-type]

    @deactivate.validator
    def _validate_deactivate(self, request: DeactivateRequest) -> None:
        self._refuse_while_rebinding()

    def _deactivated(self) -> bool:
        """Settled, and nothing of ours in flight: starts, controls, notices, lifecycle publishes."""
        return (_deactivate.settled(self._engine) and self._start_tasks == 0 and not self._start_backlog
                and self._controls == 0 and not self._acking)

    async def _complete(self) -> DeactivatedResult:
        await workflow.wait_condition(workflow.all_handlers_finished)
        record = _deactivate.finish(self._engine, self._now())
        self._publish()
        return DeactivatedResult(workflow=self._engine.spec.workflow, activation_id=self._engine.spec.activation_id,
                                 deactivation=record, summary=summary.short(self._engine), state=encode_state(self._engine))

    # ------------------------------------------------------------------ deliveries
    @workflow.update(name="deliver")
    def deliver(self, request: DeliveryRequest) -> DeliveryResult:
        now = self._now()
        result = (_deactivate.refuse(self._engine, request.entry, request.payload, now)
                  or self._engine.deliver(request.entry, request.payload, now))
        self._telemetry.delivered(self._engine, [result])
        self._poke()
        return result

    @deliver.validator
    def _validate_deliver(self, request: DeliveryRequest) -> None:
        self._refuse_while_rebinding()

    @workflow.update(name="deliver_many")
    def deliver_many(self, requests: list[DeliveryRequest]) -> list[DeliveryResult]:
        now = self._now()
        results = [_deactivate.refuse(self._engine, r.entry, r.payload, now) or self._engine.deliver(r.entry, r.payload, now)
                   for r in requests]
        self._telemetry.delivered(self._engine, results)
        self._poke()
        return results

    @deliver_many.validator
    def _validate_deliver_many(self, requests: list[DeliveryRequest]) -> None:
        self._refuse_while_rebinding()
        if len(requests) > MAX_BULK:
            raise ValueError(f"at most {MAX_BULK} deliveries per deliver_many update; split the batch")

    @workflow.signal(name="deliver_signal")
    def deliver_signal(self, request: DeliveryRequest) -> None:
        now = self._now()
        result = (_deactivate.refuse(self._engine, request.entry, request.payload, now)
                  or self._engine.deliver(request.entry, request.payload, now))
        self._telemetry.delivered(self._engine, [result])
        self._poke()

    @workflow.signal(name=subs.SUBSCRIBE_SIGNAL)
    def subscribe(self, request: SubscribeRequest) -> None:
        """A run waits for an event of one of this activation's entries (INIT-8)."""
        if not _deactivate.refuse_subscription(self._engine, request, self._now()):
            subs.subscribe(self._engine, request, self._now())
        self._poke()

    @workflow.signal(name=subs.UNSUBSCRIBE_SIGNAL)
    def unsubscribe(self, request: UnsubscribeRequest) -> None:
        subs.unsubscribe(self._engine, request, self._now())
        self._poke()

    @workflow.signal(name=subs.LIFECYCLE_SIGNAL)
    def lifecycle_event(self, event: LifecycleEvent) -> None:
        """A lifecycle event of another run, routed to the entries watching its workflow (COMP-3)."""
        if not _deactivate.refuse_lifecycle(self._engine, event, self._now()):
            subs.route_lifecycle(self._engine, event, self._now())
        self._poke()

    def _refuse_while_rebinding(self) -> None:
        if self._pending_spec is not None:
            raise ApplicationError("activation is being replaced; retry the delivery", type="Rebinding")

    # ------------------------------------------------------------------ activation and operators
    @workflow.update(name="activate")
    def activate(self, spec: ActivationSpec) -> ActivateResult:
        """Idempotent (re)activation: same binding hash -> current; new hash -> rebound (INIT-4)."""
        current = self._engine.spec
        if spec.activation_id == current.activation_id:
            return ActivateResult(activation_id=current.activation_id, outcome="current",
                                  previous=list(self._engine.state.previous_activations))
        self._pending_spec = spec
        self._engine.rebind(spec, self._now())
        self._poke()
        return ActivateResult(activation_id=spec.activation_id, outcome="rebound",
                              previous=list(self._engine.state.previous_activations))

    @activate.validator
    def _validate_activate(self, spec: ActivationSpec) -> None:
        if spec.workflow != self._engine.spec.workflow:
            raise ValueError(f"this activation serves workflow {self._engine.spec.workflow!r}, not {spec.workflow!r}")
        if _deactivate.status(self._engine) is not None:
            raise ValueError(f"the activation of {spec.workflow!r} is being deactivated; activate it again once that "
                             f"has completed (`wfi deactivate --wait`, or `wfi state` shows it)")

    @workflow.update(name="operate")
    def operate(self, request: OperatorRequest) -> OperatorResult:
        if request.action == "poll_now":  # a build before it dropped poll_now during a poll (replay)
            self._engine.poll_now_survives_flight = workflow.patched(POLL_NOW_PATCH)
        ok, message = operator.apply(self._engine, request, self._now())
        self._poke()
        return OperatorResult(ok=ok, message=message, action_id=request.action_id)

    # ------------------------------------------------------------------ queries and visibility
    @workflow.query(name="state")
    def state(self) -> dict[str, Any]:
        return summary.full_state(self._engine)

    @workflow.query(name="summary")
    def summary_query(self) -> dict[str, Any]:
        return summary.short(self._engine)

    @workflow.query(name="events")
    def events(self, after_seq: int = 0, limit: int = 500) -> list[dict[str, Any]]:
        return summary.events(self._engine, after_seq, limit)

    @workflow.query(name="delivery")
    def delivery(self, entry: str, delivery_id: str) -> dict[str, Any] | None:
        return summary.delivery(self._engine, entry, delivery_id)

    def _publish(self, initial: bool = False) -> None:
        workflow.set_current_details(summary.markdown(self._engine))
        self._telemetry.observe(self._engine)
        status = summary.status(self._engine)
        if initial or status != getattr(self, "_published_status", None):
            self._published_status = status
            spec = self._engine.spec
            workflow.upsert_search_attributes(TypedSearchAttributes([
                SearchAttributePair(sa.WFI_WORKFLOW, spec.workflow),
                SearchAttributePair(sa.WFI_ACTIVATION, spec.activation_id),
                SearchAttributePair(sa.WFI_STATE, status),
                SearchAttributePair(sa.WFI_TRIGGERS, [e.connector for e in spec.entries]),
            ]))
