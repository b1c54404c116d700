"""Connections under attack: deadlines, a cap below the file-descriptor limit, quiet refusals.

uvicorn closes an idle keep-alive connection, but never one that is slow to send its request: a
sender that opens a connection and sends nothing, trickles its headers a byte at a time, or
trickles its body, holds a file descriptor forever, and enough of them stop the process answering
anyone. Here, per connection (uvicorn's httptools protocol, subclassed):

- **headers**: the request line and headers must be complete within ``header_timeout`` of the
  connection opening (or of the first byte after a keep-alive pause), and at most
  ``MAX_HEAD_BYTES``; else 408 / 431 and the connection is closed;
- **body**: it must arrive at ``min_body_rate`` bytes a second on average after ``body_timeout`` of
  grace (:class:`BodyDeadline`, an ASGI middleware timing each ``receive``); else 408 and closed. A
  body the app answered without reading (404, 413 on ``Content-Length``) is not waited for: the
  connection closes after the answer;
- **idle**: a keep-alive connection with no new request for ``keep_alive_timeout`` is closed;
- **count**: at most ``max_connections`` open at once, a cap kept below the process's file-descriptor
  limit (:func:`connection_cap`). At the cap, the connection idle or waiting for its headers the
  longest is closed to make room (a sender's real request has its headers complete in
  milliseconds); when every connection is in a request, the new one is answered 503 and closed at
  once.

Every refusal is counted in ``wfi_ingress_connections_refused_total{reason}`` and logged once per
kind per minute (:class:`RefusalLog`), never a line (or a traceback) per connection.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import http
import json
import os
import resource
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from wf_initiation.errors import InvalidInput

from ._refusals import BodyTooSlow, RefusalLog
from .config import IngressConfig

MAX_HEAD_BYTES = 16 * 1024
"""Request line and headers of one request: 431 past it (a webhook's are well under 4 KiB). Counted
as the target plus each header's name and value plus 4 (``": "`` and CRLF)."""
HEAD_SLACK = 1024  # the method, version and line ends, which the count leaves out
MAX_CONNECTIONS = 10_000
"""Open connections when neither the deployment nor the descriptor limit says fewer."""
FD_RESERVE = 64
"""Descriptors kept free beyond the connections and the accept burst: Temporal's connections,
secret files, logs."""
ACCEPT_BURSTS = 4
"""Bursts of ``backlog`` accepted sockets that can be open before the cap sees the first of them
(accepted in one loop iteration, the transport made in the next, ``connection_made`` in the one
after), and the sockets it closed, released an iteration later."""


@dataclasses.dataclass(frozen=True)
class ConnectionLimits:
    """How long a connection may take over each part of a request, and how many may be open."""

    header_timeout: float = 10.0
    body_timeout: float = 10.0
    min_body_rate: int = 1024
    keep_alive_timeout: float = 75.0
    max_connections: int = MAX_CONNECTIONS
    backlog: int = 128


def connection_cap(requested: int | None, *, soft_limit: int | None = None, open_now: int | None = None) -> ConnectionLimits:
    """``max_connections`` and the listen backlog for this process's descriptor limit.

    asyncio accepts up to ``backlog`` connections in each loop iteration, a few iterations before
    the cap sees them, so the cap leaves room for ``ACCEPT_BURSTS`` of them and ``FD_RESERVE`` (or a
    tenth of the limit) besides what is open already. ``requested`` (the deployment's
    ``max_connections``) can only lower it.
    """
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0] if soft_limit is None else soft_limit
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    used = _open_descriptors() if open_now is None else open_now
    backlog = max(8, min(128, soft // 32))
    room = soft - used - ACCEPT_BURSTS * backlog - max(FD_RESERVE, soft // 10)
    cap = max(1, min(requested or MAX_CONNECTIONS, room))
    return ConnectionLimits(max_connections=cap, backlog=backlog)


def limits_for(config: IngressConfig) -> ConnectionLimits:
    """The connection limits of an ``ingress:`` section, the cap kept below this process's
    file-descriptor limit (:func:`connection_cap`)."""
    capped = connection_cap(config.max_connections)
    return dataclasses.replace(
        capped, header_timeout=config.header_timeout.total_seconds(), body_timeout=config.body_timeout.total_seconds(),
        min_body_rate=config.min_body_rate,
        # Longer than uvicorn's 5 s by default: a sender that reuses a connection after a pause
        # otherwise races the server closing it and sees a reset (nginx keeps idle connections 75 s).
        keep_alive_timeout=config.keep_alive_timeout.total_seconds(),
    )


def _open_descriptors() -> int:
    for listing in ("/proc/self/fd", "/dev/fd"):  # Linux; macOS and the BSDs
        try:
            return len(os.listdir(listing))
        except OSError:
            continue
    return 0  # the reserve has to do


class HeadTooLarge(InvalidInput):
    """The request line and headers are over the limit (raised from the parser; 431)."""


class ConnectionGuard:
    """The open connections of one server: the cap, and which ones may be closed to make room."""

    def __init__(self, limits: ConnectionLimits, refusals: RefusalLog, gauge: Any = None):
        self.limits, self.refusals, self.gauge = limits, refusals, gauge
        self.open = 0
        # The connections that may be closed to make room, in this order, each the longest waiting
        # first: waiting for the headers of a request (a sender's real request has them complete in
        # milliseconds), waiting for a body (nothing of it delivered yet), idle between requests (a
        # sender that reuses it then has to reconnect). A connection whose request is complete is
        # never closed for another.
        self._tiers: dict[str, collections.OrderedDict[GuardedProtocol, None]] = {
            "waiting for its headers": collections.OrderedDict(),
            "waiting for its body": collections.OrderedDict(),
            "idle": collections.OrderedDict(),
        }

    def protocol_class(self) -> type[HttpToolsProtocol]:
        """uvicorn's ``http`` protocol class for a server guarded by this."""
        return type("GuardedHttpToolsProtocol", (GuardedProtocol,), {"guard": self})

    def admit(self, connection: GuardedProtocol) -> bool:
        self.open += 1
        if self.gauge is not None:
            self.gauge.inc()
        if self.open > self.limits.max_connections:
            what = next((name for name, tier in self._tiers.items() if tier), None)
            if what is None:
                return False
            oldest, _ = self._tiers[what].popitem(last=False)
            oldest.refuse(503, "evicted", f"{self.limits.max_connections} connections open (max_connections): "
                          f"closed the one {what} the longest")
        self._enter(connection, "waiting for its headers")
        return True

    def waiting(self, connection: GuardedProtocol) -> None:
        """Its request's headers not complete yet (the first bytes of one came after a pause)."""
        self._enter(connection, "waiting for its headers")

    def reading(self, connection: GuardedProtocol) -> None:
        """Its headers complete, its body still coming."""
        self._enter(connection, "waiting for its body")

    def idle(self, connection: GuardedProtocol) -> None:
        """Answered; no byte of a next request yet."""
        self._enter(connection, "idle")

    def busy(self, connection: GuardedProtocol) -> None:
        """Its request complete (being answered), or refused: not to be closed for another."""
        for tier in self._tiers.values():
            tier.pop(connection, None)

    def _enter(self, connection: GuardedProtocol, name: str) -> None:
        self.busy(connection)
        self._tiers[name][connection] = None

    def forget(self, connection: GuardedProtocol) -> None:
        self.open -= 1
        if self.gauge is not None:
            self.gauge.dec()
        self.busy(connection)


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header deadlines, a head size limit and the cap."""

    guard: ConnectionGuard

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._awaiting_head = True
        self._head_bytes = 0  # bytes received while waiting for the head: bounds httptools' buffers
        self._head_parsed = 0  # bytes of the request line and headers parsed so far

    # ------------------------------------------------------------------ connection
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self.guard.admit(self):
            self.refuse(503, "connection_limit", f"{self.guard.limits.max_connections} connections open "
                        "(max_connections), each in a request")
            return
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        self.guard.forget(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        if self._awaiting_head:
            self._head_bytes += len(data)
            if self._head_timer is None:  # the first bytes after a keep-alive pause
                self._arm_head_timer()
                self.guard.waiting(self)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, HeadTooLarge):
                self._head_too_large()
            else:
                self.refuse(400, "bad_request", "not a valid HTTP/1.1 request")
        except httptools.HttpParserError:
            self.refuse(400, "bad_request", "not a valid HTTP/1.1 request")
        except httptools.HttpParserUpgrade:
            pass  # no protocol upgrades here: the request is answered as a plain request
        else:  # the callbacks count the head exactly; this bounds what httptools buffers meanwhile
            if self._awaiting_head and self._head_bytes > MAX_HEAD_BYTES + HEAD_SLACK:
                self._head_too_large()

    # ------------------------------------------------------------------ parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_parsed = 0

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._awaiting_head, self._head_bytes = False, 0
        self._cancel_head_timer()
        self.guard.reading(self)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self.guard.busy(self)
        super().on_message_complete()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)
        if self.cycle is not None and self.cycle.more_body and not pipelined and not self.transport.is_closing():
            # Answered before its body was read (404, 413 on Content-Length, 408): the rest of the
            # body is not waited for, and the connection cannot be reused without it.
            self.transport.close()
        super().on_response_complete()
        if not pipelined and not self.transport.is_closing():
            self._awaiting_head, self._head_bytes = True, 0
            self.guard.idle(self)

    # ------------------------------------------------------------------ refusals
    def refuse(self, status: int, kind: str, detail: str) -> None:
        """Count and (rarely) log the refusal, answer ``status`` to a request begun and not yet
        answered, and close. A connection that sent nothing is closed without an answer: a response
        nobody asked for would be read as the answer to the sender's next request."""
        self._cancel_head_timer()
        self.guard.busy(self)
        self.guard.refusals.note(kind, detail)
        if self.transport.is_closing():
            return
        running = self.cycle is not None and not self.cycle.response_complete
        if (self._awaiting_head and self._head_bytes > 0) or (running and not self.cycle.response_started):
            self.transport.write(plain_response(status, kind, detail))
        if running:  # the app's request ends here: its receive sees a disconnect, its answer goes nowhere
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        self.transport.close()

    def _count_head(self, n: int) -> None:
        self._head_parsed += n
        if self._head_parsed > MAX_HEAD_BYTES:
            raise HeadTooLarge()

    def _head_too_large(self) -> None:
        self.refuse(431, "headers_too_large", f"request line and headers over {MAX_HEAD_BYTES} bytes")

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.guard.limits.header_timeout, self._head_timeout)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self._awaiting_head:
            self.refuse(408, "header_timeout", f"no complete request headers within "
                        f"{self.guard.limits.header_timeout:g}s of the connection (or its last request)")


def plain_response(status: int, code: str, message: str) -> bytes:
    """A whole JSON response with ``Connection: close``, written by the protocol itself."""
    body = json.dumps({"error": code, "message": message}).encode()
    head = [f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}", "content-type: application/json",
            f"content-length: {len(body)}", "connection: close"]
    if status == 503:
        head.append("retry-after: 2")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class BodyDeadline:
    """ASGI middleware: the body of a request must arrive at ``min_body_rate`` bytes a second on
    average, after ``body_timeout`` of grace; a ``receive`` past that raises :class:`BodyTooSlow`."""

    def __init__(self, app: Any, limits: ConnectionLimits):
        self.app, self.limits = app, limits

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        began, received = loop.time(), 0
        grace, rate = self.limits.body_timeout, self.limits.min_body_rate

        async def timed() -> dict:
            nonlocal received
            try:
                async with asyncio.timeout_at(began + grace + received / rate):
                    message = await receive()
            except TimeoutError:
                raise BodyTooSlow(f"the request body arrived slower than {rate} bytes/s (after {grace:g}s); "
                                  f"{received} bytes came") from None
            received += len(message.get("body", b""))
            return message

        await self.app(scope, timed, send)


def quiet_accept_failures(loop: asyncio.AbstractEventLoop, refusals: RefusalLog) -> None:
    """Route asyncio's "accept() out of system resource" (with a traceback, each time the listening
    socket is retried) to the refusal log; every other report goes where it went."""
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") == "socket.accept() out of system resource":
            refusals.note("accept_failed", f"accept(): {context.get('exception')}")
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
