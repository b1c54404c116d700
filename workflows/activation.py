"""The activation workflow: a thin Temporal shell around the pure engine.

One long-lived workflow per workflow identity (id ``wfi-activation:<workflow>``), so webhook
bridges address a stable id; each (re)activation with a different binding hash becomes a new
*activation id* inside it (INIT-4), and everything the previous activation accepted is carried on
untouched (INIT-5, TRIG-12). Deliveries arrive as updates (disposition returned once durable,
EXT-8) or signals (disposition queryable); run starts, outcome watching and polls are activities.
State is restored in ``@workflow.init`` so deliveries in the first task after continue-as-new are
not lost (TEMPORAL-NOTES).

Hostile input (issue 11; limits in ``core.limits``, docs/limits.md): handlers outsiders can call take
raw arguments and decode them themselves (``_intake``), so an undecodable one is recorded or
refused, never dropped or a failed task. Each workflow task schedules at most ``MAX_TASK_BYTES`` of
activity inputs and signal payloads (the rest waits for the next task), each start activity carries
at most ``MAX_START_BYTES`` of run inputs, a start that cannot succeed becomes a start fault of its
run (found by starting the runs of a failed chunk one by one), and the state is measured before
continue-as-new. All of it is behind ``BOUNDED_PATCH`` so histories recorded before still replay.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
    from wf_initiation.core.activation import EVALUATION_VERSION, ActivationSpec, spec_problems
    from wf_initiation.core.connections import redact
    from wf_initiation.core.engine import (
        Command, ControlRun, Decision, DeliveryResult, Engine, LifecycleEvent, PollItemIn, PollResultIn, PublishEvent,
        RunPoll, SignalRun, StartRun, SubscribeRequest, UnsubscribeRequest, WatchRuns, WatchTarget, decode_state,
        initial_state,
    )
    from wf_initiation.core.limits import (
        CARRY_RETRY_EVENTS, DELIVERIES_PER_TASK, KIB, MAX_BULK_BYTES, MAX_CARRIED_STATE_BYTES, MAX_DELIVERY_BYTES,
        MAX_RUN_INPUT_BYTES, MAX_START_BYTES, MAX_TASK_BYTES, MIB, fit_to_bytes, json_size,
    )

    from ._fresh import FreshTimeGuard
    from ._inbox import Inbox
    from ._intake import Undecodable, decode
    from ._telemetry import ActivationTelemetry
    from wf_initiation.wire import search_attributes as sa
    from wf_initiation.wire import (
        ACTIVATE_UPDATE, ACTIVATION_WORKFLOW, DEACTIVATE_UPDATE, DELIVER_MANY_UPDATE, DELIVER_SIGNAL,
        DELIVER_UPDATE, DELIVERY_QUERY, EVENTS_QUERY, HANDLER_FAILED, INVALID_ARGUMENT, LIFECYCLE_SIGNAL, MAX_BULK,
        OPERATE_UPDATE, REBINDING, STATE_QUERY, SUBSCRIBE_SIGNAL, SUMMARY_QUERY, UNSUBSCRIBE_SIGNAL, ActivateResult,
        ControlRequest,
        DeactivatedResult, DeactivateRequest, DeactivateResult, DeliveryRequest, OperatorRequest, OperatorResult,
        PollRequest, PollResponse, PublishRequest, RunOutcome, RunToStart, StartedRun, StartRunsRequest, WatchedRun,
        WatchRequest,
    )
    from wf_initiation.wire import poll_activity_name as activity_name_for
    # Activities by reference: a renamed or re-typed activity fails here, not in a running activation.
    # Poll connectors stay by name (third-party ones are registered by manifest name at run time).
    from wf_initiation.activities.clock import wait_for_instant
    from wf_initiation._trace_context import current_carrier
    from wf_initiation.activities.lifecycle import LifecycleActivities
    from wf_initiation.activities.runs import RunActivities

R = TypeVar("R")
START_BATCH = 100
MAX_START_ACTIVITIES = 4
LOCAL_START_MAX = 10
WATCH_BATCH = 200
MAX_WATCHERS = 8
MAX_POLLS = 4
PUBLISH_BATCH = 200
WAKE_AHEAD_PATCH = "wfi-schedule-wake-ahead"
POLL_NOW_PATCH = "wfi-poll-now-survives-flight"
BOUNDED_PATCH = "wfi-hostile-input-budgets"
INBOX_PATCH = "wfi-delivery-inbox"  # deliveries past a task's budget wait in workflows/_inbox.py, not on 1 ms timers
START_ATTEMPTS = 8  # then the chunk's runs are started one by one; one that still fails is a start fault
ENVELOPE = 4 * KIB  # a request's own fields around its payload(s)
SIGNAL_ERRORS = (ValueError, TypeError, KeyError, IndexError, ArithmeticError, RecursionError, UnicodeError)




def encode_state(engine: Engine) -> bytes:
    """State for continue-as-new (the engine's carried form; :func:`decode_state` reads it back)."""
    return engine.encode_state()


@workflow.defn(name=ACTIVATION_WORKFLOW)
class ActivationWorkflow:
    @workflow.init
    def __init__(self, spec: ActivationSpec, state: bytes | None = None) -> None:
        now = workflow.now()
        # A spec recorded before evaluation 2 (JSON results, Vixie cron days, bounds) keeps the earlier
        # evaluation: decided by the input, so replay decides the same, with no marker in history.
        legacy = spec.evaluation < EVALUATION_VERSION
        restored = decode_state(state) if state else initial_state(spec, now, legacy=legacy)
        # Budgets of core.limits for runs begun with them; a run recorded before keeps its behaviour.
        self._engine = Engine(spec, restored, bounded=workflow.patched(BOUNDED_PATCH), legacy=legacy)
        # Deliveries in arrival order, DELIVERIES_PER_TASK per workflow task; a run begun before the
        # inbox keeps the per-handler admission tickets below (its history has their timers).
        self._inbox = Inbox(DELIVERIES_PER_TASK, next_task=self._next_task_for_inbox, after_take=self._poke,
                            task_marker=lambda: workflow.info().get_current_history_length()) \
            if self._engine.bounded and workflow.patched(INBOX_PATCH) else None
        self._commands: list[Command] = []  # the engine's decisions, executed by _dispatch in order
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
        self._acking: set[str] = set()  # keys of kept signals/publishes in flight (engine hook)
        self._task_marker = -1  # history length at the current workflow task: a new one resets its budgets
        self._task_bytes = 0
        self._task_deliveries = 0
        self._admission_queue: list[int] = []  # tickets of handlers waiting for a task with room
        self._admission_tickets = 0
        self._signal_backlog: list[SignalRun] = []
        self._isolate: set[str] = set()  # run keys to start alone (their chunk failed)
        self._input_sizes: dict[str, int] = {}
        self._carry_retry_at = 0
        self._controls = 0  # control_run activities in flight (a deactivation completes after them)
        # Re-issues what the previous run left unfinished; activates a deactivated activation again.
        self._absorb(self._engine.resume(now))
        self._telemetry = ActivationTelemetry(self._engine)  # replay-safe traces and metrics

    # ------------------------------------------------------------------ main loop
    @workflow.run
    async def run(self, spec: ActivationSpec, state: bytes | None = None) -> DeactivatedResult:
        """Runs until deactivated (docs/lifecycle.md); the result carries the final state."""
        self._fresh_guard = FreshTimeGuard().start()  # time-based decisions only at a task's real time
        self._publish(initial=True)
        while True:
            now = workflow.now()
            self._new_task()
            self._absorb(self._engine.tick(now))
            hold = self._anticipate(now)
            if not self._dispatch(hold) and hold is not None:
                await self._wait(hold)  # nothing started: still record nothing before the instant
            self._publish()
            if self._deactivated():
                return await self._complete()
            if self._should_continue_as_new():
                await self._continue_as_new()
            self._wake = bool(self._commands)  # e.g. a start fault released a queued run: go on
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
        self._absorb(self._engine.tick_schedules(instant))
        self._admitted_until = instant
        return instant - now

    async def _wait(self, hold: timedelta) -> None:
        await workflow.execute_local_activity(
            wait_for_instant, hold.total_seconds(),
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

    def _absorb(self, decision: Decision[R]) -> R:
        """Keep a decision's commands for :meth:`_dispatch`; return its answer."""
        self._commands += decision.commands
        return decision.value

    # ------------------------------------------------------------------ commands
    def _new_task(self) -> None:
        """Reset the per-task budgets when this is a new workflow task (history grew since the last)."""
        marker = workflow.info().get_current_history_length()
        if marker != self._task_marker:
            self._task_marker, self._task_bytes, self._task_deliveries = marker, 0, 0
            self._absorb(self._engine.begin_task())

    def _dispatch(self, hold: timedelta | None = None) -> bool:
        """Execute the engine's commands; with ``hold``, starts wait that long first (in the task).
        Returns whether a start holding the task was issued."""
        held = False
        self._new_task()
        commands, self._commands = self._commands, []
        for c in commands:
            if type(c) is StartRun and c.run_key not in self._starting:
                self._starting.add(c.run_key)
                self._start_backlog.append(c)
        # Start activities are counted and created here, synchronously, in one place: which commands
        # a workflow task emits must never depend on the order in which waiting coroutines resume.
        while self._start_backlog and self._start_tasks < MAX_START_ACTIVITIES:
            chunk = self._next_start_chunk()
            if not chunk:
                break  # this task's byte budget is spent: the rest goes with the next task
            self._start_tasks += 1
            # Anticipated occurrences start from inside the task, after the hold: the run begins at
            # its instant plus a start call, not after the task, an activity task and the call.
            local = hold is not None and len(chunk) <= LOCAL_START_MAX
            held |= local
            asyncio.create_task(self._start_runs(chunk, hold if local else None), name="start runs")
        for c in commands:
            if type(c) is ControlRun:
                asyncio.create_task(self._control(c), name="control run")
            elif type(c) is SignalRun and c.key not in self._acking:
                if self._engine.bounded:
                    self._signal_backlog.append(c)
                else:
                    self._acking.add(c.key) if c.key else None
                    asyncio.create_task(self._signal(c), name="signal run")
        self._issue_signals()
        publishes = [c for c in commands if type(c) is PublishEvent and c.key not in self._acking]
        for i in range(0, len(publishes), PUBLISH_BATCH):
            self._acking.update(c.key for c in publishes[i : i + PUBLISH_BATCH])
            asyncio.create_task(self._publish_events(publishes[i : i + PUBLISH_BATCH]), name="publish lifecycle")
        watch = [c for c in commands if type(c) is WatchRuns]
        if watch:
            self._ensure_watchers(watch[-1].runs)
        for c in commands:
            if type(c) is RunPoll:
                asyncio.create_task(self._poll(c), name=f"poll {c.entry}")
        return held

    def _next_start_chunk(self) -> list[StartRun]:
        """The next start activity's runs: at most START_BATCH, and (with the budgets) at most
        MAX_START_BYTES of inputs, within what this task may still schedule; a run whose chunk
        failed goes alone; a run whose input no start can carry is a start fault at once."""
        if not self._engine.bounded:
            chunk, self._start_backlog = self._start_backlog[:START_BATCH], self._start_backlog[START_BATCH:]
            return chunk
        chunk = []
        size = 0
        while self._start_backlog and len(chunk) < START_BATCH:
            command = self._start_backlog[0]
            n = self._input_size(command)
            if n > MAX_RUN_INPUT_BYTES:
                self._start_backlog.pop(0)
                self._start_fault(command.run_key, f"its input is {n} bytes; a run input may have at most "
                                  f"{MAX_RUN_INPUT_BYTES} (Temporal's payload limit is 2 MiB)")
                continue
            alone = command.run_key in self._isolate
            if chunk and (alone or size + n > MAX_START_BYTES):
                break
            if self._task_bytes + n > MAX_TASK_BYTES and self._task_bytes > 0:
                break
            self._start_backlog.pop(0)
            chunk.append(command)
            size += n
            self._task_bytes += n
            if alone:
                break
        return chunk

    def _input_size(self, command: StartRun) -> int:
        size = self._input_sizes.get(command.run_key)
        if size is None:
            size = self._input_sizes[command.run_key] = len(command.input.model_dump_json())
        return size

    def _start_fault(self, run_key: str, error: str) -> None:
        self._starting.discard(run_key)
        self._isolate.discard(run_key)
        self._input_sizes.pop(run_key, None)
        self._absorb(self._engine.run_start_failed(run_key, error, self._now()))

    def _start_chunk_failed(self, chunk: list[StartRun], exc: ActivityError) -> None:
        """A start activity failed for good: start its runs again, one per activity; a run that fails
        alone with a cause that cannot pass (its input cannot be decoded) is a start fault. A
        transient cause (the server unreachable for minutes) only starts the chunk again."""
        cause = exc.cause
        permanent = isinstance(cause, ApplicationError) and (
            cause.non_retryable or (cause.message or "").startswith("Failed decoding"))
        if permanent and len(chunk) == 1:
            self._start_fault(chunk[0].run_key, f"the start activity failed: {cause}")
            return
        if permanent:
            self._isolate.update(c.run_key for c in chunk)
        self._starting.update(c.run_key for c in chunk)
        self._start_backlog[:0] = chunk

    async def _start_runs(self, chunk: list[StartRun], hold: timedelta | None = None) -> None:
        run = self._engine.spec.run
        bounded = self._engine.bounded
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
                    runs=[RunToStart(run_key=c.run_key, input=c.input, trace=self._telemetry.carrier(c.run_key)) for c in chunk],
                    not_before_seconds=hold.total_seconds() if hold is not None else 0.0,
                ),
                start_to_close_timeout=timedelta(seconds=15),
                retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=10),
                                         maximum_attempts=START_ATTEMPTS if bounded else 0),
                summary=f"start {len(chunk)} run(s)",
            )
        except ActivityError as exc:
            if not bounded:
                raise
            failure = exc
        finally:
            self._start_tasks -= 1
            self._starting.difference_update(c.run_key for c in chunk)
        if failure is not None:
            self._start_chunk_failed(chunk, failure)
            self._poke()
            return
        now = self._now()
        for r in results:
            self._isolate.discard(r.run_key)
            self._input_sizes.pop(r.run_key, None)
            if r.error is not None and bounded:
                self._absorb(self._engine.run_start_failed(r.run_key, r.error, now))
                continue
            self._absorb(self._engine.run_started(r.run_key, r.run_id, now))
            if r.terminal_status:
                self._absorb(self._engine.run_finished(r.run_key, r.terminal_status, now))
        self._poke()

    def _ensure_watchers(self, running: list[WatchTarget]) -> None:
        """Watch the running runs no watcher holds yet, at most MAX_WATCHERS activities of WATCH_BATCH runs."""
        unwatched = [r for r in running if r.run_key not in self._watched]
        while unwatched and self._watchers < MAX_WATCHERS:
            chunk, unwatched = unwatched[:WATCH_BATCH], unwatched[WATCH_BATCH:]
            self._watched.update(r.run_key for r in chunk)
            self._watchers += 1
            asyncio.create_task(self._watch([WatchedRun(run_key=r.run_key, run_id=r.run_id) for r in chunk]))

    async def _watch(self, runs: list[WatchedRun]) -> None:
        try:
            outcomes: list[RunOutcome] = await workflow.execute_activity_method(
                RunActivities.watch_runs, WatchRequest(runs=runs),
                start_to_close_timeout=timedelta(minutes=10), heartbeat_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
                summary=f"watch {len(runs)} run(s)",
            )
        finally:
            self._watchers -= 1
            self._watched.difference_update(r.run_key for r in runs)
        now = self._now()
        for o in outcomes:
            self._absorb(self._engine.run_finished(o.run_key, o.status, now))
        self._poke()

    async def _control(self, command: ControlRun) -> None:
        self._controls += 1
        try:
            await workflow.execute_activity_method(
                RunActivities.control_run, ControlRequest(run_key=command.run_key, action=command.action, reason=command.reason),
                start_to_close_timeout=timedelta(seconds=30),
            )
        finally:
            self._controls -= 1
            if self._engine.deactivation_status() is not None:  # only then: histories before it must replay
                self._poke()

    def _issue_signals(self) -> None:
        """Signal the kept subscription deliveries and notices, within this task's byte budget."""
        while self._signal_backlog:
            command = self._signal_backlog[0]
            size = json_size(command.payload)
            if self._task_bytes + size > MAX_TASK_BYTES and self._task_bytes > 0:
                return  # the next task sends the rest (something sent in this one brings that task)
            self._signal_backlog.pop(0)
            if command.key in self._acking:
                continue
            self._task_bytes += size
            self._acking.add(command.key) if command.key else None
            asyncio.create_task(self._signal(command), name="signal run")

    async def _signal(self, command: SignalRun) -> None:
        handle = workflow.get_external_workflow_handle(command.workflow_id)
        error = None
        try:
            await handle.signal(command.signal, command.payload)
        except FailureError as exc:
            error = f"{command.workflow_id}: {exc}"
            if command.key is None:
                self._absorb(self._engine.record_error(self._now(), "signal_failed", error))
        if command.key is not None:
            self._acking.discard(command.key)
            self._absorb(self._engine.command_done(command.key, error, self._now()))
            self._poke()

    async def _publish_events(self, chunk: list[PublishEvent]) -> None:
        events = [LifecycleEvent(connector=c.connector, payload=c.payload) for c in chunk]
        try:
            await workflow.execute_activity_method(
                LifecycleActivities.publish, PublishRequest(events=events), start_to_close_timeout=timedelta(seconds=15),
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
                summary=f"publish {len(chunk)} lifecycle event(s)",
            )
        finally:
            self._acking.difference_update(c.key for c in chunk)
        for c in chunk:
            self._absorb(self._engine.command_done(c.key, None, self._now()))
        self._poke()

    async def _poll(self, call: RunPoll) -> None:
        request = PollRequest(connector=call.connector, config=call.config, connection=call.connection,
                              cursor=call.cursor, limit=call.limit)
        try:
            # Decoded here, not by the SDK: a response the converter cannot decode would otherwise
            # fail the workflow task on every attempt instead of failing this poll.
            raw = await workflow.execute_activity(
                activity_name_for(call.connector), request, result_type=RawValue,
                start_to_close_timeout=self._engine.spec.policies.poll.timeout,
                retry_policy=RetryPolicy(maximum_attempts=1),  # backoff is the engine's (POLL-2)
                summary=f"poll {call.entry} from cursor {(call.cursor or '')[:100]}",
            )
            response = decode(raw, PollResponse, max_bytes=4 * MIB, what="the poll response")
            result = PollResultIn(items=[PollItemIn(payload=i.payload, cursor_after=i.cursor_after, problem=i.problem)
                                         for i in response.items],
                                  cursor=response.cursor, more=response.more, stable_order=response.stable_order)
        except ActivityError as exc:
            cause = exc.cause if exc.cause is not None else exc
            # Built-in connectors redact their errors; this also strips URL/DSN passwords from any other's.
            self._absorb(self._engine.poll_failed(call.entry, call.seq, redact(str(cause)), self._now()))
        except (TypeError, ValueError) as exc:  # a response that does not convert is a failed poll, not a stuck one
            self._absorb(self._engine.poll_failed(call.entry, call.seq, f"unusable poll response: {exc}", self._now()))
        else:
            self._absorb(self._engine.poll_succeeded(call.entry, call.seq, call.version, result, self._now()))
        finally:
            self._poke()

    # ------------------------------------------------------------------ continue-as-new
    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        if self._engine.carry_blocked is not None and info.get_current_history_length() < self._carry_retry_at:
            return False
        budget = self._engine.spec.policies.max_history_events
        return self._pending_spec is not None or info.is_continue_as_new_suggested() or info.get_current_history_length() > budget

    async def _continue_as_new(self) -> None:
        # Let in-flight starts report (they are quick); watchers and polls are simply re-issued.
        # Starts in the backlog are re-issued by the next run (their runs are `starting` in the state).
        await workflow.wait_condition(lambda: self._start_tasks == 0)
        if self._engine.deactivation_status() is not None:  # let its controls land (the next run would repeat them)
            await workflow.wait_condition(lambda: self._controls == 0)
        # Queued deliveries live in memory only (a replay rebuilds them): take them all first.
        await workflow.wait_condition(lambda: workflow.all_handlers_finished() and self._inbox_empty())
        spec = self._pending_spec or self._engine.spec
        state = encode_state(self._engine)
        size = len(state) + len(spec.model_dump_json())
        if self._engine.bounded and size > MAX_CARRIED_STATE_BYTES:
            self._carry_over_limit(size)
            return
        workflow.continue_as_new(args=[spec, state])

    def _carry_over_limit(self, size: int) -> None:
        """The state does not fit the continue-as-new payload: keep running on this history (it has
        room: the server's hard limit is 51,200 events) with new deliveries deferred, so runs start,
        queues drain and the state shrinks; try again every CARRY_RETRY_EVENTS events."""
        self._carry_retry_at = workflow.info().get_current_history_length() + CARRY_RETRY_EVENTS
        self._absorb(self._engine.block_deliveries(
            f"the activation's state is {size} bytes, over the {MAX_CARRIED_STATE_BYTES} it can carry across "
            "continue-as-new: deliveries are deferred until its queued runs start; deliver again later", self._now()))

    # ------------------------------------------------------------------ deactivation (docs/lifecycle.md)
    @workflow.update(name=DEACTIVATE_UPDATE)
    def deactivate(self, request: DeactivateRequest) -> DeactivateResult:
        outcome = self._absorb(self._engine.deactivate(request, self._now()))
        self._poke()
        return DeactivateResult(ok=outcome.ok, message=outcome.message, action_id=request.action_id,
                                status=outcome.status, remaining=outcome.remaining)  # type: ignore[arg-type]

    @deactivate.validator
    def _validate_deactivate(self, request: DeactivateRequest) -> None:
        self._refuse_while_rebinding()

    def _deactivated(self) -> bool:
        """Settled, and nothing of ours in flight: starts, controls, notices, lifecycle publishes."""
        return (self._engine.deactivation_settled() and self._start_tasks == 0 and not self._start_backlog
                and self._controls == 0 and not self._acking and self._inbox_empty())

    async def _complete(self) -> DeactivatedResult:
        await workflow.wait_condition(lambda: workflow.all_handlers_finished() and self._inbox_empty())
        record = self._absorb(self._engine.finish_deactivation(self._now()))
        self._publish()
        return DeactivatedResult(workflow=self._engine.spec.workflow, activation_id=self._engine.spec.activation_id,
                                 deactivation=record, summary=self._engine.summary(), state=encode_state(self._engine))

    # ------------------------------------------------------------------ deliveries
    # Arguments anyone with a Temporal client can send arrive raw and are decoded by ``_intake``.
    @workflow.update(name=DELIVER_UPDATE)
    async def deliver(self, request: RawValue) -> DeliveryResult:
        try:
            decoded = decode(request, DeliveryRequest, max_bytes=self._max_bytes(MAX_DELIVERY_BYTES), what="the delivery")
        except Undecodable as exc:
            return self._absorb(self._engine.undecodable(str(exc), self._now()))
        take = lambda: self._update_safely(DELIVER_UPDATE, lambda: self._deliver_one(decoded.entry, decoded.payload, self._now()))  # noqa: E731
        if self._inbox is not None:
            [result] = await self._inbox.wait([self._inbox.offer(take, waited=True)])
        else:
            await self._admission(1)
            result = take()
        self._telemetry.delivered(self._engine, [result], current_carrier())
        self._poke()
        return result

    @deliver.validator
    def _validate_deliver(self, request: RawValue) -> None:
        self._refuse_while_rebinding()
        limit = self._max_bytes(MAX_DELIVERY_BYTES)
        if isinstance(request, RawValue) and len(request.payload.data) > limit:
            raise ValueError(f"the delivery is {len(request.payload.data)} bytes; the limit is {limit}: send a "
                             "reference (URL, object key) instead of the content")

    @workflow.update(name=DELIVER_MANY_UPDATE)
    async def deliver_many(self, requests: RawValue) -> list[DeliveryResult]:
        try:
            decoded = self._decode_many(requests)
        except Undecodable as exc:  # the validator refused it; only a replay without validators gets here
            raise ApplicationError(str(exc), type=INVALID_ARGUMENT, non_retryable=True) from None
        results: list[DeliveryResult] = []
        if self._inbox is not None:
            inbox = self._inbox
            results = await inbox.wait([inbox.offer(lambda r=r: self._update_safely(  # type: ignore[misc]
                DELIVER_MANY_UPDATE, lambda: self._deliver_one(r.entry, r.payload, self._now())), waited=True) for r in decoded])
        while len(results) < len(decoded):  # in slices, when this task's budget of deliveries runs out
            granted = await self._admission(len(decoded) - len(results))
            now, chunk = self._now(), decoded[len(results):len(results) + granted]
            results += self._update_safely(
                DELIVER_MANY_UPDATE, lambda now=now, chunk=chunk: [self._deliver_one(r.entry, r.payload, now) for r in chunk])
        self._telemetry.delivered(self._engine, results, current_carrier())
        self._poke()
        return results

    @deliver_many.validator
    def _validate_deliver_many(self, requests: RawValue) -> None:
        self._refuse_while_rebinding()
        try:
            decoded = self._decode_many(requests)
        except Undecodable as exc:
            raise ValueError(str(exc)) from None
        if len(decoded) > MAX_BULK:
            raise ValueError(f"at most {MAX_BULK} deliveries per deliver_many update; split the batch")

    def _deliver_one(self, entry: str | None, payload: Any, now: datetime) -> DeliveryResult:
        """A delivery to the engine, or its refusal while the activation is deactivated (docs/lifecycle.md)."""
        return self._absorb(self._engine.deliver(entry, payload, now))

    def _decode_many(self, requests: Any) -> list[DeliveryRequest]:
        return decode(requests, list[DeliveryRequest], max_bytes=self._max_bytes(MAX_BULK_BYTES),
                      what="the deliver_many argument")

    def _max_bytes(self, limit: int) -> int:
        return limit + ENVELOPE if self._engine.bounded else 64 * MIB

    @workflow.signal(name=DELIVER_SIGNAL)
    async def deliver_signal(self, request: RawValue) -> None:
        try:
            decoded = decode(request, DeliveryRequest, max_bytes=self._max_bytes(MAX_DELIVERY_BYTES), what="the delivery")
        except Undecodable as exc:
            self._absorb(self._engine.undecodable(str(exc), self._now()))  # recorded: the sender was told it is durable
        else:
            carrier = current_carrier()
            if self._inbox is not None:
                self._inbox.offer(lambda: self._take_signalled(decoded, carrier), waited=False)
            else:
                await self._admission(1)
                self._take_signalled(decoded, carrier)
        self._poke()

    def _take_signalled(self, decoded: DeliveryRequest, carrier: dict[str, str] | None) -> None:
        result = self._signal_safely(DELIVER_SIGNAL, lambda: self._deliver_one(decoded.entry, decoded.payload, self._now()))
        if result is not None:
            self._telemetry.delivered(self._engine, [result], carrier)

    @workflow.signal(name=SUBSCRIBE_SIGNAL)
    def subscribe(self, request: RawValue) -> None:
        """A run waits for an event of one of this activation's entries (INIT-8)."""
        decoded = self._decode_signal(request, SubscribeRequest, "subscribe")
        if decoded is not None:
            self._signal_safely("subscribe", lambda: self._absorb(self._engine.subscribe(decoded, self._now())))
        self._poke()

    @workflow.signal(name=UNSUBSCRIBE_SIGNAL)
    def unsubscribe(self, request: RawValue) -> None:
        decoded = self._decode_signal(request, UnsubscribeRequest, "unsubscribe")
        if decoded is not None:
            self._signal_safely("unsubscribe", lambda: self._absorb(self._engine.unsubscribe(decoded, self._now())))
        self._poke()

    @workflow.signal(name=LIFECYCLE_SIGNAL)
    async def lifecycle_event(self, event: RawValue) -> None:
        """A lifecycle event of another run, routed to the entries watching its workflow (COMP-3)."""
        decoded = self._decode_signal(event, LifecycleEvent, LIFECYCLE_SIGNAL)
        if decoded is not None and not self._absorb(self._engine.refuse_lifecycle(decoded, self._now())):
            take = lambda: self._signal_safely(  # noqa: E731
                LIFECYCLE_SIGNAL, lambda: self._absorb(self._engine.route_lifecycle(decoded, self._now())))
            if self._inbox is not None:
                self._inbox.offer(take, waited=False)
            else:
                await self._admission(1)
                take()
        self._poke()

    async def _next_task_for_inbox(self, queued: int) -> None:
        """End this workflow task so the next takes more of the inbox (workflows/_inbox.py: why an activity)."""
        await workflow.execute_activity(
            wait_for_instant, 0.0, start_to_close_timeout=timedelta(seconds=10),
            summary=f"next workflow task for {queued} queued deliveries",
        )

    def _inbox_empty(self) -> bool:
        return self._inbox is None or self._inbox.empty

    async def _admission(self, wanted: int) -> int:
        """A run begun before the inbox (``INBOX_PATCH``): how many of ``wanted`` deliveries this
        handler may take now (at least one), in arrival order.

        A workflow task takes at most DELIVERIES_PER_TASK deliveries: past that the worker's 2 s
        deadlock timeout comes near on a loaded machine, and a task failed as a deadlock is retried
        with the same deliveries forever. Handlers past the budget wait, first come first served,
        for the next task, which a short timer brings (deliveries are then acknowledged a task later).
        """
        if not self._engine.bounded:
            return wanted
        self._new_task()
        if not self._admission_queue and self._deliveries_left() > 0:
            return self._take_deliveries(wanted)
        ticket = self._admission_tickets = self._admission_tickets + 1
        self._admission_queue.append(ticket)
        if len(self._admission_queue) == 1:
            asyncio.create_task(self._bring_next_tasks(), name="next task for deliveries")
        await workflow.wait_condition(lambda: self._admission_queue[0] == ticket and self._deliveries_left() > 0)
        self._admission_queue.pop(0)
        return self._take_deliveries(wanted)

    def _deliveries_left(self) -> int:
        self._new_task()
        return DELIVERIES_PER_TASK - self._task_deliveries

    def _take_deliveries(self, wanted: int) -> int:
        granted = min(wanted, self._deliveries_left())
        self._task_deliveries += granted
        return granted

    async def _bring_next_tasks(self) -> None:
        while self._admission_queue:
            await workflow.sleep(timedelta(milliseconds=1), summary="next task for waiting deliveries")

    def _decode_signal(self, raw: Any, kind: type[Any], name: str) -> Any:
        try:
            return decode(raw, kind, max_bytes=self._max_bytes(MAX_DELIVERY_BYTES), what=f"the {name} signal")
        except Undecodable as exc:
            self._absorb(self._engine.record_error(self._now(), "signal_refused", str(exc)))
            return None

    def _update_safely(self, name: str, handle: Any) -> Any:
        """An update's work; with the budgets, a failure the input caused fails this update (its caller
        gets the reason), never the workflow task, which would be retried with the same update forever."""
        if not self._engine.bounded:
            return handle()
        try:
            return handle()
        except SIGNAL_ERRORS as exc:
            raise ApplicationError(f"the {name} update could not be handled: {type(exc).__name__}: {exc}",
                                   type=HANDLER_FAILED, non_retryable=True) from None

    def _signal_safely(self, name: str, handle: Any) -> Any:
        """Run a signal's work and return its result; with the budgets, a failure the input caused is
        recorded (result None), not a failed task retried forever (a signal cannot be refused: its
        sender already had it acknowledged)."""
        if not self._engine.bounded:
            return handle()
        try:
            return handle()
        except SIGNAL_ERRORS as exc:
            self._absorb(self._engine.record_error(self._now(), "signal_failed", f"the {name} signal could not be "
                                                   f"handled: {type(exc).__name__}: {exc}"))
            return None

    def _refuse_while_rebinding(self) -> None:
        # While the state is too large to carry, the engine defers deliveries itself: refusing them
        # here would only make callers give up.
        if self._pending_spec is not None and self._engine.carry_blocked is None:
            raise ApplicationError("activation is being replaced; retry the delivery", type=REBINDING)

    # ------------------------------------------------------------------ activation and operators
    @workflow.update(name=ACTIVATE_UPDATE)
    def activate(self, spec: ActivationSpec) -> ActivateResult:
        """Idempotent (re)activation: same binding hash -> current; new hash -> rebound (INIT-4)."""
        current = self._engine.spec
        if spec.activation_id == current.activation_id:
            return ActivateResult(activation_id=current.activation_id, outcome="current",
                                  previous=self._engine.previous_activations)
        self._pending_spec = spec
        self._absorb(self._engine.rebind(spec, self._now()))
        self._poke()
        return ActivateResult(activation_id=spec.activation_id, outcome="rebound",
                              previous=self._engine.previous_activations)

    @activate.validator
    def _validate_activate(self, spec: ActivationSpec) -> None:
        if spec.workflow != self._engine.spec.workflow:
            raise ValueError(f"this activation serves workflow {self._engine.spec.workflow!r}, not {spec.workflow!r}")
        if self._engine.deactivation_status() is not None:
            raise ValueError(f"the activation of {spec.workflow!r} is being deactivated; activate it again once that "
                             f"has completed (`wfi deactivate --wait`, or `wfi state` shows it)")
        problems = spec_problems(spec)  # what `wfi activate` refuses, refused from a plain client too
        if problems:
            raise ValueError("the activation is out of bounds: " + "; ".join(problems)[:2000])

    @workflow.update(name=OPERATE_UPDATE)
    def operate(self, request: OperatorRequest) -> OperatorResult:
        self._new_task()  # a backfill uses this task's budget (core.limits.ADMIT_PER_TASK)
        # A build before it dropped poll_now during a poll in flight (asked only for poll_now: replay).
        survives = workflow.patched(POLL_NOW_PATCH) if request.action == "poll_now" else True
        outcome = self._absorb(self._engine.operate(request, self._now(), poll_now_survives_flight=survives))
        self._poke()
        return OperatorResult(ok=outcome.ok, message=outcome.message, action_id=request.action_id)

    # ------------------------------------------------------------------ queries and visibility
    # Query results stay under the gRPC message limit whatever the state holds (core.limits.fit_to_bytes).
    @workflow.query(name=STATE_QUERY)
    def state(self) -> dict[str, Any]:
        return fit_to_bytes(self._engine.full_state())

    @workflow.query(name=SUMMARY_QUERY)
    def summary_query(self) -> dict[str, Any]:
        return fit_to_bytes(self._engine.summary())

    @workflow.query(name=EVENTS_QUERY)
    def events(self, after_seq: int = 0, limit: int = 500) -> list[dict[str, Any]]:
        return self._engine.events(after_seq, limit)

    @workflow.query(name=DELIVERY_QUERY)
    def delivery(self, entry: str, delivery_id: str) -> dict[str, Any] | None:
        return self._engine.delivery(entry, delivery_id)

    def _publish(self, initial: bool = False) -> None:
        workflow.set_current_details(self._engine.markdown())
        self._telemetry.observe(self._engine)
        status = self._engine.status()
        if initial or status != getattr(self, "_published_status", None):
            self._published_status = status
            spec = self._engine.spec
            # TypedSearchAttributes is a collection of (key, value) pairs the SDK takes as updates at run
            # time; its annotation names only mappings and SearchAttributeUpdate sequences.
            workflow.upsert_search_attributes(TypedSearchAttributes([  # type: ignore[arg-type]
                SearchAttributePair(sa.WFI_WORKFLOW, spec.workflow),
                SearchAttributePair(sa.WFI_ACTIVATION, spec.activation_id),
                SearchAttributePair(sa.WFI_STATE, status),
                SearchAttributePair(sa.WFI_TRIGGERS, [e.connector for e in spec.entries]),
            ]))
