"""The activation workflow: a thin Temporal shell around the pure engine.

One long-lived workflow per workflow identity (id ``wfi-activation:<workflow>``), so webhook
bridges address a stable id; each (re)activation with a different binding hash becomes a new
*activation id* inside it (INIT-4), and everything the previous activation accepted is carried on
untouched (INIT-5, TRIG-12). Deliveries arrive as updates (disposition returned once durable,
EXT-8) or signals (disposition queryable); run starts, outcome watching and polls are activities.
State is restored in ``@workflow.init``, so deliveries in the first task after continue-as-new
are not lost (Temporal runs handlers before ``@workflow.run``).

The shell decides nothing: the engine decides (``core.engine.Engine``), the dispatcher plans the
calls its commands need (``core.engine.Dispatcher``), and this module feeds them events and time.
Its parts: the delivery handlers (``_deliveries``), the executor of planned calls
(``_executor``), what an older run keeps (``_compat``), how deliveries share a task
(``_inbox``, ``_admission``), and the guard against stale activations (``_fresh``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributePair, TypedSearchAttributes

with workflow.unsafe.imports_passed_through():
    from wf_initiation.activities.clock import wait_for_instant
    from wf_initiation.activities.signals import DEFERRED_SIGNALS_QUERY
    from wf_initiation.core import limits  # the carry limits are read at each carry (tests lower them)
    from wf_initiation.core.activation import ActivationSpec, spec_problems
    from wf_initiation.core.engine import Command, Decision, Dispatcher, Engine, decode_state, initial_state
    from wf_initiation.core.limits import DELIVERIES_PER_TASK, MAX_SIGNALS_PER_RUN, fit_to_bytes
    from wf_initiation.wire import (
        ACTIVATE_UPDATE,
        ACTIVATION_WORKFLOW,
        DEACTIVATE_UPDATE,
        DELIVERY_QUERY,
        EVENTS_QUERY,
        OPERATE_UPDATE,
        ROUTING_QUERY,
        STATE_QUERY,
        SUMMARY_QUERY,
        ActivateResult,
        DeactivatedResult,
        DeactivateRequest,
        DeactivateResult,
        OperatorRequest,
        OperatorResult,
    )
    from wf_initiation.wire import search_attributes as sa

    from ._admission import TicketAdmission
    from ._carried import CarriedSignals, carried
    from ._compat import RunCompat
    from ._deliveries import DeliveryHandlers
    from ._executor import Executor
    from ._fresh import FreshTimeGuard
    from ._inbox import Inbox
    from ._tasks import Tasks
    from ._telemetry import ActivationTelemetry

R = TypeVar("R")
# A cancellation request settles as a deactivation (ActivationWorkflow._settle_on_cancel); histories
# of runs cancelled before it was built replay as they ran (they failed as cancelled).
CANCEL_DEACTIVATES = "wfi-cancel-deactivates"
CANCEL_NOTE = ("cancellation requested (Temporal UI or `temporal workflow cancel`): deactivated with its state kept; "
               "`wfi activate` activates it again with everything it accepted")


def encode_state(engine: Engine) -> bytes:
    """State for continue-as-new (the engine's carried form; :func:`decode_state` reads it back)."""
    return engine.encode_state()


# Outside the SDK's sandbox: it cost about a quarter of the worker's CPU per delivery and guarded only
# this shell (the engine was passed through already); docs/architecture.md says how determinism is kept.
@workflow.defn(name=ACTIVATION_WORKFLOW, sandboxed=False)
class ActivationWorkflow(DeliveryHandlers):
    @workflow.init
    def __init__(self, spec: ActivationSpec, state: bytes | None = None) -> None:
        now = workflow.now()
        self._compat = RunCompat(spec)
        self._tasks = Tasks(fails_task=self._compat.faults_fail_task, poke=self._poke)  # every task nobody awaits
        self._spec, self._shard = spec, spec.shard  # the whole binding; this shard's part goes to the engine
        part = spec.shard_part()
        restored = decode_state(state) if state else initial_state(part, now, compat=self._compat.engine)
        self._engine = Engine(part, restored, compat=self._compat.engine)  # it keeps this shard's part in a split
        self._dispatcher = Dispatcher(bounded=self._engine.bounded, paged=self._compat.paged_controls)
        self._commands: list[Command] = []  # the engine's decisions, planned and carried out by _dispatch
        self._inbox = Inbox(DELIVERIES_PER_TASK, next_task=self._next_task_for_inbox, after_take=self._poke, spawn=self._tasks.spawn,
                            task_marker=lambda: workflow.info().get_current_history_length()) \
            if self._compat.inbox else None
        self._carried = CarriedSignals(self._engine, self._inbox, take=self._take_carried, absorb=self._absorb,
                                       now=self._now) if self._inbox is not None else None
        if self._inbox is not None and self._engine.waiting_signals:
            self._inbox.hold()  # the previous run's waiting signals go first (workflows/_carried.py)
        self._tickets = TicketAdmission(DELIVERIES_PER_TASK, enabled=self._engine.bounded, check_task=self._new_task,
                                        spawn=self._tasks.spawn)
        self._pending_spec: ActivationSpec | None = None
        self._wake = False
        self._timers: set[datetime] = set()
        self._admitted_until = datetime.min.replace(tzinfo=now.tzinfo)  # see _anticipate
        self._task_marker = -1  # history length at the current workflow task: a new one resets its budgets
        self._carry_retry_at = 0
        self._signals = 0  # signals this run took (the server refuses a run's 10,001st)
        self._forwarding = 0  # deliveries being passed on to another shard (_deliveries._forward)
        self._init_splits()
        # Re-issues what the previous run left unfinished; activates a deactivated activation again.
        self._absorb(self._engine.resume(now))
        self._telemetry = ActivationTelemetry(self._engine)  # replay-safe traces and metrics
        self._executor = Executor(self._engine, self._dispatcher, self._telemetry, absorb=self._absorb, poke=self._poke,
                                  now=self._now, tasks=self._tasks)

    # ------------------------------------------------------------------ main loop
    @workflow.run
    async def run(self, spec: ActivationSpec, state: bytes | None = None) -> DeactivatedResult:
        """Runs until deactivated (docs/lifecycle.md); the result carries the final state."""
        self._fresh_guard = FreshTimeGuard().start()  # time-based decisions only at a task's real time
        if self._engine.drain_check() is not None:
            self._drain_task = self._tasks.spawn(self._drain_split(), "split parent: drain")
        if self._carried is not None and self._inbox is not None and self._inbox.held:
            self._tasks.spawn(self._carried.recover(), "take the signals the previous run left waiting")
        self._publish(initial=True)
        try:
            return await self._serve()
        except asyncio.CancelledError:
            if not self._settle_on_cancel():
                raise
        return await self._serve()

    async def _serve(self) -> DeactivatedResult:
        while True:
            now = workflow.now()
            self._new_task()
            self._absorb(self._engine.tick(now, watched=self._dispatcher.watched, watch_room=self._dispatcher.watch_room))
            if self._inbox is not None:
                self._inbox.retry()  # signalled deliveries kept waiting: the tick may have made room
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
            await self._until(lambda: self._wake)

    def _settle_on_cancel(self) -> bool:
        """A cancellation request (the Temporal UI's "Request Cancellation", ``temporal workflow cancel``)
        is a deactivation that loses nothing: deliveries are refused from now on, queued runs drain,
        running ones are left alone, and the workflow completes with its final state, which ``wfi
        activate`` carries (docs/operator-view.md). False when replaying a history cancelled before
        this build (it ended cancelled)."""
        if not workflow.patched(CANCEL_DEACTIVATES):
            return False
        request = DeactivateRequest(queued="drain", running="leave", action_id=f"cancel-requested:{workflow.info().run_id}",
                                    note=CANCEL_NOTE)
        self._absorb(self._engine.deactivate(request, self._now()))
        self._poke()
        return True

    def _absorb(self, decision: Decision[R]) -> R:
        """Keep a decision's commands for :meth:`_dispatch`; return its answer."""
        self._commands += decision.commands
        return decision.value

    def _poke(self) -> None:
        self._wake = True

    async def _until(self, condition: Callable[[], bool]) -> None:
        """Wait for ``condition``; raise a fault one of the activation's tasks left (workflows/_tasks.py:
        it fails the workflow task, not the activation) as soon as there is one."""
        tasks = self._tasks
        await workflow.wait_condition(lambda: tasks.fault is not None or condition())
        tasks.check()

    def _now(self) -> datetime:
        """workflow.now(), but never before an instant this task admitted at."""
        return max(workflow.now(), self._admitted_until)

    def _new_task(self) -> None:
        """Reset the per-task budgets when this is a new workflow task (history grew since the last)."""
        marker = workflow.info().get_current_history_length()
        if marker != self._task_marker:
            self._task_marker = marker
            self._dispatcher.new_task()
            self._tickets.new_task()
            self._absorb(self._engine.begin_task())

    def _dispatch(self, hold: timedelta | None = None) -> bool:
        """Carry out the engine's commands as the dispatcher plans them; with ``hold``, starts wait that
        long first (in the task). Returns whether a start holding the task was issued."""
        self._new_task()
        commands, self._commands = self._commands, []
        plan = self._dispatcher.plan(commands, hold=hold is not None)
        for fault in plan.faults:
            self._absorb(self._engine.run_start_failed(fault.run_key, fault.error, self._now()))
        self._executor.run(plan.calls, hold)
        return plan.held

    # ------------------------------------------------------------------ time
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

    def _wake_ahead(self) -> timedelta:
        """``schedule_wake_ahead`` for a schedule activation; zero in a run begun by a build without it."""
        ahead = self._engine.spec.policies.schedule_wake_ahead
        if not ahead or self._engine.next_occurrence() is None or not self._compat.wake_ahead():
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

    async def _next_task_for_inbox(self, queued: int) -> None:
        """End this workflow task so the next takes more of the inbox (workflows/_inbox.py: why an activity)."""
        await workflow.execute_activity(
            wait_for_instant, 0.0, start_to_close_timeout=timedelta(seconds=10),
            summary=f"next workflow task for {queued} queued deliveries",
        )

    # ------------------------------------------------------------------ continue-as-new
    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        if self._engine.carry_blocked is not None and info.get_current_history_length() < self._carry_retry_at:
            return False
        budget = self._engine.spec.policies.max_history_events
        signals = self._compat.engine.capacity and self._signals >= MAX_SIGNALS_PER_RUN  # the server's cap is 10,000
        return (self._pending_spec is not None or info.is_continue_as_new_suggested()
                or info.get_current_history_length() > budget or signals)

    async def _continue_as_new(self) -> None:
        # Let in-flight starts report (they are quick); watchers and polls are simply re-issued.
        # Starts in the backlog are re-issued by the next run (their runs are `starting` in the state).
        await self._until(lambda: self._dispatcher.start_calls == 0)
        if self._engine.deactivation_status() is not None:  # let its controls land (the next run would repeat them)
            await self._until(lambda: self._dispatcher.controls == 0)  # those waiting for room are issued again
        # Queued deliveries live in memory only (a replay rebuilds them): take them all first; the
        # signals still waiting for room are carried by reference.
        if self._inbox is not None:
            inbox = self._inbox
            await self._until(lambda: not inbox.held)  # the previous run's signals are back first
            inbox.flush()
        await self._settle_deliveries()
        if self._inbox is not None:  # signals still waiting are carried by reference (workflows/_carried.py)
            self._absorb(self._engine.carry_waiting(carried(self._inbox), self._now()))
        spec = self._pending_spec or self._spec
        state = encode_state(self._engine)
        size = len(state) + len(spec.model_dump_json())
        if self._engine.bounded and size > limits.MAX_CARRIED_STATE_BYTES and self._compat.engine.capacity:
            # Capacity keeps the state within what fits; should the estimate fall short, the oldest
            # released ids go rather than the activation growing one history until the server stops it.
            while size > limits.MAX_CARRIED_STATE_BYTES and self._absorb(self._engine.shed_to_carry(size - limits.MAX_CARRIED_STATE_BYTES, self._now())):
                state = encode_state(self._engine)
                size = len(state) + len(spec.model_dump_json())
        if self._engine.bounded and size > limits.MAX_CARRIED_STATE_BYTES:
            self._carry_over_limit(size)
            return
        workflow.continue_as_new(args=[spec.as_shard(self._shard), state])

    def _carry_over_limit(self, size: int) -> None:
        """The state does not fit the continue-as-new payload: keep running on this history (it has
        room: the server's hard limit is 51,200 events) with new deliveries deferred, so runs start,
        queues drain and the state shrinks; try again every limits.CARRY_RETRY_EVENTS events."""
        self._carry_retry_at = workflow.info().get_current_history_length() + limits.CARRY_RETRY_EVENTS
        self._absorb(self._engine.block_deliveries(
            f"the activation's state is {size} bytes, over the {limits.MAX_CARRIED_STATE_BYTES} it can carry across "
            "continue-as-new: deliveries are deferred until its queued runs start; deliver again later", self._now()))

    async def _settle_deliveries(self) -> None:
        """Wait until every handler finished, the inbox is empty and every delivery passed on to another
        shard has landed there: the server drops a signal whose sender closed (continue-as-new) before
        the signal was sent."""
        while True:
            await self._until(lambda: workflow.all_handlers_finished() and self._inbox_empty())
            if not self._forwarding or not self._compat.forwards_land():
                return
            await self._until(lambda: self._forwarding == 0)

    def _inbox_empty(self) -> bool:
        return self._inbox is None or self._inbox.empty

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
        d = self._dispatcher
        return (self._engine.deactivation_settled() and not d.starts_pending and not d.controls_pending and not d.acking
                and self._inbox_empty())

    async def _complete(self) -> DeactivatedResult:
        await self._settle_deliveries()
        record = self._absorb(self._engine.finish_deactivation(self._now()))
        self._publish()
        return DeactivatedResult(workflow=self._engine.spec.workflow, activation_id=self._engine.spec.activation_id,
                                 deactivation=record, summary=self._engine.summary(), state=encode_state(self._engine))

    # ------------------------------------------------------------------ activation and operators
    @workflow.update(name=ACTIVATE_UPDATE)
    def activate(self, spec: ActivationSpec) -> ActivateResult:
        """Idempotent (re)activation: same binding hash -> current; new hash -> rebound (INIT-4)."""
        current = self._engine.spec
        if spec.activation_id == current.activation_id:
            return ActivateResult(activation_id=current.activation_id, outcome="current",
                                  previous=self._engine.previous_activations)
        self._pending_spec = spec.as_shard(self._shard)  # a split it names begins in the engine (a rebind keeps one going)
        self._absorb(self._engine.rebind(self._pending_spec.shard_part(), self._now()))
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
        if spec.shards != self._spec.shards:
            problem = self._split_refusal(spec)
            if problem is not None:
                raise ValueError(f"the activation of {spec.workflow!r} cannot be split into {spec.shards} shards: {problem}")
        problems = spec_problems(spec)  # what `wfi activate` refuses, refused from a plain client too
        if problems:
            raise ValueError("the activation is out of bounds: " + "; ".join(problems)[:2000])

    @workflow.update(name=OPERATE_UPDATE)
    def operate(self, request: OperatorRequest) -> OperatorResult:
        self._new_task()  # a backfill uses this task's budget (core.limits.ADMIT_PER_TASK)
        survives = self._compat.poll_now_survives_flight() if request.action == "poll_now" else True
        outcome = self._absorb(self._engine.operate(request, self._now(), poll_now_survives_flight=survives))
        self._poke()
        return OperatorResult(ok=outcome.ok, message=outcome.message, action_id=request.action_id)

    # ------------------------------------------------------------------ queries and visibility
    # Query results stay under the gRPC message limit whatever the state holds (core.limits.fit_to_bytes).
    @workflow.query(name=STATE_QUERY)
    def state(self) -> dict[str, Any]:
        return fit_to_bytes(self._engine.full_state())

    @workflow.query(name=ROUTING_QUERY)
    def routing(self) -> dict[str, Any]:
        """How this activation's deliveries are spread over its shards (core.sharding; wf_initiation/_shards.py)."""
        spec, split = self._routing_spec(), self._engine.split
        return {"shards": spec.shards,
                "entries": {e.name: e.delivery_id_path for e in spec.entries if e.kind == "external"},
                **({"split": split.model_dump(mode="json")} if split is not None else {})}

    @workflow.query(name=SUMMARY_QUERY)
    def summary_query(self) -> dict[str, Any]:
        summary = self._engine.summary()
        if self._spec.shards > 1:
            summary["shard"], summary["shards"] = self._shard, self._spec.shards
        if self._engine.split is not None:
            summary["split"] = self._engine.split.model_dump(mode="json")
        lanes = self._engine.lanes_summary()
        if lanes is not None:
            summary["lanes"] = lanes
        if self._inbox is not None:  # deliveries the workflow holds in memory, not yet taken
            summary["inbox"] = {"queued": len(self._inbox), "waiting_signals": self._inbox.waiting_signals}
        return fit_to_bytes(summary)

    @workflow.query(name=EVENTS_QUERY)
    def events(self, after_seq: int = 0, limit: int = 500) -> list[dict[str, Any]]:
        return self._engine.events(after_seq, limit)

    @workflow.query(name=DEFERRED_SIGNALS_QUERY)
    def deferred_signals(self, offset: int = 0, limit: int = 500) -> dict[str, Any]:
        """The signalled deliveries deferred and listed, a page at a time (workflows/_carried.py)."""
        return fit_to_bytes(self._engine.deferred_signals(offset, limit))

    @workflow.query(name=DELIVERY_QUERY)
    def delivery(self, entry: str, delivery_id: str) -> dict[str, Any] | None:
        record = self._engine.delivery(entry, delivery_id)
        if record is None and self._inbox is not None and self._inbox.waiting_signals:  # still waiting in memory?
            return self._engine.waiting_record(entry, delivery_id, self._inbox.kept())
        return record

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
