"""Direct client calls in tests that may meet a server restart, retried as ``WfiClient`` retries them.

A test that stops and starts a dev server (or runs beside one that does) talks to it through
``WfiClient``, which retries transport errors with the same update id, and through the plain
Temporal client (list, describe, history). Those plain calls go through :func:`ride_out`:

    client = await connect(server.address)
    runs = await ride_out(lambda: listed(client, query))
    desc = await ride_out(lambda: client.get_workflow_handle(wid).describe())

Only reads and idempotent calls belong here: a retried call may have reached the server already.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio.client import Client, RPCTimeoutOrCancelledError, WorkflowExecution
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode

from wf_initiation._sdk import is_transport_error

T = TypeVar("T")


def meets_restart(exc: BaseException) -> bool:
    """The call met a server that is restarting (or not up yet): it may succeed when asked again."""
    if isinstance(exc, RPCError):
        return is_transport_error(exc) or exc.status == RPCStatusCode.UNAVAILABLE
    if isinstance(exc, RPCTimeoutOrCancelledError):  # the connection dropped while the call waited
        return True
    # Client.connect reports a server that does not answer yet as a RuntimeError ("Failed client connect").
    return isinstance(exc, RuntimeError) and "connect" in str(exc).lower()


async def ride_out(call: Callable[[], Awaitable[T]], *, timeout: float = 120.0) -> T:
    """``call()`` again (a fresh awaitable each time) while it meets a server restart, up to ``timeout``
    seconds; any other error, and the last restart error after the timeout, is raised as it is."""
    deadline = asyncio.get_running_loop().time() + timeout
    delay = 0.1
    while True:
        try:
            return await call()
        except (RPCError, RPCTimeoutOrCancelledError, RuntimeError) as exc:
            if not meets_restart(exc) or asyncio.get_running_loop().time() > deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)


async def connect(address: str, *, timeout: float = 60.0) -> Client:
    """A client of the dev server at ``address``, waiting for it to come up."""
    return await ride_out(lambda: Client.connect(address, data_converter=pydantic_data_converter), timeout=timeout)


async def listed(client: Client, query: str) -> list[WorkflowExecution]:
    """Every execution matching ``query``, as one call: ride it out as a whole, so that a listing
    interrupted by a restart starts again instead of returning a part."""
    return [execution async for execution in client.list_workflows(query)]
