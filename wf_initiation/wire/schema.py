"""The activation's wire contract as data: every handler a sender, an operator or a shard calls, with the
JSON Schema of its arguments and its result (docs/wire.md; ``wfi wire schema [NAME]`` prints them).

The schemas are generated from the wire models (pydantic), so they are what the worker accepts. A
change of shape is a change of the contract: it needs a new :data:`WIRE_VERSION`, a line in
docs/wire.md's version list, and its digest in :data:`SHAPES` (``tests/core/test_wire_schema.py``
fails until all three are done). Names never change (histories carry them).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model

from wf_initiation.core.engine import EVENT_RECORD_FIELDS, DeliveryResult
from wf_initiation.core.runinput import RunInput

from . import names
from ._activation import (
    ActivateResult,
    DeactivateRequest,
    DeactivateResult,
    DeliveryRequest,
    OperatorResult,
)
from ._operator import OperatorRequest

WIRE_VERSION = 2
"""The contract's version: shapes of every argument and result below, as of docs/wire.md's list."""
SHAPES = {1: "d5bed65622692b0e", 2: "be8f8d2cfd60f6f4"}
"""The digest of :func:`contract`'s handlers for each version (what the test compares)."""

Kind = Literal["update", "signal", "query", "run input"]
Audience = Literal["senders", "operators", "shards", "runs"]


DeliveryRecord = create_model(  # type: ignore[call-overload]  # an EventRecord's fields (a dataclass) and the run's status
    "DeliveryRecord",
    __doc__="The ``delivery`` query's answer: the dedup entry of one delivery id, or null when none is held.",
    __config__=ConfigDict(extra="allow"),
    __module__=__name__,
    **{name: (info.annotation, info) for name, info in EVENT_RECORD_FIELDS.items()},
    run_status=(str | None, Field(default=None, description="The run's status while the activation holds it; "
                                  "`terminal` once it ended and was forgotten; null when the event started no run.")),
)


class KeptSignal(BaseModel):
    """The ``delivery`` query's answer for a signalled delivery the activation keeps by reference to its
    signal in history: ``waiting_signal`` (waiting for room, taken in arrival order) or ``deferred_signal``
    (listed by the ``deferred_signal_list`` query; ``wfi deliver --redrive`` delivers it again)."""

    model_config = ConfigDict(extra="allow")
    entry: str
    delivery_id: str
    disposition: Literal["deferred_signal", "waiting_signal"]
    digest: str
    kept_at: str | None = Field(description="When it was deferred or carried waiting (null: waiting in memory).")
    detail: str | None = Field(default=None, description="Why it was deferred.")
    signal: dict[str, Any] = Field(description="`workflow_run_id`: the activation run whose history holds the "
                                   "signal; `bytes`: its payload's size.")
    activation_id: str


class Object(BaseModel):
    """A JSON object whose keys docs/wire.md describes (state and summary views: for people and tools,
    not a contract of every key)."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True)
class Handler:
    """One handler of the activation workflow (or the run input every run workflow receives)."""

    name: str
    kind: Kind
    audience: Audience
    args: tuple[tuple[str, Any], ...]
    result: Any
    summary: str
    idempotent: str


HANDLERS: tuple[Handler, ...] = (
    Handler(names.DELIVER_UPDATE, "update", "senders", (("request", DeliveryRequest),), DeliveryResult,
            "Deliver one event; answered once its disposition is durable.",
            "by update id within one run of the activation; across runs and restarts by the delivery id "
            "(a redelivery is `duplicate`)"),
    Handler(names.DELIVER_MANY_UPDATE, "update", "senders", (("requests", list[DeliveryRequest]),),
            list[DeliveryResult], "Deliver up to 500 events (1 MiB) in one update; one answer per event, in order.",
            "as `deliver`, per event"),
    Handler(names.DELIVER_SIGNAL, "signal", "senders", (("request", DeliveryRequest),), None,
            "Deliver one event by signal: in the activation's history once the signal call returns, kept until "
            "disposed or listed as deferred (docs/webhooks.md); its disposition is read with the `delivery` query.",
            "by the delivery id (a signal has no answer)"),
    Handler(names.DELIVERY_QUERY, "query", "senders", (("entry", str), ("delivery_id", str)),
            DeliveryRecord | KeptSignal | None, "What the activation holds of one delivery id.", "a query changes nothing"),
    Handler(names.DEFERRED_SIGNALS_QUERY, "query", "operators", (("offset", int), ("limit", int)), Object,
            "The signalled deliveries deferred and listed, from `offset`, at most `limit` (500): "
            "`{total, offset, unlisted, signals: [{entry, delivery_id, digest, size, run_id, at, reason}]}`.",
            "a query changes nothing"),
    Handler(names.REDRIVABLE_QUERY, "query", "operators", (("offset", int), ("limit", int)), Object,
            "Every event kept for re-drive, by number, from `offset`, at most `limit` (500): `{total, offset, let_go, "
            "events: [{number, kind, entry, delivery_id, at, kept_until, reason, bytes, tries, digest, run_key, events, "
            "run_id}]}` (no payloads).", "a query changes nothing"),
    Handler(names.OPERATE_UPDATE, "update", "operators", (("request", OperatorRequest),), OperatorResult,
            "An operator action (pause, resume, backfill, set_cursor, admit_pending, redrive, ...).",
            "by `action_id`, also across continue-as-new"),
    Handler(names.DEACTIVATE_UPDATE, "update", "operators", (("request", DeactivateRequest),), DeactivateResult,
            "Deactivate: settle queued and running runs, then complete with the whole state.",
            "by `action_id`, also across continue-as-new"),
    Handler(names.ACTIVATE_UPDATE, "update", "operators", (("spec", Object),), ActivateResult,
            "Bind a new activation spec (sent by `wfi activate`; its shape is the package's ActivationSpec).",
            "by the spec: the same spec again is `current`"),
    Handler(names.STATE_QUERY, "query", "operators", (), Object, "The whole state view (bounded to 2 MiB).",
            "a query changes nothing"),
    Handler(names.SUMMARY_QUERY, "query", "operators", (), Object, "The short summary (`wfi state --summary`).",
            "a query changes nothing"),
    Handler(names.EVENTS_QUERY, "query", "operators", (("after_seq", int), ("limit", int)), list[Object],
            "Dedup entries in acceptance order after `after_seq`, at most `limit` (500).", "a query changes nothing"),
    Handler(names.ROUTING_QUERY, "query", "shards", (), Object,
            "How deliveries are spread over shards: `{shards, entries}` (WfiClient reads it).", "a query changes nothing"),
    Handler("wfi.run_input", "run input", "runs", (("input", RunInput),), None,
            "The one argument every run workflow receives.", "the run's workflow id is its run key"),
)


def _schema(annotation: Any) -> dict[str, Any]:
    if annotation is None:
        return {"type": "null"}
    return TypeAdapter(annotation).json_schema()


def handler_schema(handler: Handler) -> dict[str, Any]:
    """One handler as JSON: its kind, who calls it, its arguments (positional, in order) and result."""
    return {
        "name": handler.name, "kind": handler.kind, "audience": handler.audience, "summary": handler.summary,
        "idempotent": handler.idempotent,
        "args": [{"name": arg, "schema": TypeAdapter(tp).json_schema()} for arg, tp in handler.args],
        "result": _schema(handler.result),
    }


def contract() -> dict[str, Any]:
    """The whole contract: its version and every handler's schema."""
    return {"version": WIRE_VERSION, "handlers": {h.name: handler_schema(h) for h in HANDLERS}}


def shape_digest(document: dict[str, Any] | None = None) -> str:
    """A digest of the handlers' shapes (names, kinds, argument and result schemas), not of their prose
    (descriptions and titles are left out: rewording a docstring changes no shape)."""
    handlers = (document or contract())["handlers"]
    shapes = {name: _shape({k: h[k] for k in ("kind", "args", "result")}) for name, h in handlers.items()}
    return hashlib.sha256(json.dumps(shapes, sort_keys=True).encode()).hexdigest()[:16]


def _shape(value: Any, names: bool = False) -> Any:
    """``value`` without its prose keywords; ``names``: a mapping of field or definition names (kept)."""
    if isinstance(value, dict):
        return {k: _shape(v, k in _NAMED) for k, v in value.items() if names or k not in _PROSE}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return value


_PROSE = frozenset({"description", "title", "examples"})
_NAMED = frozenset({"properties", "$defs", "patternProperties"})


def find(name: str) -> Handler:
    """The handler called ``name``; raises ``KeyError`` naming those there are."""
    for handler in HANDLERS:
        if handler.name == name:
            return handler
    raise KeyError(f"no handler {name!r} in the wire contract; there are: {', '.join(h.name for h in HANDLERS)}")


__all__ = ["HANDLERS", "SHAPES", "WIRE_VERSION", "DeliveryRecord", "Handler", "KeptSignal", "contract", "find", "handler_schema",
           "shape_digest"]
