"""Identities of events and runs: payload digests, dedup keys, run keys (pure functions).

The lowest layer of the engine with :mod:`._types`: everything above names events and runs
through these, so a key is computed one way only.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .._expr import canonical_key
from ._intake import canonical_text


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
