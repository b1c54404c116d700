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
five seconds (the no-run drop of 1 Dec). Not a local activity either: that keeps the workflow task
open across slices, and a task open long under a signal stream is failed by the server once 100
events are buffered behind it.

Signalled deliveries are never dropped silently (their senders were told they are durable): one
that the held-bytes budget would defer stays here, and the signals behind it stay behind it, until
the activation has room (each new task and each turn of the main loop tries again); updates that
arrive meanwhile are answered at once, a new id ``deferred`` so it cannot pass them. The inbox keeps
at most ``MAX_WAITING_SIGNALS`` / ``MAX_WAITING_BYTES`` of them: past that the oldest is deferred and
listed with a reference to its signal (``deferred_signal``, ``core.limits.MAX_DEFERRED_SIGNALS``).
At continue-as-new (:meth:`Inbox.flush`) the signals still waiting leave the inbox as :attr:`carried`
(the shell carries them by reference in the state); the next run's inbox is :meth:`held` until they
are read back from history and :meth:`restore`-d ahead of everything that arrived meanwhile.

Update handlers wait for their own slots (one condition each, on their last slot: an update's
slots are taken in order); a signal's slot is not waited for. Queued items are in memory only: a
replay rebuilds them from the history (the signals and updates are there), so the activation must
not continue as new or complete while any is queued (:attr:`Inbox.empty`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from wf_initiation.core.limits import MAX_WAITING_BYTES, MAX_WAITING_SIGNALS

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Turn:
    """What the inbox tells a piece of work when it takes it."""

    signals_waiting: bool  # signalled deliveries wait ahead of it (a new id must not pass them)
    may_wait: bool  # a signal may wait again (false: the inbox keeps it no longer)


@dataclass(eq=False)
class Slot(Generic[T]):
    """One queued piece of work and, once taken, its result or the error it raised.

    An update's work (``waited``) always gives a result; a signal's gives None to wait."""

    work: Callable[[Turn], T | None]
    waited: bool  # an update waits for it: an error goes to that update, not to the workflow task
    size: int = 0  # payload bytes held while it waits
    kept: Any = None  # a signalled delivery's (request, run id of the history holding it): carried at continue-as-new
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
                 after_take: Callable[[], None],
                 spawn: Callable[[Coroutine[Any, Any, Any], str], object],
                 quiet_behind: Callable[[], bool] = lambda: False) -> None:
        self._budget = budget
        self._quiet_behind = quiet_behind  # a signal behind a waiting one waits without a try (compat)
        self._spawn = spawn  # starts the task that brings the next workflow task (workflows/_tasks.py)
        self._after_take = after_take  # something was taken: the shell's loop has commands to issue
        self._queue: list[Slot[Any]] = []
        self._next_task = next_task  # ends this task (an activity) so the next one takes a slice
        self._task_marker = task_marker  # history length: it changes exactly when a new workflow task begins
        self._marker = -1
        self._taken = 0  # in the workflow task of ``_marker``
        self._waiting_for_task = False
        self._flushing = False
        self._signals = 0  # signal slots queued, and their payload bytes
        self._updates = 0  # update slots queued (a scan past waiting signals looks for these only)
        self._signal_bytes = 0
        self.waiting_signals = 0  # signals kept because the activation had no room for them
        self.carried: list[Any] = []  # flushed: the ``kept`` of the signals still waiting, in order
        self._held = False  # the previous run's waiting signals are being read back: every signal waits
        self._restored = 0  # where the next restored signal goes (after those restored before)

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def empty(self) -> bool:
        return not self._queue and not self._held

    @property
    def held(self) -> bool:
        return self._held

    def offer(self, work: Callable[[Turn], T | None], *, waited: bool, size: int = 0, kept: Any = None) -> Slot[T]:
        """Queue ``work`` behind what is queued and take what this task has room for."""
        slot: Slot[T] = Slot(work, waited, size, kept)
        self._queue.append(slot)
        if waited:
            self._updates += 1
        else:
            self._signals += 1
            self._signal_bytes += size
            if self._behind_waiting():
                self.waiting_signals = self._signals
                return slot
        self._take()
        return slot

    def _behind_waiting(self) -> bool:
        """Whether a new signal only joins the signals waiting for room: nothing can be taken for it
        (it stays behind them) and the inbox is within its bounds. The head is tried again when the
        activation may have room (:meth:`retry`, each turn of the loop), not once per signal: a burst
        of thousands arriving in one task cost a try and a scan of the queue each, which came near the
        2 s deadlock timeout on a loaded worker."""
        if not self.waiting_signals or self._flushing or self._held or self._room() <= 0:
            return False  # a try now would change nothing an earlier build recorded (held, no room)
        return self._must_take() == 0 and self._quiet_behind()

    def kept(self) -> list[Any]:
        """The ``kept`` of the signalled deliveries queued (waiting), in order."""
        return [slot.kept for slot in self._queue if slot.kept is not None]

    def take_carried(self) -> list[Any]:
        """The ``kept`` of the signals flushed out so far, in order (handed to the state once)."""
        carried, self.carried = self.carried, []
        return carried

    def hold(self) -> None:
        """Signals wait (and new update ids are deferred) until :meth:`restore` says all are back."""
        self._held, self._restored = True, 0

    def restore(self, slots: list[Slot[Any]], *, done: bool) -> None:
        """Signals of the previous run read back from history, ahead of what arrived since, in order;
        ``done``: the last of them (the inbox takes again)."""
        self._queue[self._restored:self._restored] = slots
        self._restored += len(slots)
        self._signals += len(slots)
        self._signal_bytes += sum(s.size for s in slots)
        if done:
            self._held = False
            self._take()

    async def wait(self, slots: list[Slot[T]]) -> list[T]:
        """The results of an update's slots, once taken (the first error raised)."""
        if slots and not slots[-1].done:
            last = slots[-1]
            await workflow.wait_condition(lambda: last.done)
        return [s.result() for s in slots]

    def retry(self) -> None:
        """Offer signals kept waiting again (the activation may have room now); nothing otherwise."""
        if self.waiting_signals:
            self._take()

    def flush(self) -> None:
        """Keep nothing waiting from now on (before continue-as-new or completing): the signals that
        still have no room leave the inbox, in order, as :attr:`carried`; the rest is taken."""
        self._flushing = True
        if self._queue:
            self._take()

    def _room(self) -> int:
        marker = self._task_marker()  # one read of the history length per call, not per item
        if marker != self._marker:
            self._marker, self._taken = marker, 0
        return self._budget - self._taken

    def _must_take(self) -> int:
        """How many of the oldest waiting signals the inbox can keep no longer (its bounds)."""
        excess = max(0, self._signals - MAX_WAITING_SIGNALS)
        if self._signal_bytes <= MAX_WAITING_BYTES:
            return excess
        held, n = self._signal_bytes, 0
        for slot in self._queue:  # the oldest first, until what stays is within the byte bound
            if held <= MAX_WAITING_BYTES and n >= excess:
                break
            if not slot.waited:
                held -= slot.size
                n += 1
        return n

    def _carry(self, i: int) -> None:
        slot = self._queue.pop(i)
        self.carried.append(slot.kept)
        self._signals -= 1
        self._signal_bytes -= slot.size

    def _take(self) -> None:
        room = self._room()
        force = self._must_take()
        blocked = self._held  # a signal waits: later signals stay behind it
        took = False
        i = 0
        while i < len(self._queue) and room > 0:
            if blocked and not self._flushing and not self._updates:
                break  # only signals behind a waiting one are left: each would stay where it is
            slot = self._queue[i]
            if blocked and not slot.waited:
                if self._flushing and slot.kept is not None:
                    self._carry(i)  # behind a carried one: carried too, in order
                    continue
                if not self._flushing:
                    i += 1
                    continue
            room -= 1
            self._taken += 1
            forced = not slot.waited and force > 0
            try:
                value = slot.work(Turn(signals_waiting=blocked, may_wait=not forced))
            except Exception as exc:
                if not slot.waited:
                    raise  # a signal's work records its own failures; anything else is a bug: fail the task
                value, slot.error = None, exc
            if not slot.waited:
                force -= 1
                if value is None:
                    blocked = True
                    if self._flushing and slot.kept is not None:
                        self._carry(i)
                    else:
                        i += 1
                    continue
                self._signals -= 1
                self._signal_bytes -= slot.size
            else:
                self._updates -= 1
            del self._queue[i]
            slot.value, slot.done, took = value, True, True
        self.waiting_signals = self._signals if blocked else 0
        if took:
            self._after_take()
        if self._queue and room <= 0 and not self._waiting_for_task:
            self._waiting_for_task = True
            self._spawn(self._bring_next_task(), "next task for queued deliveries")

    async def _bring_next_task(self) -> None:
        try:
            await self._next_task(len(self._queue))
        finally:
            self._waiting_for_task = False
        self._take()  # in the task the activity's completion brought
