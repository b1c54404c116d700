"""How deliveries share a workflow task's budget (``core.limits.DELIVERIES_PER_TASK``).

Current runs use the inbox (``workflows/_inbox.py``). A run begun before it (``RunCompat.inbox``
false) keeps what its history recorded: each handler past the budget takes a ticket and waits, in
arrival order, for a later task, which a 1 ms timer brings (the server fires it up to 1 s late).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

from temporalio import workflow


class TicketAdmission:
    """The per-handler admission tickets of runs begun before the inbox."""

    def __init__(self, budget: int, *, enabled: bool, check_task: Callable[[], None],
                 spawn: Callable[[Coroutine[Any, Any, Any], str], object]) -> None:
        self._budget = budget
        self._spawn = spawn  # starts the task that brings the next workflow tasks (workflows/_tasks.py)
        self._enabled = enabled  # off for runs begun before the budgets: every handler takes all at once
        self._check_task = check_task  # the shell's new-task check; it calls new_task() on a new task
        self._taken = 0
        self._queue: list[int] = []
        self._tickets = 0

    def new_task(self) -> None:
        self._taken = 0

    async def admit(self, wanted: int) -> int:
        """How many of ``wanted`` deliveries this handler may take now (at least one), in arrival order."""
        if not self._enabled:
            return wanted
        self._check_task()
        if not self._queue and self._left() > 0:
            return self._take(wanted)
        ticket = self._tickets = self._tickets + 1
        self._queue.append(ticket)
        if len(self._queue) == 1:
            self._spawn(self._bring_next_tasks(), "next task for deliveries")
        await workflow.wait_condition(lambda: self._queue[0] == ticket and self._left() > 0)
        self._queue.pop(0)
        return self._take(wanted)

    def _left(self) -> int:
        self._check_task()
        return self._budget - self._taken

    def _take(self, wanted: int) -> int:
        granted = min(wanted, self._left())
        self._taken += granted
        return granted

    async def _bring_next_tasks(self) -> None:
        while self._queue:
            await workflow.sleep(timedelta(milliseconds=1), summary="next task for waiting deliveries")
