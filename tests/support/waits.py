"""Waiting on a condition instead of sleeping."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
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
