"""How many deliveries the ingress has in flight to one activation, and how many wait for a slot."""

from __future__ import annotations

import asyncio
from typing import Any

from wf_initiation.errors import WfiError


class Pressure(WfiError):
    """No delivery slot for the workflow now (429 too many waiting, 503 busy): send it again later."""

    type = "busy"
    retryable = True

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code = status, code


class Gate:
    """At most ``slots`` deliveries in flight to one activation; at most ``max_waiting`` waiting."""

    def __init__(self, slots: int, max_waiting: int):
        self._sem = asyncio.Semaphore(slots)
        self.max_waiting = max_waiting
        self.waiting = 0

    async def enter(self, timeout: float, waiting_gauge: Any = None) -> None:
        if not self._sem.locked():  # a free slot: taken at once (acquire does not suspend)
            await self._sem.acquire()
            return
        if self.waiting >= self.max_waiting:
            raise Pressure(429, "too_many_waiting", f"{self.waiting} deliveries to this workflow are already waiting")
        self.waiting += 1
        if waiting_gauge is not None:
            waiting_gauge.inc()
        try:
            await asyncio.wait_for(self._sem.acquire(), timeout)
        except TimeoutError:
            raise Pressure(503, "busy", f"no delivery slot for this workflow within {timeout:g}s") from None
        finally:
            self.waiting -= 1
            if waiting_gauge is not None:
                waiting_gauge.dec()

    def leave(self) -> None:
        self._sem.release()
