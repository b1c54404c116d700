"""The activation's time (a mixin of ``ActivationWorkflow``): when the loop wakes, anticipated
schedule occurrences and the hold until their instant, and the workflow task the inbox asks for.

One timer per earlier deadline, never cancelled; an occurrence ``schedule_wake_ahead`` away is
admitted at its instant and the task held until then (SCHED-6, activities.clock).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from wf_initiation.activities.clock import wait_for_instant
    from wf_initiation.core.engine import Decision, Engine

    from ._compat import RunCompat


class Timekeeping:
    """Methods of ``ActivationWorkflow``; the state they use is the workflow's."""

    _engine: Engine
    _compat: RunCompat
    _timers: set[datetime]
    _admitted_until: datetime
    _absorb: Callable[[Decision[Any]], Any]
    _poke: Callable[[], None]

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
