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
This module holds the loop, deactivation, activation and operator actions. Its parts: the delivery
handlers (``_deliveries``; acting on the router's verdicts, ``_verdicts``; a split's part,
``_splits``), the queries and what the UI sees (``_queries``), continue-as-new (``_continue``), time
and anticipated occurrences (``_time``), the executor of planned calls (``_executor``), what an older
run keeps (``_compat``), how deliveries share a task (``_inbox``, ``_admission``), and the guard
against stale activations (``_fresh``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from wf_initiation.core.activation import ActivationSpec, spec_problems
    from wf_initiation.core.engine import Command, Decision, Dispatcher, Engine, decode_state, initial_state
    from wf_initiation.core.limits import DELIVERIES_PER_TASK
    from wf_initiation.wire import (
        ACTIVATE_UPDATE,
        ACTIVATION_WORKFLOW,
        DEACTIVATE_UPDATE,
        OPERATE_UPDATE,
        ActivateResult,
        DeactivatedResult,
        DeactivateRequest,
        DeactivateResult,
        OperatorRequest,
        OperatorResult,
    )

    from ._admission import TicketAdmission
    from ._carried import CarriedSignals
    from ._compat import RunCompat
    from ._continue import ContinueAsNew, encode_state
    from ._deliveries import DeliveryHandlers
    from ._executor import Executor
    from ._fresh import FreshTimeGuard
    from ._inbox import Inbox
    from ._queries import Queries
    from ._tasks import Tasks
    from ._telemetry import ActivationTelemetry
    from ._time import Timekeeping

R = TypeVar("R")
# A cancellation request settles as a deactivation (ActivationWorkflow._settle_on_cancel); histories
# of runs cancelled before it was built replay as they ran (they failed as cancelled).
CANCEL_DEACTIVATES = "wfi-cancel-deactivates"
CANCEL_NOTE = ("cancellation requested (Temporal UI or `temporal workflow cancel`): deactivated with its state kept; "
               "`wfi activate` activates it again with everything it accepted")


# Outside the SDK's sandbox: it cost about a quarter of the worker's CPU per delivery and guarded only
# this shell (the engine was passed through already); docs/architecture.md says how determinism is kept.
@workflow.defn(name=ACTIVATION_WORKFLOW, sandboxed=False)
class ActivationWorkflow(DeliveryHandlers, Queries, ContinueAsNew, Timekeeping):
    @workflow.init
    def __init__(self, spec: ActivationSpec, state: bytes | None = None) -> None:
        now = workflow.now()
        self._compat = RunCompat(spec)
        self._tasks = Tasks(fails_task=self._compat.faults_fail_task, poke=self._poke)  # every task nobody awaits
        self._spec, self._shard = spec, spec.shard  # the whole binding; this shard's part goes to the engine
        part = spec.shard_part()
        restored = decode_state(state) if state else initial_state(part, now, compat=self._compat.engine)
        self._engine = Engine(part, restored, compat=self._compat.engine)  # it keeps this shard's part in a split
        self._dispatcher = Dispatcher(bounded=self._engine.bounded, paged=self._compat.paged_controls,
                                      gathers=self._compat.gathers_watches)
        self._commands: list[Command] = []  # the engine's decisions, planned and carried out by _dispatch
        self._inbox = Inbox(DELIVERIES_PER_TASK, next_task=self._next_task_for_inbox, after_take=self._poke, spawn=self._tasks.spawn,
                            task_marker=lambda: workflow.info().get_current_history_length(),
                            quiet_behind=self._compat.quiet_waiting) \
            if self._compat.inbox else None
        self._carried = CarriedSignals(self._engine, self._inbox, take=self._take_carried, absorb=self._absorb,
                                       now=self._now) if self._inbox is not None else None
        if self._inbox is not None and self._engine.waiting_signals:
            self._inbox.hold()  # the previous run's waiting signals go first (workflows/_carried.py)
        self._tickets = TicketAdmission(DELIVERIES_PER_TASK, enabled=self._engine.bounded, check_task=self._new_task,
                                        spawn=self._tasks.spawn)
        self._pending_spec: ActivationSpec | None = None
        self._carrying = False  # deliveries are refused (retried by callers) until continue-as-new is done
        self._wake = False
        self._timers: set[datetime] = set()
        self._admitted_until = datetime.min.replace(tzinfo=now.tzinfo)  # see _anticipate
        self._task_marker = -1  # history length at the current workflow task: a new one resets its budgets
        self._carry_retry_at = 0
        self._signals = 0  # signals this run took (the server refuses a run's 10,001st)
        self._forwarding = 0  # deliveries being passed on to another shard (_deliveries._forward)
        self._validated: dict[str, Any] = {}  # an update's argument its validator decoded (_deliveries)
        self._init_splits()
        # Re-issues what the previous run left unfinished; activates a deactivated activation again.
        self._absorb(self._engine.resume(now))
        self._telemetry = ActivationTelemetry(self._engine)  # replay-safe traces and metrics
        self._executor = Executor(self._engine, self._dispatcher, self._telemetry, absorb=self._absorb, poke=self._poke,
                                  now=self._now, tasks=self._tasks, retry_after=self._compat.poll_retry_after)

    # ------------------------------------------------------------------ main loop
    release_on_eviction = True
    """False for a run replayed to be read afterwards (wf_initiation/_ended.py's ``replayed``): the replayer
    evicts it when the history ends."""

    async def _release_when_evicted(self) -> None:
        """Only the worker's eviction of this run cancels this task (the SDK cancels every task of a run
        it evicts, after it continued as new too): the engine lets go of its ids then, not at Python's
        next full collection (bench/bench_memory.py). It issues no command; a replay is the same."""
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            self._engine.release()

    @workflow.run
    async def run(self, spec: ActivationSpec, state: bytes | None = None) -> DeactivatedResult:
        """Runs until deactivated (docs/lifecycle.md); the result carries the final state."""
        self._fresh_guard = FreshTimeGuard().start()  # time-based decisions only at a task's real time
        if self.release_on_eviction:
            self._evicted = asyncio.get_running_loop().create_task(self._release_when_evicted())
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
        return OperatorResult(ok=outcome.ok, message=outcome.message, action_id=request.action_id,
                              redriven=list(outcome.events) or None)
