"""Waiting on a condition instead of sleeping."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sized
from datetime import UTC, datetime
from typing import TypeVar

T = TypeVar("T")


async def assert_eventually(
    check: Callable[[], Awaitable[T]], *, timeout: float = 30.0, interval: float = 0.1
) -> T:
    """Retry ``check`` until it stops raising AssertionError; return its value."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            return await check()
        except AssertionError:
            if asyncio.get_running_loop().time() > deadline:
                raise
        await asyncio.sleep(interval)


async def until_length(items: Sized, n: int, *, timeout: float = 180.0) -> None:
    """Wait until ``items`` (what a background sender appends to) holds at least ``n``: traffic that
    really flowed before the next step (a kill, a split, the end of sending), on a machine of any
    speed, instead of a number of seconds that a loaded machine may fill with nothing."""
    async def grown() -> None:
        assert len(items) >= n, f"{len(items)} of {n} sent"

    await assert_eventually(grown, timeout=timeout, interval=0.05)


async def until_passed(instant: datetime) -> None:
    """Wait until this machine's clock, which the dev server on it keeps too, is past ``instant``.

    For the tests whose event is time itself: occurrences falling due while a worker is down or an
    entry is paused. The instant is computed from the schedule under test (the fourth occurrence
    after the worker stopped), never a number of seconds picked to be enough."""
    while (left := (instant - datetime.now(UTC)).total_seconds()) > 0:
        await asyncio.sleep(left + 0.01)


async def assert_settles(
    check: Callable[[], Awaitable[T]], progress: Callable[[], object], *, stall: float, timeout: float,
    interval: float = 1.0,
) -> T:
    """Retry ``check`` until it stops raising AssertionError, for as long as it makes progress.

    ``progress()`` (read after each failed check) names how far the system under test has come; the
    wait fails when it stays the same for ``stall`` seconds (stuck: a wedge, not a slow machine) or
    after ``timeout`` seconds in all. For a wait whose length depends on how loaded the machine is
    (a backlog of runs draining), where a fixed timeout would fail a slow but healthy run."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last, since = progress(), loop.time()
    while True:
        try:
            return await check()
        except AssertionError:
            now, seen = loop.time(), progress()
            if seen != last:
                last, since = seen, now
            if now > deadline or now - since > stall:
                raise
        await asyncio.sleep(interval)
