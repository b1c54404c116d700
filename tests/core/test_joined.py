"""Concurrent first calls about one workflow share one call (wf_initiation/_joined.py)."""

from __future__ import annotations

import asyncio

import pytest

from wf_initiation._joined import Joined


async def test_callers_at_once_share_one_call_and_the_next_calls_again() -> None:
    calls: list[str] = []
    release = asyncio.Event()

    async def call() -> str:
        calls.append("x")
        await release.wait()
        return f"answer {len(calls)}"

    joined: Joined[str] = Joined()
    waiting = [asyncio.create_task(joined("w", call)) for _ in range(8)]
    await asyncio.sleep(0.01)
    release.set()
    assert await asyncio.gather(*waiting) == ["answer 1"] * 8 and len(calls) == 1
    assert await joined("w", call) == "answer 2", "once it ended, the next caller asks again"


async def test_a_cancelled_caller_leaves_the_call_to_the_others_and_an_error_reaches_every_caller() -> None:
    release = asyncio.Event()

    async def failing() -> str:
        await release.wait()
        raise RuntimeError("the server said no")

    joined: Joined[str] = Joined()
    first, second = asyncio.create_task(joined("w", failing)), asyncio.create_task(joined("w", failing))
    other = asyncio.create_task(joined("v", failing))  # another key: its own call
    await asyncio.sleep(0.01)
    first.cancel()
    release.set()
    for waiting in (second, other):
        with pytest.raises(RuntimeError, match="the server said no"):
            await waiting
    assert first.cancelled()
