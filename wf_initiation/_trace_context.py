"""The caller's trace context inside an activation's update and signal handlers.

Kept apart from :mod:`wf_initiation.telemetry` (OpenTelemetry, the worker interceptors) so that
workflow code and the CLI import only this: a context variable the worker's interceptor sets around
each handler and the activation reads (passed through the workflow sandbox: both must see one
variable)."""

from __future__ import annotations

from contextvars import ContextVar

EXTERN = "__wfi_telemetry"  # the extern function through which workflow code reports (never on replay)
TRACE_HEADER = "_tracer-data"  # the header the SDK's TracingInterceptor / OpenTelemetryInterceptor use

CARRIER: ContextVar[dict[str, str] | None] = ContextVar("wfi_trace_carrier", default=None)


def current_carrier() -> dict[str, str] | None:
    """The trace context of the update or signal being handled (None without a traced caller)."""
    return CARRIER.get()
