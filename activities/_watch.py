"""How ``wfi.watch_runs`` learns that runs ended, in a bounded number of calls.

One long poll per running run (``handle.result()``) counts against the namespace's limit of
concurrent long polls (``frontend.namespaceCount``, 1,200 by default, shared with every worker's
task polls): 3,000 running runs exceeded it. A watch instead asks the visibility store which of its
runs are closed, ``WorkflowId IN (...) AND ExecutionStatus != 'Running'`` for at most
:data:`QUERY_IDS` runs a call, one call at a time, again and again with backoff (:data:`MIN_INTERVAL`
doubling to :data:`MAX_INTERVAL`, back to the minimum whenever a run ended). A closed execution other
than one that continued as new ends its run: runs are started without a retry policy or a cron
schedule, so nothing follows it. Runs a query cannot name (an id holding a quote or backslash) and
the runs of a query the server refused are described instead, at most
:data:`DESCRIBE_CONCURRENCY` calls at a time (a describe names the latest run of a chain); so are
all runs on a server without visibility listing (the time-skipping test server).

At its first sweep a watch also lists its runs whatever their status: a run the store does not
know is described, and one the server does not know at all (deleted: deleting a running workflow
terminates it; or removed by the namespace's retention after it ended) is reported ``terminated``.
A long-polled watch (:data:`LONG_POLLS`) learns both from its long polls and sweeps only after
:data:`MAX_INTERVAL`, as their backup.
Nothing about one run fails the watch of the others: a call that fails is logged and asked again
at the next sweep, and its runs stay watched.

The closed-run queries of every watch of a worker's client go together (:class:`ClosedQueries`): one
query in flight at a time and at most one every :data:`QUERY_GAP` while asked, the runs of the sweeps
that asked meanwhile named together in the next (at most :data:`QUERY_IDS` a query). A sharded
activation has watches on every shard, each sweeping on its own: one query per watch every sweep
made the visibility store the bottleneck of run-starting deliveries past a few shards (bench/bench_shards.py: 0.62 of the design floor at 8
shards, 0.90 with sweeps 15 times rarer). A first look (runs whose endings nothing awaits at once)
sweeps at most once a second, its query waiting up to :data:`PATIENCE` for the other shards', and
never asks whether its runs exist (the watch after it does); its activity heartbeats first after
10 s (activities.runs), as most first looks are over by then: each heartbeat is a write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Iterable
from typing import Any

from temporalio.client import Client, RPCTimeoutOrCancelledError, WorkflowFailureError
from temporalio.client import WorkflowExecutionStatus as Status
from temporalio.service import RPCError, RPCStatusCode

QUERY_IDS = 100
"""Runs named in one visibility query."""
LONG_POLLS = 2
"""A watch of at most this many runs also awaits each with a long poll: the end of a lone run (the
head of a ``queue_by`` key) is learned at once rather than at the next sweep. A watch of more runs
only sweeps, so that endings come back together (fewer activities, fewer workflow tasks): 16 long
polls per activation at most."""
DESCRIBE_CONCURRENCY = 8
"""Describe calls of one watch in flight at once."""
MIN_INTERVAL = 0.2
MAX_INTERVAL = 5.0
"""Seconds between sweeps: from MIN_INTERVAL, doubling while nothing ends, at most MAX_INTERVAL."""
QUERY_GAP = 0.1
"""Seconds from one closed-run query of a worker's client to the next while others are asked for
(:class:`ClosedQueries`): the sweeps of every watch of the worker within it go together."""
PATIENCE = 0.5
"""Seconds a first look's query waits for other watches' (:class:`ClosedQueries`): the first looks of
a sharded activation's shards, each sweeping every second at its own moment, share a query or two a
second instead of one each."""
GONE = "terminated"
"""What a watched run the server does not know is reported as."""

TERMINAL = {
    Status.COMPLETED: "completed",
    Status.FAILED: "failed",
    Status.CANCELED: "cancelled",
    Status.TERMINATED: "terminated",
    Status.TIMED_OUT: "timed_out",
}

_TRANSIENT = frozenset({RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED,
                        RPCStatusCode.RESOURCE_EXHAUSTED})
_log = logging.getLogger("wf_initiation.watch")


def _text(exc: BaseException) -> str:
    return getattr(exc, "message", None) or str(exc) or type(exc).__name__


def queryable(workflow_id: str) -> bool:
    """Can a visibility query name this id? (A quote or backslash is left to describe calls.)"""
    return workflow_id.isprintable() and "'" not in workflow_id and "\\" not in workflow_id


def closed_query(workflow_ids: Iterable[str], *, running_too: bool = False) -> str:
    """The visibility query for the closed executions of these ids (or all of them, ``running_too``)."""
    listed = ", ".join(f"'{i}'" for i in workflow_ids)
    return f"WorkflowId IN ({listed})" + ("" if running_too else " AND ExecutionStatus != 'Running'")


class ClosedQueries:
    """The closed-run queries of every watch on one client (and event loop): one round in flight at a
    time, at most one every :data:`QUERY_GAP` while asked; the ids asked for meanwhile go together in
    the next (queries of at most :data:`QUERY_IDS` ids, one after the other). A query whose every ask
    is patient (first looks) waits for the earliest one's patience to run out. Get it with
    :func:`closed_queries`."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self.loop = asyncio.get_running_loop()
        self._asked: list[tuple[list[str], asyncio.Future[dict[str, str]], float]] = []
        self._pump: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    async def closed(self, workflow_ids: list[str], *, patience: float = 0.0) -> dict[str, str]:
        """The ids of ``workflow_ids`` whose execution closed, with the run's outcome. ``patience``:
        seconds the query may wait for other watches' ids (a first look's sweep: :data:`PATIENCE`);
        an impatient ask takes every waiting one along.

        Raises:
            RPCError: the server refused the query these ids went in (the same error for every
                watch whose ids were in it).
        """
        future: asyncio.Future[dict[str, str]] = self.loop.create_future()
        self._asked.append((workflow_ids, future, self.loop.time() + patience))
        self._wake.set()
        if self._pump is None or self._pump.done():
            self._pump = asyncio.create_task(self._answer())
        return await future

    async def _answer(self) -> None:
        last = float("-inf")
        while True:
            self._asked = [a for a in self._asked if not a[1].done()]  # a caller cancelled: not asked for
            if not self._asked:
                return
            due = max(min(by for _, _, by in self._asked), last + QUERY_GAP)
            if (wait := due - self.loop.time()) > 0:  # the gap, or every ask patient: wait for company
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)
                continue
            last = self.loop.time()
            asked, self._asked = [(ids, f) for ids, f, _ in self._asked], []
            wanted = list(dict.fromkeys(i for ids, _ in asked for i in ids))
            found: dict[str, str] = {}
            try:
                for start in range(0, len(wanted), QUERY_IDS):
                    query = closed_query(wanted[start:start + QUERY_IDS])
                    async for execution in self._client.list_workflows(query, page_size=QUERY_IDS * 2):
                        if execution.status in TERMINAL:
                            found[execution.id] = TERMINAL[execution.status]
            except asyncio.CancelledError:
                for _, future in asked:
                    future.cancel()
                raise
            except Exception as exc:  # noqa: BLE001 - each watch decides what the error means for it
                for _, future in asked:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for ids, future in asked:
                if not future.done():
                    future.set_result({i: found[i] for i in ids if i in found})


_SHARED: weakref.WeakKeyDictionary[Client, ClosedQueries] = weakref.WeakKeyDictionary()


def closed_queries(client: Client) -> ClosedQueries:
    """The closed-run queries shared by every watch on ``client`` in this event loop."""
    shared = _SHARED.get(client)
    if shared is None or shared.loop is not asyncio.get_running_loop():
        shared = _SHARED[client] = ClosedQueries(client)
    return shared


class RunWatcher:
    """Resolves one future per watched run with its terminal status, sweeping until every run ended
    (see the module docstring); cancel the task running :meth:`run` to stop it."""

    def __init__(self, client: Client, run_keys: Iterable[str], *, first_sweep: float = 0.0,
                 first_look: bool = False) -> None:
        """``first_sweep``: seconds before the first sweep. ``first_look``: gathered runs whose endings
        nothing awaits at once (core.engine.Dispatcher): never long-polled, swept at most every
        ``first_sweep`` seconds, their queries waiting up to :data:`PATIENCE` for other watches', and
        not checked for existence (a run the server does not know stays watched: the first look
        reports it still going at its max_wait, and the watch that follows finds it gone)."""
        self._client = client
        loop = asyncio.get_running_loop()
        self.outcomes: dict[str, asyncio.Future[str]] = {key: loop.create_future() for key in run_keys}
        self._first_sweep = first_sweep
        self._first_look = first_look
        self._min_interval = max(MIN_INTERVAL, first_sweep) if first_look else MIN_INTERVAL
        self._patience = PATIENCE if first_look else 0.0
        self.long_polled = not first_look and len(self.outcomes) <= LONG_POLLS
        self._describing = asyncio.Semaphore(DESCRIBE_CONCURRENCY)
        self._listing = True  # False once the server turned out to have no visibility listing

    @property
    def watching(self) -> list[str]:
        return [key for key, future in self.outcomes.items() if not future.done()]

    async def run(self) -> None:
        """Sweep until every run ended (and long-poll the runs of a small watch meanwhile)."""
        polling = asyncio.create_task(self._long_polls())
        try:
            await self._sweeps()
        finally:
            polling.cancel()

    async def _long_polls(self) -> None:
        """Await the end of each run of a small watch (:data:`LONG_POLLS`), one long poll each."""
        waiting: dict[str, asyncio.Task[None]] = {}
        if not self.long_polled:
            return
        try:
            while True:
                for key in self.watching:
                    if len(waiting) >= LONG_POLLS:
                        break
                    if key not in waiting:
                        waiting[key] = asyncio.create_task(self._await_end(key))
                if not waiting:
                    return
                done, _ = await asyncio.wait(waiting.values(), return_when=asyncio.FIRST_COMPLETED)
                for key in [k for k, t in waiting.items() if t in done]:
                    del waiting[key]
        finally:  # the watch is over (or cancelled): no long poll outlives it
            for task in waiting.values():
                task.cancel()

    async def _await_end(self, key: str) -> None:
        try:
            await self._client.get_workflow_handle(key).result(follow_runs=True)
            status: str | None = "completed"
        except WorkflowFailureError:
            try:
                status = await self._describe(key)
            except (RPCError, RPCTimeoutOrCancelledError):
                return  # the sweeps learn it instead
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:  # the sweeps learn it instead
                _log.debug("long poll of watched run %s: %s", key, _text(exc))
                await asyncio.sleep(MAX_INTERVAL)
                return
            status = GONE  # deleted, or removed by retention after it ended
        except RPCTimeoutOrCancelledError as exc:  # the sweeps learn it instead
            _log.debug("long poll of watched run %s: %s", key, _text(exc))
            await asyncio.sleep(MAX_INTERVAL)
            return
        future = self.outcomes.get(key)
        if status is not None and future is not None and not future.done():
            future.set_result(status)

    async def _sweeps(self) -> None:
        interval, first = self._min_interval, True
        if self._first_sweep:
            await asyncio.sleep(self._first_sweep)
        elif self.long_polled:
            # Long-polled: the long polls learn an ending (or a run the server does not know) at once;
            # the sweeps only back them up. Sweeping at once would cost two visibility queries per
            # lone run, most of it wasted on runs that end within moments.
            await asyncio.sleep(MAX_INTERVAL)
        while self.watching:
            try:
                ended = await self.sweep(check_existence=first)
                first = False
            except (RPCError, RPCTimeoutOrCancelledError) as exc:  # the server unreachable or busy: later
                _log.warning("watching %d runs: %s; asking again in %.1fs", len(self.watching), _text(exc), interval)
                ended = 0
            interval = self._min_interval if ended else min(interval * 2, MAX_INTERVAL)
            if self.watching:
                await asyncio.sleep(interval)

    async def sweep(self, *, check_existence: bool = False) -> int:
        """One pass over the runs still watched; the number found ended. ``check_existence`` (the first
        sweep): also find the runs the server does not know (not for a first look)."""
        check_existence = check_existence and not self._first_look
        watching = self.watching
        by_query = [key for key in watching if queryable(key) and self._listing]
        ended: dict[str, str] = {}
        listed = set(by_query)
        to_describe = [key for key in watching if key not in listed]
        for start in range(0, len(by_query), QUERY_IDS):
            chunk = by_query[start:start + QUERY_IDS]
            closed = await self._closed_in(chunk)
            if closed is None:
                to_describe += chunk
                continue
            ended.update(closed)
            if check_existence and (open_ := [key for key in chunk if key not in closed]):
                to_describe += await self._unknown_in(open_)  # a run listed as closed exists
        statuses = await asyncio.gather(*(self._describe(key) for key in to_describe))
        ended.update((key, status) for key, status in zip(to_describe, statuses) if status is not None)
        for key, status in ended.items():
            if key in self.outcomes and not self.outcomes[key].done():
                self.outcomes[key].set_result(status)
        return len(ended)

    async def _closed_in(self, chunk: list[str]) -> dict[str, str] | None:
        """The runs of ``chunk`` that ended, with their outcome (asked together with the other
        watches' runs, :class:`ClosedQueries`); None when the server refused the query."""
        try:
            return await closed_queries(self._client).closed(chunk, patience=self._patience)
        except RPCError as exc:
            self._refused(exc, len(chunk))
            return None

    async def _unknown_in(self, chunk: list[str]) -> list[str]:
        """The ids of ``chunk`` the visibility store does not list at all.

        Counted first: each run key has exactly one execution that did not continue as new (runs
        have no retry policy or cron schedule, and a closed id is never reused), so a full count
        means every run is known, and nothing is listed (listing 100 running executions and
        decoding them cost the worker more than the starts of those runs did)."""
        try:
            known = (await self._client.count_workflows(f"{closed_query(chunk, running_too=True)} "
                                                        "AND ExecutionStatus != 'ContinuedAsNew'")).count
        except RPCError as exc:
            if exc.status not in (RPCStatusCode.UNIMPLEMENTED, RPCStatusCode.INVALID_ARGUMENT):
                raise
            known = -1  # no count: list them
        if known == len(chunk):
            return []
        executions = await self._list(closed_query(chunk, running_too=True), len(chunk))
        if executions is None:
            return []
        listed = {e.id for e in executions}
        return [key for key in chunk if key not in listed]

    async def _list(self, query: str, runs: int) -> list[Any] | None:
        """The executions the query lists; None when the server refuses the query itself (the
        caller then describes its runs one by one). Any other error ends the sweep."""
        try:
            return [execution async for execution in self._client.list_workflows(query, page_size=QUERY_IDS * 2)]
        except RPCError as exc:
            self._refused(exc, runs)
            return None

    def _refused(self, exc: RPCError, runs: int) -> None:
        """A listing the server refused (the caller describes the runs instead), or ``exc`` raised
        when it is no refusal of the query (the sweep ends; the next one asks again)."""
        if exc.status == RPCStatusCode.UNIMPLEMENTED:  # no visibility listing (the time-skipping test server)
            self._listing = False
            return
        if exc.status != RPCStatusCode.INVALID_ARGUMENT:
            raise exc
        _log.warning("the server refused the query for %d watched runs (%s); describing them instead", runs,
                     exc.message)

    async def _describe(self, workflow_id: str) -> str | None:
        """The terminal status of the workflow id's latest run; None while it runs or cannot be told."""
        async with self._describing:
            try:
                desc = await self._client.get_workflow_handle(workflow_id).describe()
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:
                    return GONE
                if exc.status in _TRANSIENT:
                    raise
                _log.warning("describing watched run %s failed (%s); asking again at the next sweep", workflow_id,
                             exc.message)
                return None
        return TERMINAL.get(desc.status) if desc.status is not None else None
