"""OpenTelemetry for wf-initiation: traces of deliveries and metrics (docs/observability.md).

``WfiPlugin(tracer_provider=..., meter_provider=...)`` builds one :class:`WfiTelemetry` and a
:class:`WfiTelemetryInterceptor` that carries it everywhere it is needed:

* **client**: the latency of each delivery call (``deliver``/``deliver_many`` update, ``deliver_signal``);
* **workflow** (the activation): an update or signal handler sees the caller's trace context (the
  SDK tracing interceptor's ``_tracer-data`` header) through :func:`current_carrier`; the activation
  reports its decisions, dispositions, errors and gauges through an *extern function*, called from
  workflow code only when the workflow is not replaying (workflows/_telemetry.py), so a replay never
  records anything twice;
* **activities**: poll duration/items/failures; the run-start activity opens a ``wfi.start_run`` span
  under the delivery's trace, so the run's own spans (``StartWorkflow``/``RunWorkflow``) join it.
  The activation's own activities (starting, watching, publishing, polling, waiting) get no span of
  their own when the activation carries no trace (:class:`ActivationTracingInterceptor`): traced
  by the SDK's interceptor, each would open a root trace, several per delivery.

The context variable lives in :mod:`wf_initiation._trace_context` (light, passed through the
workflow sandbox: the interceptor sets the very variable workflow code reads).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import temporalio.activity
import temporalio.client
import temporalio.converter
import temporalio.worker
from opentelemetry import trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from temporalio.contrib.opentelemetry import TracingInterceptor

from wf_initiation._trace_context import CARRIER as _carrier
from wf_initiation._trace_context import EXTERN, TRACE_HEADER
from wf_initiation.wire import ACTIVATION_ID_PREFIX as ACTIVATION_PREFIX
from wf_initiation.wire import ACTIVATION_WORKFLOW, DELIVER_MANY_UPDATE, DELIVER_UPDATE
from wf_initiation.wire import DELIVER_SIGNAL as DELIVERY_SIGNAL
from wf_initiation.wire import POLL_ACTIVITY_PREFIX as POLL_PREFIX

DELIVERY_UPDATES = frozenset({DELIVER_UPDATE, DELIVER_MANY_UPDATE})

_PROPAGATOR = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
def workflow_name(workflow_id: str) -> str:
    """The workflow identity of an activation's workflow id (``wfi-activation:<name>`` -> ``<name>``)."""
    return workflow_id.removeprefix(ACTIVATION_PREFIX)


class WfiTelemetry:
    """wf-initiation's tracer and metric instruments; every method is a no-op for what is not configured."""

    def __init__(self, *, tracer_provider: Any | None = None, meter_provider: Any | None = None) -> None:
        self.tracer = tracer_provider.get_tracer("wf_initiation") if tracer_provider is not None else None
        self.metrics = _Instruments(meter_provider.get_meter("wf_initiation")) if meter_provider is not None else None

    # -------------------------------------------------------------- from workflow code (never on replay)
    def workflow_event(self, event: str, data: dict[str, Any]) -> None:
        """The extern function the activation calls; ``data`` is plain values."""
        handler = getattr(self, f"_wf_{event}", None)
        if handler is not None:
            handler(**data)

    def _wf_decision(self, carrier: dict[str, str], time_ns: int, attributes: dict[str, Any]) -> None:
        if self.tracer is None:
            return
        span = self.tracer.start_span("wfi.decide", _PROPAGATOR.extract(carrier), attributes=attributes, start_time=time_ns)
        span.end(end_time=time_ns)

    def _wf_dispositions(self, workflow: str, counts: list[tuple[str, str, int]]) -> None:
        if self.metrics is not None:
            for entry, disposition, n in counts:
                self.metrics.dispositions.add(n, {"wfi.workflow": workflow, "wfi.entry": entry, "wfi.disposition": disposition})

    def _wf_errors(self, workflow: str, counts: dict[str, int]) -> None:
        if self.metrics is not None:
            for kind, n in counts.items():
                self.metrics.errors.add(n, {"wfi.workflow": workflow, "wfi.error_kind": kind})

    def _wf_gauges(self, workflow: str, values: dict[str, int]) -> None:
        if self.metrics is not None:
            for name, value in values.items():
                gauge = self.metrics.gauges.get(name)  # a gauge of a newer build than this host's: skipped
                if gauge is not None:
                    gauge.set(value, {"wfi.workflow": workflow})

    # -------------------------------------------------------------- from activities and the client
    @contextmanager
    def start_run(self, carrier: Mapping[str, str] | None, attributes: dict[str, Any]) -> Iterator[None]:
        """Around one run's start: a span under the delivery's trace (or the activity's span)."""
        if self.tracer is None:
            yield
            return
        context, links = None, []
        if carrier:  # the delivery's trace is the parent; the activity's own span (if any) a link
            context = _PROPAGATOR.extract(dict(carrier))
            here = trace.get_current_span().get_span_context()
            links = [trace.Link(here)] if here.is_valid else []
        with self.tracer.start_as_current_span("wfi.start_run", context=context, attributes=attributes, links=links):
            yield

    def run_started(self, workflow: str, entry: str, accepted_at: datetime, scheduled_at: str | None) -> None:
        """A run was started now (not an already-started one): start latency and schedule lag."""
        if self.metrics is None:
            return
        now = datetime.now(UTC)
        attrs = {"wfi.workflow": workflow, "wfi.entry": entry}
        self.metrics.start_latency.record(max(0.0, (now - accepted_at).total_seconds()), attrs)
        if scheduled_at:
            self.metrics.schedule_lag.record((now - datetime.fromisoformat(scheduled_at)).total_seconds(), attrs)

    def poll_done(self, workflow: str, connector: str, seconds: float, items: int | None) -> None:
        """One poll activity attempt: ``items`` is None when it failed."""
        if self.metrics is None:
            return
        attrs = {"wfi.workflow": workflow, "wfi.connector": connector}
        self.metrics.poll_duration.record(seconds, {**attrs, "wfi.outcome": "failed" if items is None else "ok"})
        if items is None:
            self.metrics.poll_failures.add(1, attrs)
        else:
            self.metrics.poll_items.add(items, attrs)

    def acceptance(self, workflow: str, operation: str, seconds: float, ok: bool) -> None:
        """Record how long a delivery took to be answered (``wfi.acceptance.latency``), by operation and outcome."""
        if self.metrics is not None:
            self.metrics.acceptance_latency.record(
                seconds, {"wfi.workflow": workflow, "wfi.operation": operation, "wfi.outcome": "ok" if ok else "error"})


NO_TELEMETRY = WfiTelemetry()


class _Instruments:
    def __init__(self, meter: Any) -> None:
        self.dispositions = meter.create_counter(
            "wfi.dispositions", unit="{disposition}", description="Dispositions of deliveries, poll items and occurrences")
        self.errors = meter.create_counter("wfi.errors", unit="{error}", description="Initiation errors recorded, by kind")
        self.acceptance_latency = meter.create_histogram(
            "wfi.acceptance.latency", unit="s", description="Delivery call until its disposition is durable (client side)")
        self.start_latency = meter.create_histogram(
            "wfi.run.start_latency", unit="s", description="Acceptance until the run's start call returned")
        self.schedule_lag = meter.create_histogram(
            "wfi.schedule.lag", unit="s", description="Intended occurrence instant until the run's start call returned")
        self.poll_duration = meter.create_histogram("wfi.poll.duration", unit="s", description="One poll activity attempt")
        self.poll_items = meter.create_counter("wfi.poll.items", unit="{item}", description="Items returned by polls")
        self.poll_failures = meter.create_counter("wfi.poll.failures", unit="{failure}", description="Failed polls")
        self.gauges = {
            name: meter.create_gauge(name, unit=unit, description=text) for name, unit, text in (
                ("wfi.capacity.fill_percent", "%", "What the activation carries against its capacity; new ids are "
                 "deferred or shed at 100 (docs/limits.md, capacity)"),
                ("wfi.dedup.size", "{id}", "Delivery identities retained for dedup (live and compact)"),
                ("wfi.runs.pending", "{run}", "Admitted runs not started: behind a queue key, overlap or concurrency"),
                ("wfi.runs.in_flight", "{run}", "Runs starting or running"),
                ("wfi.queue.keys", "{key}", "queue_by keys holding runs"),
                ("wfi.runs.throttled", "{run}", "Pending runs waiting for room in the throttle's window"),
                ("wfi.batches.open", "{batch}", "Open batches"),
            )
        }


# ---------------------------------------------------------------------------- interceptors
class ActivationTracingInterceptor(TracingInterceptor):
    """The SDK's ``TracingInterceptor`` (what ``WfiPlugin(tracer_provider=...)`` adds), except for the
    activation workflow's own activities that carry no trace context: those run without a
    ``RunActivity`` span. An activation started without a trace (``wfi activate``) schedules its
    activities with none, and the SDK would make each one the root of a trace of its own; with one,
    they stay children of the activation's trace. A run's start still has its ``wfi.start_run``
    span (under the delivery's trace, see :meth:`WfiTelemetry.start_run`)."""

    def intercept_activity(
        self, next: temporalio.worker.ActivityInboundInterceptor,
    ) -> temporalio.worker.ActivityInboundInterceptor:
        """The SDK's activity tracing, skipped for the activation's activities that carry no trace."""
        return _UntracedWhenAlone(next, super().intercept_activity(next))


class _UntracedWhenAlone(temporalio.worker.ActivityInboundInterceptor):
    def __init__(self, plain: temporalio.worker.ActivityInboundInterceptor,
                 traced: temporalio.worker.ActivityInboundInterceptor) -> None:
        super().__init__(traced)
        self._plain = plain

    async def execute_activity(self, input: temporalio.worker.ExecuteActivityInput) -> Any:
        if temporalio.activity.info().workflow_type == ACTIVATION_WORKFLOW and TRACE_HEADER not in input.headers:
            return await self._plain.execute_activity(input)
        return await super().execute_activity(input)


class WfiTelemetryInterceptor(temporalio.client.Interceptor, temporalio.worker.Interceptor):
    """Client and worker interceptor feeding :class:`WfiTelemetry` (added by ``WfiPlugin``)."""

    def __init__(self, telemetry: WfiTelemetry) -> None:
        self.telemetry = telemetry

    def intercept_client(self, next: temporalio.client.OutboundInterceptor) -> temporalio.client.OutboundInterceptor:
        """Times deliveries sent through this client (acceptance latency)."""
        return _ClientOutbound(next, self.telemetry)

    def intercept_activity(
        self, next: temporalio.worker.ActivityInboundInterceptor,
    ) -> temporalio.worker.ActivityInboundInterceptor:
        """Measures poll activities (duration, items, failures)."""
        return _ActivityInbound(next, self.telemetry)

    def workflow_interceptor_class(
        self, input: temporalio.worker.WorkflowInterceptorClassInput,
    ) -> type[temporalio.worker.WorkflowInboundInterceptor]:
        """Gives the activation workflow its replay-safe metrics channel (an extern function)."""
        input.unsafe_extern_functions[EXTERN] = self.telemetry.workflow_event
        return _WorkflowInbound


class _ClientOutbound(temporalio.client.OutboundInterceptor):
    def __init__(self, next: temporalio.client.OutboundInterceptor, telemetry: WfiTelemetry) -> None:
        super().__init__(next)
        self._telemetry = telemetry

    async def start_workflow_update(self, input: temporalio.client.StartWorkflowUpdateInput) -> Any:
        if input.update not in DELIVERY_UPDATES:
            return await super().start_workflow_update(input)
        with self._timed(input.id, input.update):
            return await super().start_workflow_update(input)

    async def signal_workflow(self, input: temporalio.client.SignalWorkflowInput) -> None:
        if input.signal != DELIVERY_SIGNAL:
            return await super().signal_workflow(input)
        with self._timed(input.id, input.signal):
            await super().signal_workflow(input)

    @contextmanager
    def _timed(self, workflow_id: str, operation: str) -> Iterator[None]:
        started, ok = time.monotonic(), False
        try:
            yield
            ok = True
        finally:
            self._telemetry.acceptance(workflow_name(workflow_id), operation, time.monotonic() - started, ok)


class _ActivityInbound(temporalio.worker.ActivityInboundInterceptor):
    def __init__(self, next: temporalio.worker.ActivityInboundInterceptor, telemetry: WfiTelemetry) -> None:
        super().__init__(next)
        self._telemetry = telemetry

    async def execute_activity(self, input: temporalio.worker.ExecuteActivityInput) -> Any:
        info = temporalio.activity.info()
        if not info.activity_type.startswith(POLL_PREFIX):
            return await super().execute_activity(input)
        started, items = time.monotonic(), None
        try:
            result = await super().execute_activity(input)
            items = len(getattr(result, "items", None) or [])
            return result
        finally:
            self._telemetry.poll_done(workflow_name(info.workflow_id or ""), info.activity_type.removeprefix(POLL_PREFIX),
                                      time.monotonic() - started, items)


class _WorkflowInbound(temporalio.worker.WorkflowInboundInterceptor):
    """Makes the caller's trace context visible to update and signal handlers (:func:`current_carrier`)."""

    async def handle_signal(self, input: temporalio.worker.HandleSignalInput) -> None:
        token = _carrier.set(_decode(input.headers))
        try:
            await super().handle_signal(input)
        finally:
            _carrier.reset(token)

    async def handle_update_handler(self, input: temporalio.worker.HandleUpdateInput) -> Any:
        token = _carrier.set(_decode(input.headers))
        try:
            return await super().handle_update_handler(input)
        finally:
            _carrier.reset(token)


def _decode(headers: Mapping[str, Any]) -> dict[str, str] | None:
    payload = headers.get(TRACE_HEADER)
    if payload is None:
        return None
    try:
        carrier = temporalio.converter.PayloadConverter.default.from_payloads([payload])[0]
    except Exception:  # a header we cannot read only loses the trace link, never the delivery
        return None
    return {str(k): str(v) for k, v in carrier.items()} if isinstance(carrier, dict) and carrier else None
