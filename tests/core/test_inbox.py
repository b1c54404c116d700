"""The delivery inbox (workflows/_inbox.py) outside a workflow: what it tries, and when."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

import pytest

from wf_initiation.workflows._inbox import Inbox, Turn


class Activation:
    """Signals that wait while there is no room; the tries each makes are counted."""

    def __init__(self, quiet: bool, budget: int = 300) -> None:
        self.room = False
        self.tries: list[str] = []
        self.spawned: list[str] = []
        self.inbox = Inbox(budget, next_task=self._next_task, task_marker=lambda: 1, after_take=lambda: None,
                           spawn=self._spawn, quiet_behind=lambda: quiet)

    async def _next_task(self, queued: int) -> None:
        return None

    def _spawn(self, coro: Coroutine[Any, Any, Any], what: str) -> object:
        coro.close()
        self.spawned.append(what)
        return None

    def signal(self, ident: str) -> None:
        def work(turn: Turn) -> str | None:
            self.tries.append(ident)
            return ident if self.room or not turn.may_wait else None
        self.inbox.offer(work, waited=False, size=10, kept=ident)

    def update(self, ident: str) -> Any:
        def work(turn: Turn) -> str:
            self.tries.append(ident)
            return f"{ident}: {'deferred' if turn.signals_waiting else 'taken'}"
        return self.inbox.offer(work, waited=True)


@pytest.mark.parametrize("quiet", [True, False])
def test_signals_behind_a_waiting_one_join_it_and_an_update_is_answered_at_once(quiet: bool) -> None:
    # proves: EXT-11, INIT-7
    a = Activation(quiet)
    for i in range(5):
        a.signal(f"s{i}")
    # quiet (patch wfi-quiet-waiting): the oldest is tried once, the rest join it untried; the earlier
    # build tried the oldest again for each signal behind it.
    assert a.tries == (["s0"] if quiet else ["s0"] * 5)
    assert a.inbox.waiting_signals == 5
    slot = a.update("u")
    assert slot.done and slot.result() == "u: deferred", "an update does not wait behind signals"
    a.room = True
    a.inbox.retry()
    assert a.tries[-5:] == ["s0", "s1", "s2", "s3", "s4"], "once there is room, all are taken in order"
    assert a.inbox.waiting_signals == 0 and len(a.inbox) == 0


def test_a_burst_behind_a_waiting_signal_spends_no_task_budget() -> None:
    # proves: EXT-11
    # 700 signals in one task behind a waiting one: the earlier build spent a try of the task's
    # budget (300) on each and then asked for a next task; now nothing is tried until retry().
    quiet, before = Activation(True), Activation(False)
    for a in (quiet, before):
        for i in range(700):
            a.signal(f"s{i}")
    assert len(quiet.tries) == 1 and quiet.spawned == []
    assert len(before.tries) == 300 and before.spawned == ["next task for queued deliveries"]
    assert quiet.inbox.waiting_signals == 700 and len(before.inbox) == 700
