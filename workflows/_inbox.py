"""Deliveries of one activation taken in arrival order, at most a budget of them per workflow task.

Why a budget: a workflow task that takes thousands of deliveries (a burst the server handed over in
one task, or ten bulk updates of 500) comes near the worker's 2 s deadlock timeout on a loaded
machine, and a task failed as a deadlock is retried with the same deliveries forever
(``core.limits.DELIVERIES_PER_TASK``).

How the rest waits: handlers (signals and updates alike) put their work in this inbox; what the
task has room for is taken at once, in the handler, exactly as if there were no inbox. Past the
budget, items wait here in arrival order; a no-op activity ends the task and its completion brings
the next one, which takes the next slice. An activity, not a timer: the server fires a timer up to
``history.timerProcessorMaxTimeShift`` late (1 s by default), which cost a backlog of 2,000 signals
five seconds (bench/README.md, "the no-run drop of 1 Dec"). Not a local activity either: that keeps
the workflow task open across slices, and a task open long under a signal stream is failed by the
server once 100 events are buffered behind it.

Update handlers wait for their own slots (one condition each, on their last slot: slots are taken
in order); a signal's slot is not waited for. Queued items are in memory only: a replay rebuilds
them from the history (the signals and updates are there), so the activation must not continue as
new or complete while any is queued (:attr:`Inbox.empty`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from temporalio import workflow

T = TypeVar("T")


@dataclass(eq=False)
class Slot(Generic[T]):
    """One queued piece of work and, once taken, its result or the error it raised."""

    work: Callable[[], T]
    waited: bool  # an update waits for it: an error goes to that update, not to the workflow task
    done: bool = False
    value: Any = None
    error: BaseException | None = None

    def result(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value


class Inbox:
    """FIFO of deliveries with a per-task budget; see the module docstring."""

    def __init__(self, budget: int, *, next_task: Callable[[int], Awaitable[None]], task_marker: Callable[[], int],
                 after_take: Callable[[], None]) -> None:
        self._budget = budget
        self._after_take = after_take  # something was taken: the shell's loop has commands to issue
        self._queue: deque[Slot[Any]] = deque()
        self._next_task = next_task  # ends this task (an activity) so the next one takes a slice
        self._task_marker = task_marker  # history length: it changes exactly when a new workflow task begins
        self._marker = -1
        self._taken = 0  # in the workflow task of ``_marker``
        self._waiting_for_task = False

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def empty(self) -> bool:
        return not self._queue

    def _room(self) -> int:
        marker = self._task_marker()
        if marker != self._marker:
            self._marker, self._taken = marker, 0
        return self._budget - self._taken

    def offer(self, work: Callable[[], T], *, waited: bool) -> Slot[T]:
        """Queue ``work`` behind what is queued and take what this task has room for."""
        slot: Slot[T] = Slot(work, waited)
        self._queue.append(slot)
        self._take()
        return slot

    async def wait(self, slots: list[Slot[T]]) -> list[T]:
        """The results of an update's slots, once taken (the first error raised)."""
        if slots and not slots[-1].done:
            last = slots[-1]
            await workflow.wait_condition(lambda: last.done)
        return [s.result() for s in slots]

    def _take(self) -> None:
        room = self._room()  # one read of the history length per call, not per item
        took = bool(self._queue and room > 0)
        while self._queue and room > 0:
            slot = self._queue.popleft()
            self._taken += 1
            room -= 1
            try:
                slot.value = slot.work()
            except Exception as exc:
                if not slot.waited:
                    raise  # a signal's work records its own failures; anything else is a bug: fail the task
                slot.error = exc
            slot.done = True
        if took:
            self._after_take()
        if self._queue and not self._waiting_for_task:
            self._waiting_for_task = True
            asyncio.create_task(self._bring_next_task(), name="next task for queued deliveries")

    async def _bring_next_task(self) -> None:
        try:
            await self._next_task(len(self._queue))
        finally:
            self._waiting_for_task = False
        self._take()  # in the task the activity's completion brought
