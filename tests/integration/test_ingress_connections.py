"""Connection limits of the ingress server over real sockets: header and body deadlines, the head
size limit, idle keep-alive, the connection cap and its eviction, and refusals logged once per kind
per interval (wf_initiation/ingress/_connections.py). Issue 18 item 2; the floods against real
`wfi up` and `wfi serve` processes are in tests/integration/test_hostile_connections.py."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support.activation import unique
from tests.support.ingress import deployment_with
from tests.support.waits import assert_eventually
from wf_initiation.ingress import build
from wf_initiation.ingress._app import build_app
from wf_initiation.ingress._connections import HEAD_SLACK, MAX_HEAD_BYTES, RefusalLog, connection_cap, limits_for
from wf_initiation.ingress._server import IngressServer

HOOK = """
name: {name}
on:
  http.request: {{}}
"""
# Pacing of a slow sender: the behaviour under test, not a wait for something to happen.
TRICKLE = 0.3


@contextlib.asynccontextmanager
async def server(tmp_path: pathlib.Path, **ingress: Any) -> AsyncIterator[tuple[IngressServer, Any, str]]:
    name = unique("conn")
    deployment = deployment_with(tmp_path, {name: HOOK.format(name=name)}, task_queue="unused",
                                 ingress={"default_auth": {"scheme": "none"}, **ingress})
    state = build(deployment, connect=_never_connects)
    running = await IngressServer.start(build_app(state), "127.0.0.1", 0, graceful_timeout=5,
                                        limits=limits_for(state.config), refusals=state.refusals,
                                        gauge=state.metrics.connections)
    try:
        yield running, state, f"/hooks/{name}"
    finally:
        await running.stop()


async def _never_connects() -> Any:
    """A Temporal that never answers: a complete request waits for its disposition (a busy connection)."""
    await asyncio.Event().wait()


async def connect(s: IngressServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", s.port)


async def until_closed(reader: asyncio.StreamReader, within: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took."""
    began = time.monotonic()
    data = await asyncio.wait_for(reader.read(), within)
    return data, time.monotonic() - began


def refused(state: Any, reason: str) -> float:
    return state.metrics.connections_refused.labels(reason)._value.get()


def test_the_connection_cap_stays_below_the_descriptor_limit() -> None:
    # One tenth of the limit (at least 64) and four accept bursts are kept free besides what is open.
    assert connection_cap(None, soft_limit=1024, open_now=20).max_connections == 1024 - 20 - 4 * 32 - 102
    assert connection_cap(None, soft_limit=256, open_now=20).max_connections == 256 - 20 - 4 * 8 - 64
    assert connection_cap(None, soft_limit=20_000, open_now=30).max_connections == 10_000
    assert connection_cap(500, soft_limit=20_000, open_now=30).max_connections == 500
    assert connection_cap(5_000, soft_limit=1024, open_now=20).max_connections == 774, "the limit always bounds it"
    assert connection_cap(None, soft_limit=64, open_now=30).max_connections == 1
    assert connection_cap(None, soft_limit=1024, open_now=20).backlog == 32
    assert connection_cap(None, soft_limit=20_000, open_now=20).backlog == 128


def test_refusals_are_logged_once_per_kind_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    log = RefusalLog(logging.getLogger("test.refusals"), interval=60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="test.refusals"):
        for _ in range(1000):
            log.note("header_timeout", "slow")
        log.note("evicted", "full")
        now[0] = 61.0
        log.note("header_timeout", "slow")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert "(header_timeout): 1," in lines[0] and "(evicted): 1," in lines[1]
    assert "(header_timeout): 1000 in the last 61s" in lines[2], "the ones in between are counted, not lost"


async def test_a_silent_connection_is_closed_at_the_header_deadline_without_an_answer(tmp_path: pathlib.Path) -> None:
    async with server(tmp_path, header_timeout="1s") as (s, state, _):
        reader, writer = await connect(s)
        data, took = await until_closed(reader, 10)
        assert data == b"" and 0.9 <= took < 5, (data, took)
        assert refused(state, "header_timeout") == 1
        writer.close()


async def test_headers_trickled_past_the_deadline_are_408_and_closed(tmp_path: pathlib.Path) -> None:
    async with server(tmp_path, header_timeout="1s") as (s, state, path):
        reader, writer = await connect(s)

        async def trickle() -> None:
            with contextlib.suppress(ConnectionError):
                for byte in f"POST {path} HTTP/1.1\r\nHost: x\r\nX-Slow: ".encode() + b"y" * 100:
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(TRICKLE)

        sender = asyncio.create_task(trickle())
        data, took = await until_closed(reader, 10)
        sender.cancel()
        assert data.startswith(b"HTTP/1.1 408 ") and b"header_timeout" in data and took < 5, data
        # The deadline counts from the connection, however steadily the bytes come.
        async with httpx.AsyncClient(base_url=s.url) as http:
            assert (await http.get("/healthz")).status_code == 200


async def test_a_head_over_the_limit_is_431_whole_or_trickled(tmp_path: pathlib.Path) -> None:
    async with server(tmp_path, header_timeout="30s") as (s, state, path):
        # Counted as the target, plus each header's name and value and 4: "/healthz" (8), "Host: x"
        # (9), "X-Pad: ..." (9 + the value).
        for pad, status in ((MAX_HEAD_BYTES - 26, b"200"), (MAX_HEAD_BYTES - 25, b"431")):
            reader, writer = await connect(s)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * pad + b"\r\n\r\n")
            await writer.drain()
            data, _ = await until_closed(reader, 10) if status == b"431" else (await reader.readline(), 0.0)
            assert data.startswith(b"HTTP/1.1 " + status), (pad, data[:60])
            writer.close()
        # A header that never ends: what is buffered meanwhile is bounded too (the count's slack for
        # the method, version and line ends aside).
        for chunks in ([b"x" * (MAX_HEAD_BYTES + HEAD_SLACK + 1)], [b"y" * 4096] * 5):
            reader, writer = await connect(s)
            writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nX-Big: ".encode())
            for chunk in chunks:
                writer.write(chunk)
                await writer.drain()
            data, _ = await until_closed(reader, 10)
            assert data.startswith(b"HTTP/1.1 431 "), data[:80]
            writer.close()
        many = {f"x-h{i}": "v" * 100 for i in range(200)}  # complete headers, 20 KB in all
        async with httpx.AsyncClient(base_url=s.url) as http:
            answer = await http.post(path, headers=many, content=b"{}")
            assert answer.status_code == 431
            assert (await http.get("/healthz", headers={f"x-h{i}": "v" * 100 for i in range(100)})).status_code == 200
        assert refused(state, "headers_too_large") == 4


async def test_a_body_slower_than_the_minimum_rate_is_408_and_a_steady_one_is_read(tmp_path: pathlib.Path) -> None:
    async with server(tmp_path, body_timeout="1s", min_body_rate=100) as (s, state, path):
        reader, writer = await connect(s)
        writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Idempotency-Key: k\r\nContent-Length: 1000\r\n\r\n".encode())

        async def trickle() -> None:
            with contextlib.suppress(ConnectionError):
                for _ in range(1000):
                    writer.write(b" ")
                    await writer.drain()
                    await asyncio.sleep(TRICKLE)  # ~3 bytes/s: far below 100 bytes/s

        sender = asyncio.create_task(trickle())
        data, took = await until_closed(reader, 15)
        sender.cancel()
        assert data.startswith(b"HTTP/1.1 408 ") and b"body_too_slow" in data and took < 8, data
        assert refused(state, "body_too_slow") == 1

        # 600 bytes in three parts, each within the deadline (1 s + bytes/100): read in full, then
        # judged on what it is (an octet stream: 415), not on how it came.
        reader, writer = await connect(s)
        writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
                     f"Idempotency-Key: k\r\nContent-Length: 600\r\n\r\n".encode())
        for _ in range(3):
            writer.write(b"z" * 200)
            await writer.drain()
            await asyncio.sleep(TRICKLE)
        head = await asyncio.wait_for(reader.readline(), 10)
        assert head.startswith(b"HTTP/1.1 415 "), head
        writer.close()


async def test_a_body_the_answer_did_not_need_is_not_waited_for(tmp_path: pathlib.Path) -> None:
    async with server(tmp_path) as (s, state, path):
        for target, status in (("/no/such/route", b"404"), (path, b"413")):
            reader, writer = await connect(s)
            writer.write(f"POST {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n".encode() + b"{")
            await writer.drain()
            data, took = await until_closed(reader, 10)
            assert data.startswith(b"HTTP/1.1 " + status) and took < 5, data[:60]
            writer.close()


async def test_an_idle_keep_alive_connection_is_closed_after_its_timeout(tmp_path: pathlib.Path) -> None:
    async with server(tmp_path, keep_alive_timeout="1s") as (s, state, _):
        reader, writer = await connect(s)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        assert (await asyncio.wait_for(reader.readline(), 10)).startswith(b"HTTP/1.1 200")
        data, took = await until_closed(reader, 10)
        assert data.endswith(b'{"status":"ok"}') and 0.9 <= took < 5
        writer.close()


async def test_at_the_cap_the_longest_waiting_connection_makes_room_and_a_full_house_refuses_at_once(
    tmp_path: pathlib.Path,
) -> None:
    async with server(tmp_path, max_connections=4, header_timeout="60s", body_timeout="60s") as (s, state, path):
        assert s.max_connections == 4
        silent = [await connect(s) for _ in range(4)]
        await assert_eventually(lambda: _open(state, 4))
        async with httpx.AsyncClient(base_url=s.url) as http:  # a fifth: the oldest silent one makes room
            assert (await http.get("/healthz")).status_code == 200
        data, _ = await until_closed(silent[0][0], 5)
        assert data == b"", "a connection that sent nothing is closed without an answer"
        assert refused(state, "evicted") == 1
        for _, writer in silent[1:]:
            writer.close()
        await assert_eventually(lambda: _open(state, 0))

        reading = []  # four requests waiting for their bodies: the oldest makes room, answered 503
        for _ in range(4):
            reader, writer = await connect(s)
            writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n".encode())
            await writer.drain()
            reading.append((reader, writer))
        await assert_eventually(lambda: _open(state, 4))
        newcomer = await connect(s)
        data, _ = await until_closed(reading[0][0], 5)
        assert data.startswith(b"HTTP/1.1 503 ") and b"evicted" in data, data
        assert refused(state, "evicted") == 2
        for _, writer in reading[1:] + [newcomer]:
            writer.close()
        await assert_eventually(lambda: _open(state, 0))

        busy = []  # four complete requests waiting for their dispositions: none is closed for another
        for n in range(4):
            reader, writer = await connect(s)
            writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         f"Idempotency-Key: b-{n}\r\nContent-Length: 2\r\n\r\n{{}}".encode())
            await writer.drain()
            busy.append((reader, writer))
        await assert_eventually(lambda: _open(state, 4))
        await assert_eventually(lambda: _in_flight(state, 4))
        reader, writer = await connect(s)
        data, took = await until_closed(reader, 5)
        assert data == b"" and took < 2, "refused: closed at once"
        assert refused(state, "connection_limit") == 1
        for _, writer in busy:
            writer.close()
        async with httpx.AsyncClient(base_url=s.url) as http:
            await assert_eventually(lambda: _healthy(http))


async def _in_flight(state: Any, n: int) -> None:
    assert state.metrics.in_flight._value.get() == n


async def _open(state: Any, n: int) -> None:
    assert state.metrics.connections._value.get() == n


async def _healthy(http: httpx.AsyncClient) -> None:
    try:
        assert (await http.get("/healthz")).status_code == 200
    except httpx.TransportError as exc:
        raise AssertionError(str(exc)) from None


async def test_two_hundred_refusals_log_one_line(tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    async with server(tmp_path, header_timeout="1s") as (s, state, _):
        with caplog.at_level(logging.WARNING, logger="wf_initiation.ingress"):
            sockets = [await connect(s) for _ in range(200)]
            await assert_eventually(lambda: _refused(state, "header_timeout", 200), timeout=30)
        for _, writer in sockets:
            writer.close()
    lines = [r for r in caplog.records if "connections refused" in r.getMessage()]
    assert len(lines) == 1 and "header_timeout" in lines[0].getMessage(), [r.getMessage() for r in caplog.records]
    assert not any(r.exc_info for r in caplog.records), "no tracebacks"


async def _refused(state: Any, reason: str, n: int) -> None:
    assert refused(state, reason) == n
