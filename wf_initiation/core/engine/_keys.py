"""Identities of events and runs: payload digests, dedup keys, run keys (pure functions).

The lowest layer of the engine with :mod:`._types`: everything above names events and runs
through these, so a key is computed one way only.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .._expr import ExpressionFault, canonical_key
from ..activation import EntrySpec
from ..sharding import delivery_identity, value_at


def canonical_text(payload: Any) -> str:
    """Exactly :func:`canonical_key` (the text digests are taken of), computed without
    ``isinstance`` for plain JSON types: inside the workflow sandbox that builtin is wrapped and costs
    tens of microseconds a call, which made the digest of a large payload take seconds."""
    return json.dumps(_normalised(payload), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _normalised(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise ExpressionFault("key value is not a JSON value: NaN or infinity")
        return int(value) if value.is_integer() else value
    if kind is dict:
        return {k if type(k) is str else str(k): _normalised(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [_normalised(v) for v in value]
    return json.loads(canonical_key(value))  # anything else: the general rules (and their errors)


def entry_delivery_id(entry: EntrySpec, payload: Any) -> Any:
    """The value at the manifest's ``delivery_id`` path, or None."""
    return value_at(entry.delivery_id_path, payload)


def identity(entry: EntrySpec, payload: Any) -> str | None:
    """The delivery id at the manifest's path, as text; None when absent or not a JSON value (the
    same text routes a delivery to its shard: core.sharding)."""
    return delivery_identity(entry.delivery_id_path, payload)


def payload_digest(payload: Any) -> str:
    """Digest of a payload under JSON-value equality (key order irrelevant, 1 == 1.0)."""
    return digest_and_size(payload)[0]


def digest_and_size(payload: Any) -> tuple[str, int]:
    """:func:`payload_digest` and the payload's size in bytes as canonical JSON, from one encoding."""
    text = canonical_text(payload).encode()
    return hashlib.sha256(text).hexdigest()[:16], len(text)


def identity_text(value: Any) -> str:
    """A delivery id as text: a string as it is, any other JSON value canonically."""
    return value if isinstance(value, str) else canonical_key(value)


def event_key(entry: str, ident: str) -> str:
    """Dedup key of one event: its entry and its identity."""
    return f"{entry}\x1f{ident}"


def run_ident(ident: str) -> str:
    """The identity part of a run key: the event identity when it is a short, printable id, else its hash."""
    safe = ident.replace("/", "_")
    if len(safe) <= 80 and safe.isprintable() and " " not in safe:
        return safe
    return "h" + hashlib.sha256(ident.encode()).hexdigest()[:24]
