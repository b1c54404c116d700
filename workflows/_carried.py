"""Signalled deliveries carried across continue-as-new by reference (``core.engine.SignalRef``).

Signals still waiting for room when a run continues as new leave its inbox in order
(``Inbox.flush``); the state carries a reference to each (entry, delivery id, payload digest, the
run whose history holds it), not its payload: a thousand waiting payloads would not fit the
continue-as-new argument. The next run holds its inbox (every signal waits, a new update id is
deferred) until :meth:`CarriedSignals.recover` has read them back from history with the
``wfi.recover_signals`` activity (``activities/signals.py``), a page of payload bytes at a time, and
put them ahead of whatever arrived meanwhile. One not found there (the history is past the
namespace's retention, the activity failed each attempt) is listed as ``deferred_signal``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from wf_initiation.activities.signals import RECOVER_SIGNALS_ACTIVITY, RecoverRequest
    from wf_initiation.core.engine import Decision, Engine, SignalRef
    from wf_initiation.core.limits import MAX_RECOVER_BYTES
    from wf_initiation.wire import DeliveryRequest

    from ._inbox import Inbox, Slot, Turn

Take = Callable[[DeliveryRequest, str], Callable[[Turn], object | None]]


def page(refs: list[SignalRef]) -> list[SignalRef]:
    """The first refs whose payloads add up to at most ``MAX_RECOVER_BYTES`` (at least one)."""
    total, n = 0, 0
    for ref in refs:
        if n and total + ref.size > MAX_RECOVER_BYTES:
            break
        total, n = total + ref.size, n + 1
    return refs[:n]


def carried(inbox: Inbox) -> list[tuple[str | None, Any, str]]:
    """(entry, payload, run id) of the signals the inbox flushed out, in order, for ``Engine.carry_waiting``."""
    return [(request.entry, request.payload, run_id) for request, run_id in inbox.take_carried()]


class CarriedSignals:
    """Reads the previous run's waiting signals back into this run's inbox (see the module docstring)."""

    def __init__(self, engine: Engine, inbox: Inbox, *, take: Take, absorb: Callable[[Decision[Any]], Any],
                 now: Callable[[], datetime]) -> None:
        self._engine, self._inbox, self._take, self._absorb, self._now = engine, inbox, take, absorb, now

    async def recover(self) -> None:
        while True:
            refs = page(self._engine.waiting_signals)
            if not refs:
                self._inbox.restore([], done=True)
                return
            requests, problem = await self._read(refs)
            slots: list[Slot[Any]] = []
            for ref, request in zip(refs, requests):
                if request is None:
                    self._absorb(self._engine.waiting_lost(ref, problem, self._now()))
                else:
                    slots.append(Slot(self._take(request, ref.run_id), False, ref.size, (request, ref.run_id)))
            self._absorb(self._engine.waiting_recovered(len(refs)))
            self._inbox.restore(slots, done=not self._engine.waiting_signals)
            if not self._engine.waiting_signals:
                return

    async def _read(self, refs: list[SignalRef]) -> tuple[list[DeliveryRequest | None], str]:
        try:
            found = await workflow.execute_activity(
                RECOVER_SIGNALS_ACTIVITY, RecoverRequest(workflow_id=workflow.info().workflow_id, refs=refs),
                result_type=list[DeliveryRequest | None], start_to_close_timeout=timedelta(seconds=60),
                retry_policy=RetryPolicy(maximum_attempts=5), summary=f"read {len(refs)} waiting signal(s) back from history")
        except ActivityError as exc:
            return [None] * len(refs), f"its signal could not be read back from history: {exc.cause or exc}"
        return list(found), "its signal was not found in that run's history (past the namespace's retention?)"
