"""Waiting on a condition instead of sleeping."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
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


async def until_passed(instant: datetime) -> None:
    """Wait until this machine's clock, which the dev server on it keeps too, is past ``instant``.

    For the tests whose event is time itself: occurrences falling due while a worker is down or an
    entry is paused. The instant is computed from the schedule under test (the fourth occurrence
    after the worker stopped), never a number of seconds picked to be enough."""
    while (left := (instant - datetime.now(UTC)).total_seconds()) > 0:
        await asyncio.sleep(left + 0.01)
