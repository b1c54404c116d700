"""Concurrent first calls about one workflow share one call to the server.

A webhook bridge that restarts under load sends its first deliveries from many callers at once;
each would otherwise ask the server the same question before its first delivery (the codec check
reads the activation's history; the routing describes shard 1 and queries shard 0, a task on the
busiest shard): 16 callers, 16 history reads, 32 describes and 16 queries where one of each answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class Joined(Generic[V]):
    """One call in flight per key: callers arriving while it runs await its answer (or its error).

    The call runs as its own task, so a caller that is cancelled does not cancel it for the others;
    the next caller after it ended calls again (what to keep is the caller's business)."""

    def __init__(self) -> None:
        self._running: dict[str, asyncio.Future[V]] = {}

    async def __call__(self, key: str, call: Callable[[], Awaitable[V]]) -> V:
        running = self._running.get(key)
        if running is None or running.done() or running.get_loop() is not asyncio.get_running_loop():
            running = self._running[key] = asyncio.ensure_future(call())
            running.add_done_callback(lambda done: self._ended(key, done))
        return await asyncio.shield(running)

    def _ended(self, key: str, done: asyncio.Future[V]) -> None:
        if self._running.get(key) is done:
            del self._running[key]
        if not done.cancelled():
            done.exception()  # retrieved: every caller may have gone (cancelled) before it ended
