"""OpenTelemetry: a delivery's trace runs from the client call through the activation's decision to
the run's start and the run itself; metrics are exported once per fact, also when every workflow
task replays the whole history (max_cached_workflows=0). The SDK's in-memory exporters, the real
dev server."""

from __future__ import annotations

import pathlib
import sqlite3
import uuid
from collections import Counter
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import Disposition
from wf_initiation.plugin import WfiPlugin

MAIL = """
name: {name}
on:
  mail.received:
    inbox: support@acme.com
  as: message
  when: "{{{{ message.recipient != 'noreply@acme.com' }}}}"
  queue_by: "{{{{ message.thread_id }}}}"
"""
POLL = """
name: {name}
on:
  - sql.row_inserted: {{table: orders, column: id, connection: db}}
    as: order
  - rss.item_published: {{feed: "http://127.0.0.1:9/feed.xml", connection: blog}}
    as: item
"""
TICK = """
name: {name}
on:
  time.schedule: {{interval: 1s, timezone: Europe/Berlin}}
  as: tick
"""


class Telemetry:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def plugin(self) -> WfiPlugin:
        return WfiPlugin(sample_runs=True, tracer_provider=self.tracer_provider, meter_provider=self.meter_provider)

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        return [p for rm in (data.resource_metrics if data else []) for sm in rm.scope_metrics
                for m in sm.metrics if m.name == name for p in m.data.data_points]

    def counts(self, name: str, *keys: str) -> Counter[tuple[Any, ...]]:
        out: Counter[tuple[Any, ...]] = Counter()
        for p in self.points(name):
            out[tuple(p.attributes.get(k) for k in keys)] += p.value
        return out

    def gauge(self, name: str, workflow: str) -> int | None:
        values = [p.value for p in self.points(name) if p.attributes.get("wfi.workflow") == workflow]
        return values[-1] if values else None


def _mail(mid: str, thread: str = "t1", **extra: Any) -> dict[str, Any]:
    return {"message_id": mid, "from": "a@b.c", "recipient": "help@acme.com", "subject": "hi", "thread_id": thread, **extra}


async def _started(client: Client, run_key: str) -> None:
    try:
        await client.get_workflow_handle(run_key).describe()
    except RPCError as exc:
        raise AssertionError(f"{run_key} not started yet") from exc


def _by_name(spans: list[ReadableSpan], trace_id: int) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans if s.context.trace_id == trace_id}


@pytest.fixture
async def traced(dev_env, task_queue: str):
    telemetry = Telemetry()
    client = Client(dev_env.client.service_client, namespace=dev_env.client.namespace,
                    data_converter=dev_env.client.data_converter, plugins=[telemetry.plugin()])
    # Every workflow task replays the whole history: anything not replay-safe would count again.
    async with Worker(client, task_queue=task_queue, max_cached_workflows=0):
        yield telemetry, client, WfiClient(client, task_queue=task_queue)


async def test_a_deliverys_trace_runs_from_the_client_call_through_the_decision_to_the_run(
    traced, tmp_path: pathlib.Path, task_queue: str,
) -> None:
    telemetry, client, wfi = traced
    name = unique("traced")
    await wfi.activate(make_spec(tmp_path, MAIL.format(name=name), task_queue=task_queue))
    tracer = telemetry.tracer_provider.get_tracer("webhook-bridge")
    with tracer.start_as_current_span("POST /hooks/mail") as bridge:  # the webhook bridge's own span
        first = await wfi.deliver(name, _mail("m-1", hold=True))
    with tracer.start_as_current_span("POST /hooks/mail") as bridge_queued:
        queued = await wfi.deliver(name, _mail("m-2"))  # waits behind m-1's thread: started later, from the loop
    assert (first.disposition, queued.disposition) == (Disposition.ACCEPTED, Disposition.QUEUED)
    await assert_eventually(lambda: _started(client, first.run_key))
    await client.get_workflow_handle(first.run_key).signal("release")
    await assert_eventually(lambda: _started(client, queued.run_key), timeout=60)
    await client.get_workflow_handle(queued.run_key).result()

    for span, delivery in ((bridge, first), (bridge_queued, queued)):
        trace_id = span.get_span_context().trace_id

        async def chain(trace_id: int = trace_id) -> dict[str, ReadableSpan]:
            found = _by_name(list(telemetry.spans.get_finished_spans()), trace_id)
            assert {"StartWorkflowUpdate:deliver", "wfi.decide", "wfi.start_run", "StartWorkflow:wfi.EchoRun",
                    "RunWorkflow:wfi.EchoRun"} <= set(found), sorted(found)
            return found
        found = await assert_eventually(chain)
        update = found["StartWorkflowUpdate:deliver"]
        assert update.parent is not None and update.parent.span_id == span.get_span_context().span_id
        decide = found["wfi.decide"]
        assert decide.parent.span_id == update.context.span_id
        assert decide.attributes["wfi.disposition"] == delivery.disposition.value
        assert decide.attributes["wfi.run_key"] == delivery.run_key
        start = found["wfi.start_run"]
        assert start.parent.span_id == update.context.span_id and start.attributes["wfi.run_key"] == delivery.run_key
        assert found["StartWorkflow:wfi.EchoRun"].parent.span_id == start.context.span_id
        assert found["RunWorkflow:wfi.EchoRun"].parent.span_id == found["StartWorkflow:wfi.EchoRun"].context.span_id
    # One decision span per delivery, although every task of the activation replayed its history.
    assert sum(s.name == "wfi.decide" for s in telemetry.spans.get_finished_spans()
               if s.attributes.get("wfi.workflow") == name) == 2


async def test_dispositions_and_latencies_are_counted_once_each_despite_replays(
    traced, tmp_path: pathlib.Path, task_queue: str,
) -> None:
    telemetry, client, wfi = traced
    name = unique("counted")
    await wfi.activate(make_spec(tmp_path, MAIL.format(name=name), task_queue=task_queue))
    results = [
        await wfi.deliver(name, _mail("m-1")),
        await wfi.deliver(name, _mail("m-1"), update_id="resent-m-1"),  # duplicate
        await wfi.deliver(name, _mail("m-2", recipient="noreply@acme.com")),  # suppressed
        await wfi.deliver(name, {"message_id": "m-3"}),  # invalid
        await wfi.deliver(name, _mail("m-4", thread="t2")),
    ]
    await wfi.deliver_many(name, [(None, _mail(f"b-{i}", thread=f"b{i}")) for i in range(3)])
    assert [r.disposition for r in results] == [Disposition.ACCEPTED, Disposition.DUPLICATE, Disposition.SUPPRESSED,
                                                Disposition.INVALID, Disposition.ACCEPTED]
    expected = {("accepted",): 5, ("duplicate",): 1, ("suppressed",): 1, ("invalid",): 1}

    async def counted() -> None:
        got = Counter({k[1:]: v for k, v in telemetry.counts("wfi.dispositions", "wfi.workflow", "wfi.disposition").items()
                       if k[0] == name})
        assert got == Counter(expected)
        assert telemetry.counts("wfi.errors", "wfi.workflow", "wfi.error_kind")[(name, "invalid")] == 1
        latency = [p for p in telemetry.points("wfi.acceptance.latency") if p.attributes["wfi.workflow"] == name]
        assert sum(p.count for p in latency) == 6 and all(p.min >= 0 for p in latency)  # five deliver + one deliver_many
        starts = [p for p in telemetry.points("wfi.run.start_latency") if p.attributes["wfi.workflow"] == name]
        assert sum(p.count for p in starts) == 5
        assert telemetry.gauge("wfi.dedup.size", name) == 6  # 5 accepted + 1 suppressed
        assert 0 < telemetry.gauge("wfi.capacity.fill_percent", name) < 80
    await assert_eventually(counted, timeout=60)


async def test_polls_and_schedule_lag_are_measured(traced, tmp_path: pathlib.Path, task_queue: str) -> None:
    telemetry, client, wfi = traced
    db = tmp_path / "orders.db"
    with sqlite3.connect(db) as con:
        con.execute("create table orders (id integer primary key, amount)")
        con.executemany("insert into orders values (?, ?)", [(1, 5), (2, 6), (3, 7)])
    polled, ticking = unique("polled"), unique("ticking")
    await wfi.activate(make_spec(tmp_path, POLL.format(name=polled), task_queue=task_queue,
                                 poll={"interval": "1s", "backoff_initial": "1s", "backoff_max": "1s"},
                                 connections={"db": {"connector": "sql", "sqlite": str(db)},
                                              "blog": {"connector": "rss", "timeout": 1}}))
    await wfi.activate(make_spec(tmp_path, TICK.format(name=ticking), task_queue=task_queue))

    async def measured() -> None:
        items = telemetry.counts("wfi.poll.items", "wfi.workflow", "wfi.connector")
        assert items[(polled, "sql.row_inserted")] == 3
        assert telemetry.counts("wfi.poll.failures", "wfi.workflow", "wfi.connector")[(polled, "rss.item_published")] >= 1
        durations = {p.attributes["wfi.outcome"] for p in telemetry.points("wfi.poll.duration")
                     if p.attributes["wfi.workflow"] == polled}
        assert durations == {"ok", "failed"}
        lags = [p for p in telemetry.points("wfi.schedule.lag") if p.attributes["wfi.workflow"] == ticking]
        # proves: SCHED-6 (measured: no run started before its instant)
        assert sum(p.count for p in lags) >= 2 and min(p.min for p in lags) >= 0
    await assert_eventually(measured, timeout=60)
    await wfi.operate(polled, _pause())
    await wfi.operate(ticking, _pause())


def _pause() -> Any:
    from wf_initiation.wire import OperatorRequest

    return OperatorRequest(action="pause", action_id=str(uuid.uuid4()))


def test_at_most_10000_waiting_runs_keep_their_deliverys_trace() -> None:
    from wf_initiation.workflows._telemetry import MAX_CARRIERS, TraceCarriers

    carriers = TraceCarriers()
    assert MAX_CARRIERS == 10_000
    assert all(carriers.keep(f"run-{i}", {"traceparent": f"t{i}"}) for i in range(MAX_CARRIERS))  # at the limit
    assert not carriers.keep("one-more", {"traceparent": "x"}) and len(carriers) == MAX_CARRIERS  # one past it
    assert not carriers.keep("run-0", {"traceparent": "later"})  # a batch keeps its first event's trace
    assert carriers.take("run-0") == {"traceparent": "t0"} and carriers.take("run-0") is None
    assert carriers.keep("one-more", {"traceparent": "x"})  # a started run frees its place


async def test_the_activations_own_activities_open_no_trace_of_their_own(traced, tmp_path: pathlib.Path, task_queue: str) -> None:
    telemetry, client, wfi = traced
    name = unique("quiet")
    untraced = WfiClient(Client(client.service_client, namespace=client.namespace, data_converter=client.data_converter),
                         task_queue=task_queue)
    await untraced.activate(make_spec(tmp_path, MAIL.format(name=name), task_queue=task_queue))  # as `wfi activate` does
    with telemetry.tracer_provider.get_tracer("webhook-bridge").start_as_current_span("POST /hooks/mail") as bridge:
        delivery = await wfi.deliver(name, _mail("m-1"))
    await assert_eventually(lambda: _started(client, delivery.run_key))
    await client.get_workflow_handle(delivery.run_key).result()
    activation = f"wfi-activation:{name}"

    async def watched_and_published() -> list[ReadableSpan]:
        # The run's end was watched and its lifecycle events published: the activities ran.
        summary = await wfi.summary(name)
        assert summary["runs_running"] == 0 and summary["runs_starting"] == 0, summary
        return list(telemetry.spans.get_finished_spans())

    spans = await assert_eventually(watched_and_published, timeout=60)
    roots = [s.name for s in spans if s.parent is None and s.attributes.get("temporalWorkflowID") == activation
             and s.name.startswith("RunActivity:")]  # (the calls of this test are roots of their own, rightly)
    assert roots == [], f"root traces opened by the activation's activities: {roots}"
    trace_id = bridge.get_span_context().trace_id
    assert {"wfi.start_run", "RunWorkflow:wfi.EchoRun"} <= set(_by_name(spans, trace_id)), "the delivery's trace is whole"
