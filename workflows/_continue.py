"""Continue-as-new of the activation (a mixin of ``ActivationWorkflow``): when a run continues as new,
what it settles first (starts in flight, a deactivation's controls, the inbox, deliveries passed on
to another shard) and what it carries (the engine's state, measured against what the payload limit
lets it carry; over it, the run keeps its history and defers new deliveries until the state fits).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from wf_initiation.core import limits  # the carry limits are read at each carry (tests lower them)
    from wf_initiation.core.activation import ActivationSpec
    from wf_initiation.core.engine import KEEP_LIVE_RELEASED, Decision, Dispatcher, Engine
    from wf_initiation.core.limits import MAX_SIGNALS_PER_RUN

    from ._carried import carried
    from ._compat import RunCompat
    from ._inbox import Inbox


def encode_state(engine: Engine, keep_live: int = KEEP_LIVE_RELEASED) -> bytes:
    """State for continue-as-new (the engine's carried form; :func:`decode_state` reads it back), the
    ``keep_live`` newest released dedup entries as full records."""
    return engine.encode_state(keep_live)


class ContinueAsNew:
    """Methods of ``ActivationWorkflow``; the state they use is the workflow's."""

    _engine: Engine
    _compat: RunCompat
    _dispatcher: Dispatcher
    _inbox: Inbox | None
    _spec: ActivationSpec
    _pending_spec: ActivationSpec | None
    _shard: int
    _signals: int
    _forwarding: int
    _carry_retry_at: int
    _absorb: Callable[[Decision[Any]], Any]
    _until: Callable[..., Any]
    _now: Callable[..., Any]

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        if self._engine.carry_blocked is not None and info.get_current_history_length() < self._carry_retry_at:
            return False
        budget = self._engine.spec.policies.max_history_events
        signals = self._compat.engine.capacity and self._signals >= MAX_SIGNALS_PER_RUN  # the server's cap is 10,000
        return (self._pending_spec is not None or info.is_continue_as_new_suggested()
                or info.get_current_history_length() > budget or signals
                or self._compat.retire_due(self._engine))  # the worker's memory per id

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
        self._carrying = True  # from here new delivery updates are refused (retried): the inbox drains
        if self._inbox is not None:
            self._inbox.flush()
        await self._settle_deliveries()
        if self._inbox is not None:  # signals still waiting are carried by reference (workflows/_carried.py)
            self._absorb(self._engine.carry_waiting(carried(self._inbox), self._now()))
        spec = self._pending_spec or self._spec
        keep_live = self._compat.keep_live_released()
        state = encode_state(self._engine, keep_live)
        size = len(state) + len(spec.model_dump_json())
        if self._engine.bounded and size > limits.MAX_CARRIED_STATE_BYTES and self._compat.engine.capacity:
            # Capacity keeps the state within what fits; should the estimate fall short, the oldest
            # released ids go rather than the activation growing one history until the server stops it.
            while size > limits.MAX_CARRIED_STATE_BYTES and self._absorb(self._engine.shed_to_carry(size - limits.MAX_CARRIED_STATE_BYTES, self._now())):
                state = encode_state(self._engine, keep_live)
                size = len(state) + len(spec.model_dump_json())
        if self._engine.bounded and size > limits.MAX_CARRIED_STATE_BYTES:
            self._carrying = False
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
