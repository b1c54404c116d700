"""What every built-in poll activity runs inside: secrets, a hard deadline, bounded threads, redaction.

- **Secrets.** The activation sends the connection as written (references such as ``env:NAME``);
  :func:`run_poll` resolves them here, on the worker, for this poll only, and only when the
  connection sent is one of the worker's own deployment's (:class:`WorkerConnections`, bound to the
  activity's context by the plugin's interceptor, :mod:`._grant`): a spec written by whoever can
  start a workflow never makes the worker read its environment or files.
- **Deadline.** The whole poll (connect, read, parse) must end before the activity's
  start-to-close timeout: the connector cancels itself a little earlier and reports which source
  was too slow, instead of leaving a socket read or a thread running behind a timed-out activity.
- **Isolation.** Network reads are async (no thread to get stuck). Blocking calls (SQLite, files,
  feed parsing) run on daemon threads of their own, at most :data:`THREADS_PER_SOURCE` per source:
  a source whose calls hang keeps only its own threads busy (they are abandoned and, being daemon
  threads, never hold up a worker's shutdown), and further polls of that source wait for a free
  one within their deadline. At most :data:`POLLS_PER_SOURCE` polls of one source run at a time on
  a worker; more are refused at once, so one slow source cannot fill the worker's activity slots.
- **Redaction.** Every error leaves as an ``ApplicationError`` whose text has been through the
  connection's :class:`~wf_initiation.core.connections.Redactor`; nothing is chained to it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from wf_initiation._secret_files import read_secret_bytes
from wf_initiation.activities.poll._contract import PollRequest, PollResponse, config_invalid, source_unavailable
from wf_initiation.core.connections import (
    Redactor,
    ResolvedConnection,
    SecretUnavailable,
    WorkerConnections,
    resolve_settings,
)

T = TypeVar("T")

DEFAULT_DEADLINE_S = 60.0
"""The poll deadline outside an activity (or without a start-to-close timeout)."""
MIN_DEADLINE_S = 0.5
POLLS_PER_SOURCE = 8
"""Polls of one source (feed origin, database, file) running at once on one worker; more fail at once."""
THREADS_PER_SOURCE = 2
"""Threads doing blocking work for one source at once, stuck ones included."""


def poll_deadline(cap: float | None = None) -> float:
    """Seconds this poll may take: a little less than the activity's start-to-close timeout.

    The margin (10%, at most 2 s) lets the connector fail with its own message, naming the slow
    source, before Temporal times the activity out.

    Args:
        cap: A connector's own total timeout (e.g. the connection's ``timeout``), if any.
    """
    try:
        start_to_close = activity.info().start_to_close_timeout
    except RuntimeError:  # not in an activity
        start_to_close = None
    seconds = DEFAULT_DEADLINE_S
    if start_to_close is not None and start_to_close.total_seconds() > 0:
        total = start_to_close.total_seconds()
        seconds = total - min(2.0, total * 0.1)
    if cap is not None:
        seconds = min(seconds, cap)
    return max(MIN_DEADLINE_S, seconds)


def deadline_bound(deadline: float, cap: float | None) -> str:
    """What bounds a poll's ``deadline``, for messages: the connector's own cap (the connection's
    ``timeout``) when it is the smaller, else the deployment's ``poll.timeout``."""
    if cap is not None and deadline >= cap:
        return f"its deadline of {deadline:.1f}s, the connection's 'timeout' (set on the connection in the deployment)"
    return f"its deadline of {deadline:.1f}s, the deployment's poll.timeout less a margin"


def read_secret_file(path: str) -> str:
    """A secret file's text, read by the one secret-file reader (:mod:`wf_initiation._secret_files`)."""
    return read_secret_bytes(path).decode("utf-8")


_WORKER_CONNECTIONS: ContextVar[WorkerConnections | None] = ContextVar("wfi_worker_connections", default=None)


@contextmanager
def worker_connections(connections: WorkerConnections) -> Iterator[None]:
    """Polls run inside this block use ``connections`` (the plugin's interceptor does this per activity)."""
    token = _WORKER_CONNECTIONS.set(connections)
    try:
        yield
    finally:
        _WORKER_CONNECTIONS.reset(token)


def resolve_connection(connection: dict[str, Any], connector: str) -> ResolvedConnection:
    """The worker's own connection equal to the one sent, with its references resolved from this
    worker's environment and files (PollConfigInvalid naming the fix when there is none)."""
    try:
        settings = (_WORKER_CONNECTIONS.get() or WorkerConnections.none()).bind(connector, connection)
        return resolve_settings(settings, os.environ, read_secret_file)
    except SecretUnavailable as exc:
        raise config_invalid(f"{connector}: {exc}") from None


async def run_poll(
    req: PollRequest, body: Callable[[PollRequest, ResolvedConnection, float], Awaitable[PollResponse]],
    *, cap: Callable[[ResolvedConnection], float | None] = lambda _: None,
) -> PollResponse:
    """Run one poll: resolve the connection, enforce the deadline, redact every error.

    Args:
        req: The poll request.
        body: The connector: ``(request, resolved connection, deadline seconds) -> response``.
        cap: The connector's own cap on the deadline, read from the resolved connection.
    """
    redactor = Redactor()
    try:
        connection = resolve_connection(req.connection, req.connector)
        redactor = connection.redactor()
        capped = cap(connection)
        deadline = poll_deadline(capped)
        timer = asyncio.timeout(deadline)
        try:
            async with timer:
                response = await body(req, connection, deadline)
            if response.notices:
                response = response.model_copy(update={"notices": [redactor.redact(n) for n in response.notices]})
            return response
        except TimeoutError:
            if not timer.expired():
                raise
            raise source_unavailable(
                f"{req.connector}: the poll did not finish within {deadline_bound(deadline, capped)}: the source is "
                "too slow or stalled; raise it if the source is only slow, polling retries with backoff"
            ) from None
    except ApplicationError as exc:
        raise _redacted(exc, redactor) from None
    except Exception as exc:  # a connector bug must still fail as one redacted line, never a traceback of values
        raise source_unavailable(
            redactor.redact(f"{req.connector}: unexpected {type(exc).__name__}: {exc}; polling retries with backoff")
        ) from None


def _redacted(exc: ApplicationError, redactor: Redactor) -> ApplicationError:
    return ApplicationError(redactor.redact(exc.message), type=exc.type, non_retryable=exc.non_retryable,
                            next_retry_delay=exc.next_retry_delay)


@dataclass
class _Source:
    polls: int = 0
    threads: int = 0


class SourceLimits:
    """Per-source bounds on concurrent polls and blocking threads, for one worker process.

    Process-wide on purpose (like a connection pool): the threads and activity slots it protects
    belong to the process, whichever activation or worker object uses them.
    """

    def __init__(self, polls: int = POLLS_PER_SOURCE, threads: int = THREADS_PER_SOURCE) -> None:
        self.max_polls, self.max_threads = polls, threads
        self._lock = threading.Lock()
        self._sources: dict[str, _Source] = {}

    @contextmanager
    def poll(self, source: str, connector: str) -> Iterator[None]:
        """Hold one of the source's poll slots, or fail at once when all are taken."""
        with self._lock:
            state = self._sources.setdefault(source, _Source())
            if state.polls >= self.max_polls:
                raise source_unavailable(
                    f"{connector}: {state.polls} polls of {source} are already running on this worker (at most "
                    f"{self.max_polls}); this one gives up at once so that a slow source cannot take the worker's "
                    "activity slots, and polling retries with backoff"
                )
            state.polls += 1
        try:
            yield
        finally:
            with self._lock:
                state.polls -= 1
                self._forget(source, state)

    def busy(self, source: str) -> tuple[int, int]:
        """(polls, threads) of ``source`` now."""
        with self._lock:
            state = self._sources.get(source, _Source())
            return state.polls, state.threads

    async def run_blocking(self, source: str, fn: Callable[[], T], *, abort: Callable[[], None] | None = None) -> T:
        """Run ``fn`` on a daemon thread of ``source``; when cancelled, call ``abort`` and abandon it.

        Waits (within the caller's deadline) while the source already has ``max_threads`` threads.
        """
        while not self._take_thread(source):  # slots are freed by threads: poll for one (the deadline bounds this)
            await asyncio.sleep(0.05)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()
        thread = threading.Thread(target=self._thread_main, args=(source, fn, loop, done), daemon=True,
                                  name=f"wfi-poll {source}"[:60])
        thread.start()
        try:
            return await done
        except asyncio.CancelledError:
            if abort is not None and thread.is_alive():
                _call_quietly(abort)
            raise

    def _take_thread(self, source: str) -> bool:
        with self._lock:
            state = self._sources.setdefault(source, _Source())
            if state.threads >= self.max_threads:
                return False
            state.threads += 1
            return True

    def _thread_main(self, source: str, fn: Callable[[], T], loop: asyncio.AbstractEventLoop,
                     done: asyncio.Future[T]) -> None:
        try:
            outcome: tuple[Any, BaseException | None] = (fn(), None)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            outcome = (None, exc)
        finally:
            with self._lock:
                state = self._sources[source]
                state.threads -= 1
                self._forget(source, state)
        try:
            loop.call_soon_threadsafe(_settle, done, *outcome)
        except RuntimeError:  # the loop is closed: nobody waits for this result any more
            pass

    def _forget(self, source: str, state: _Source) -> None:
        if state.polls == 0 and state.threads == 0:
            self._sources.pop(source, None)


def _settle(done: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if done.done():
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(result)


def _call_quietly(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001 - aborting is best effort; the thread is abandoned either way
        pass


LIMITS = SourceLimits()
"""The worker process's per-source bounds, shared by the built-in connectors."""
