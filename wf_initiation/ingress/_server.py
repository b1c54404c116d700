"""Serving the ingress app with uvicorn in the current event loop, with a graceful stop.

    server = await IngressServer.start(asgi_app, "127.0.0.1", 8780)
    print(server.url)
    ...
    await server.stop()      # stop accepting, finish every request in flight, then return

The socket is bound here, before uvicorn starts, so a port in use is a clear error (uvicorn itself
would end the process) and port 0 picks a free port. Signals stay with the caller: ``wfi serve``
and ``wfi up`` decide the shutdown order (the ingress drains before the worker stops).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn

from wf_initiation.errors import PortInUse

from ._connections import ConnectionGuard, ConnectionLimits, limits_for
from ._refusals import RefusalLog
from .config import IngressConfig


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # the caller owns SIGINT/SIGTERM
        yield


class IngressServer:
    def __init__(self, server: _Server, sock: socket.socket, task: asyncio.Task[None], guard: ConnectionGuard):
        self._server, self._socket, self._task, self.guard = server, sock, task, guard

    @classmethod
    async def start(cls, app: Any, host: str, port: int, *, graceful_timeout: float = 60.0,
                    access_log: bool = False, limits: ConnectionLimits | None = None,
                    refusals: RefusalLog | None = None, gauge: Any = None) -> IngressServer:
        """Serve ``app``; ``limits`` (default: :func:`limits_for` the default configuration) bound
        each connection and their number, ``refusals`` counts and logs what they refuse."""
        limits = limits or limits_for(IngressConfig())
        guard = ConnectionGuard(limits, refusals or RefusalLog(logging.getLogger("wf_initiation.ingress")), gauge)
        sock = bind(host, port, backlog=limits.backlog)
        config = uvicorn.Config(app, log_level="warning", access_log=access_log, lifespan="off",
                                # uvicorn takes whole seconds: round up, never cut the drain short
                                timeout_graceful_shutdown=math.ceil(graceful_timeout), server_header=False,
                                http=guard.protocol_class(), ws="none", backlog=limits.backlog,
                                timeout_keep_alive=limits.keep_alive_timeout)  # type: ignore[arg-type]
        server = _Server(config)
        task = asyncio.create_task(server.serve(sockets=[sock]), name="wfi ingress")
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("the ingress server stopped while starting")
            await asyncio.sleep(0.01)
        return cls(server, sock, task, guard)

    @property
    def max_connections(self) -> int:
        return self.guard.limits.max_connections

    @property
    def port(self) -> int:
        return self._socket.getsockname()[1]

    @property
    def host(self) -> str:
        return self._socket.getsockname()[0]

    @property
    def url(self) -> str:
        host = self.host
        return f"http://{'[' + host + ']' if ':' in host else host}:{self.port}"

    def begin_stop(self) -> None:
        """Stop accepting connections now (uvicorn itself would notice at its next tick)."""
        self._server.should_exit = True
        for listening in self._server.servers:
            listening.close()

    async def stop(self) -> None:
        """Stop accepting connections and wait until every request in flight was answered."""
        self.begin_stop()
        await self._task

    async def wait(self) -> None:
        await self._task


def bind(host: str, port: int, *, backlog: int = 128) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and an
    # accepted socket inherits it. Without it, Nagle and delayed ACKs hold each response ~40 ms.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PortInUse(f"cannot listen on {host}:{port} ({exc.strerror}); pick another port "
                        "(--port, or ingress.port in the deployment)") from None
    # asyncio accepts up to ``backlog`` connections in one go, before the cap can close any:
    # connection_cap leaves that many descriptors free.
    sock.listen(backlog)
    sock.setblocking(False)
    return sock
