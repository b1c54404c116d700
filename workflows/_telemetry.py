"""Replay-safe telemetry of one activation (workflow side; the host side is wf_initiation.telemetry).

The activation calls three hooks: :meth:`ActivationTelemetry.delivered` in its delivery handlers,
:meth:`ActivationTelemetry.carrier` when it starts runs, :meth:`ActivationTelemetry.observe` after
every step of its loop. Nothing leaves the workflow while it replays (``is_replaying``), and what is
counted is derived from the engine state, so a replay or a retried workflow task never counts twice.
Without ``WfiPlugin(tracer_provider=/meter_provider=)`` the extern function is absent and only the
(tiny) bookkeeping runs.

Trace: the caller's context (header of the delivery update/signal) is kept per admitted run key
until the run is started, so the start activity opens its span in the delivery's trace. The map is
in memory: a replay rebuilds it (the handlers run again with the same headers); a continue-as-new
drops it, and runs started after that start a trace of their own (docs/observability.md).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from wf_initiation._trace_context import EXTERN
    from wf_initiation.core.engine import NOT_RETAINED, DeliveryResult, Disposition, Engine

MAX_CARRIERS = 10_000
_ADMITTED = frozenset({Disposition.ACCEPTED, Disposition.QUEUED, Disposition.BATCHED})


class TraceCarriers:
    """Trace context of the delivery that admitted each run, until the run starts (bounded)."""

    def __init__(self, limit: int = MAX_CARRIERS) -> None:
        self._limit = limit
        self._by_run: dict[str, dict[str, str]] = {}

    def __len__(self) -> int:
        return len(self._by_run)

    def keep(self, run_key: str, carrier: dict[str, str]) -> bool:
        """Remember ``carrier`` for ``run_key`` (the first one wins: a batch joins its first event's trace)."""
        if run_key in self._by_run or len(self._by_run) >= self._limit:
            return False
        self._by_run[run_key] = carrier
        return True

    def take(self, run_key: str) -> dict[str, str] | None:
        return self._by_run.pop(run_key, None)


class ActivationTelemetry:
    def __init__(self, engine: Engine) -> None:
        self._send: Any = workflow.extern_functions().get(EXTERN)
        self._seq = engine.acceptance_seq  # dispositions up to here were counted by an earlier run
        self._errors = engine.error_counts()
        self._carriers = TraceCarriers()
        self._gauges: dict[str, int] = {}

    def _live(self) -> bool:
        return self._send is not None and not workflow.unsafe.is_replaying()

    def delivered(self, engine: Engine, results: list[DeliveryResult], carrier: dict[str, str] | None) -> None:
        """After the engine decided: keep the trace of the delivering handler (``carrier``, read in the
        handler with :func:`current_carrier`: a queued delivery is taken in another task) for the admitted runs."""
        if carrier:
            for r in results:
                if r.run_key and r.disposition in _ADMITTED:
                    self._carriers.keep(r.run_key, carrier)
        if not self._live():
            return
        unretained = Counter((r.entry or "", r.disposition.value) for r in results if r.disposition in NOT_RETAINED)
        if unretained:
            self._send("dispositions", {"workflow": engine.spec.workflow, "counts": [(e, d, n) for (e, d), n in unretained.items()]})
        if carrier:
            self._send("decision", {"carrier": carrier, "time_ns": workflow.time_ns(), "attributes": _decision(engine, results)})

    def carrier(self, run_key: str) -> dict[str, str] | None:
        """The trace context a run's start joins (once)."""
        return self._carriers.take(run_key)

    def observe(self, engine: Engine) -> None:
        """After a step of the loop: count new retained dispositions and errors, update gauges."""
        counts = self._new_dispositions(engine)
        errors = self._new_errors(engine)
        if not self._live():
            return
        workflow_name = engine.spec.workflow
        if counts:
            self._send("dispositions", {"workflow": workflow_name, "counts": [(e, d, n) for (e, d), n in counts.items()]})
        if errors:
            self._send("errors", {"workflow": workflow_name, "counts": errors})
        gauges = engine.gauges()
        if gauges != self._gauges:
            self._gauges = gauges
            self._send("gauges", {"workflow": workflow_name, "values": gauges})

    def _new_dispositions(self, engine: Engine) -> Counter[tuple[str, str]]:
        counts = engine.dispositions_since(self._seq)
        self._seq = engine.acceptance_seq
        return counts

    def _new_errors(self, engine: Engine) -> dict[str, int]:
        now = engine.error_counts()
        delta = {k: n - self._errors.get(k, 0) for k, n in now.items() if n > self._errors.get(k, 0)}
        if delta:
            self._errors = now
        return delta


def _decision(engine: Engine, results: list[DeliveryResult]) -> dict[str, Any]:
    attributes: dict[str, Any] = {"wfi.workflow": engine.spec.workflow, "wfi.activation_id": engine.spec.activation_id,
                                  "wfi.deliveries": len(results)}
    if len(results) == 1:
        r = results[0]
        attributes.update({"wfi.entry": r.entry or "", "wfi.delivery_id": r.delivery_id or "",
                           "wfi.disposition": r.disposition.value, "wfi.run_key": r.run_key or ""})
    else:
        for disposition, n in Counter(r.disposition.value for r in results).items():
            attributes[f"wfi.dispositions.{disposition}"] = n
    return attributes

