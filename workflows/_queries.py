"""What the activation shows outsiders (a mixin of ``ActivationWorkflow``): its queries (full state,
routing, summary, dedup entries, deferred signals, one delivery) and what Temporal's UI and
visibility see (the operator page as current details, the search attributes).

Query results stay under the gRPC message limit whatever the state holds (core.limits.fit_to_bytes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributePair, TypedSearchAttributes

with workflow.unsafe.imports_passed_through():
    from wf_initiation.activities.signals import DEFERRED_SIGNALS_QUERY
    from wf_initiation.core.activation import ActivationSpec
    from wf_initiation.core.engine import Engine
    from wf_initiation.core.limits import fit_to_bytes
    from wf_initiation.wire import DELIVERY_QUERY, EVENTS_QUERY, REDRIVABLE_QUERY, ROUTING_QUERY, STATE_QUERY, SUMMARY_QUERY
    from wf_initiation.wire import search_attributes as sa

    from ._inbox import Inbox
    from ._telemetry import ActivationTelemetry


class Queries:
    """Handlers of ``ActivationWorkflow``; the state they use is the workflow's."""

    _engine: Engine
    _spec: ActivationSpec
    _shard: int
    _inbox: Inbox | None
    _telemetry: ActivationTelemetry

    _routing_spec: Callable[[], ActivationSpec]

    @workflow.query(name=STATE_QUERY)
    def state(self) -> dict[str, Any]:
        return fit_to_bytes(self._engine.full_state())

    @workflow.query(name=ROUTING_QUERY)
    def routing(self) -> dict[str, Any]:
        """How this activation's deliveries are spread over its shards (core.sharding; wf_initiation/_shards.py)."""
        spec, split = self._routing_spec(), self._engine.split
        return {"shards": spec.shards,
                "entries": {e.name: e.delivery_id_path for e in spec.entries if e.kind == "external"},
                **({"split": split.model_dump(mode="json")} if split is not None else {})}

    @workflow.query(name=SUMMARY_QUERY)
    def summary_query(self) -> dict[str, Any]:
        summary = self._engine.summary()
        if self._spec.shards > 1:
            summary["shard"], summary["shards"] = self._shard, self._spec.shards
        if self._engine.split is not None:
            summary["split"] = self._engine.split.model_dump(mode="json")
        lanes = self._engine.lanes_summary()
        if lanes is not None:
            summary["lanes"] = lanes
        if self._inbox is not None:  # deliveries the workflow holds in memory, not yet taken
            summary["inbox"] = {"queued": len(self._inbox), "waiting_signals": self._inbox.waiting_signals}
        return fit_to_bytes(summary)

    @workflow.query(name=EVENTS_QUERY)
    def events(self, after_seq: int = 0, limit: int = 500) -> list[dict[str, Any]]:
        return self._engine.events(after_seq, limit)

    @workflow.query(name=DEFERRED_SIGNALS_QUERY)
    def deferred_signals(self, offset: int = 0, limit: int = 500) -> dict[str, Any]:
        """The signalled deliveries deferred and listed, a page at a time (workflows/_carried.py)."""
        return fit_to_bytes(self._engine.deferred_signals(offset, limit))

    @workflow.query(name=REDRIVABLE_QUERY)
    def redrivable(self, offset: int = 0, limit: int = 500) -> dict[str, Any]:
        """The events kept for re-drive, a page at a time (core/engine/_kept.py)."""
        return fit_to_bytes(self._engine.redrivable(offset, limit))

    @workflow.query(name=DELIVERY_QUERY)
    def delivery(self, entry: str, delivery_id: str) -> dict[str, Any] | None:
        record = self._engine.delivery(entry, delivery_id)
        if record is None and self._inbox is not None and self._inbox.waiting_signals:  # still waiting in memory?
            return self._engine.waiting_record(entry, delivery_id, self._inbox.kept())
        return record

    def _publish(self, initial: bool = False) -> None:
        workflow.set_current_details(self._engine.markdown())
        self._telemetry.observe(self._engine)
        status = self._engine.status()
        if initial or status != getattr(self, "_published_status", None):
            self._published_status = status
            spec = self._engine.spec
            # TypedSearchAttributes is a collection of (key, value) pairs the SDK takes as updates at run
            # time; its annotation names only mappings and SearchAttributeUpdate sequences.
            workflow.upsert_search_attributes(TypedSearchAttributes([  # type: ignore[arg-type]
                SearchAttributePair(sa.WFI_WORKFLOW, spec.workflow),
                SearchAttributePair(sa.WFI_ACTIVATION, spec.activation_id),
                SearchAttributePair(sa.WFI_STATE, status),
                SearchAttributePair(sa.WFI_TRIGGERS, [e.connector for e in spec.entries]),
            ]))
