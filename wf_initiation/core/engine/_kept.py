"""Events kept for re-drive: what is kept, for how long, and how an operator names them (pure functions of the state).

An event that did not run because of a cause an operator can fix is kept with what it takes to
offer it again (``_redrive``): an invalid delivery and a quarantined poll item with their payloads,
a start fault with its run as admitted. Deferred signals are kept apart, by reference to their
signals in history (``EngineState.signals_deferred``); both share one numbering, so that one list
(``views``) and one selection (:func:`selects`) cover every kind.

Bounded (``core.limits``): at most ``MAX_REDRIVE_KEPT`` events and ``MAX_REDRIVE_KEPT_BYTES`` of
payloads, the oldest let go first to make room, each let go a ``dedup_retention`` after it was kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from ..limits import BYTES_PER_KEPT_EVENT, MAX_REDRIVE_KEPT, MAX_REDRIVE_KEPT_BYTES
from ._types import EngineState, KeptEvent, SignalRef


def next_number(state: EngineState) -> int:
    state.redrive_seq += 1
    return state.redrive_seq


def keep(state: EngineState, event: KeptEvent) -> bool:
    """Keep ``event`` (numbered by :func:`next_number`), letting the oldest go to stay within the
    bounds; False when it alone is over the byte bound (then nothing is kept: counted)."""
    if event.size > MAX_REDRIVE_KEPT_BYTES:
        _count(state, "redrive_not_kept")
        return False
    kept = state.redrive_kept
    kept.append(event)
    held = kept_bytes(state)
    while len(kept) > MAX_REDRIVE_KEPT or held > MAX_REDRIVE_KEPT_BYTES:
        held -= kept.pop(0).size
        _count(state, "redrive_evicted")
    return True


def kept_bytes(state: EngineState) -> int:
    return sum(e.size for e in state.redrive_kept)


def estimated_bytes(state: EngineState) -> int:
    """What the kept events add to the carried state (the capacity estimate, ``_intake``)."""
    return kept_bytes(state) + len(state.redrive_kept) * BYTES_PER_KEPT_EVENT if state.redrive_kept else 0


def expire(state: EngineState, now: datetime, retention: timedelta) -> int:
    """Let go of the events kept a ``retention`` ago or longer (kept in time order)."""
    kept = state.redrive_kept
    n = 0
    while n < len(kept) and kept[n].at + retention <= now:
        n += 1
    if n:
        del kept[:n]
        _count(state, "redrive_expired", n)
    return n


def remove(state: EngineState, number: int) -> None:
    state.redrive_kept[:] = [e for e in state.redrive_kept if e.number != number]


def find(state: EngineState, number: int) -> KeptEvent | None:
    return next((e for e in state.redrive_kept if e.number == number), None)


def _count(state: EngineState, name: str, n: int = 1) -> None:
    state.counters[name] = state.counters.get(name, 0) + n


# ---------------------------------------------------------------------------- the list and the selection
def views(state: EngineState, retention: timedelta) -> list[dict[str, Any]]:
    """Every event kept for re-drive as the operator sees it, by number (oldest first); no payloads."""
    out = [kept_view(e, retention) for e in state.redrive_kept]
    out += [signal_view(ref) for ref in state.signals_deferred.values()]
    return sorted(out, key=lambda v: v["number"])


def kept_view(event: KeptEvent, retention: timedelta) -> dict[str, Any]:
    run = event.run
    return {"number": event.number, "kind": event.kind, "entry": event.entry, "delivery_id": event.delivery_id,
            "at": event.at.isoformat(), "kept_until": (event.at + retention).isoformat(), "reason": event.reason,
            "bytes": event.size, "tries": event.tries, "digest": event.digest,
            "run_key": run.run_key if run is not None else None, "events": len(run.event_keys) if run is not None else 1}


def signal_view(ref: SignalRef) -> dict[str, Any]:
    """A deferred signal: kept while listed (its payload in the history of ``run_id``)."""
    return {"number": ref.number, "kind": "deferred_signal", "entry": ref.entry, "delivery_id": ref.delivery_id,
            "at": ref.at.isoformat(), "kept_until": None, "reason": ref.reason, "bytes": ref.size, "tries": 0,
            "digest": ref.digest, "run_id": ref.run_id, "run_key": None, "events": 1}


def selects(view: Mapping[str, Any], *, kind: str | None = None, entry: str | None = None,
            delivery_id: str | None = None, first: int | None = None, last: int | None = None) -> bool:
    """Whether a re-drive naming these (None: any) selects the listed event ``view``: the one place
    the engine and the client decide it."""
    number = view["number"]
    return ((kind is None or view["kind"] == kind) and (entry is None or view["entry"] == entry)
            and (delivery_id is None or view["delivery_id"] == delivery_id)
            and (first is None or number >= first) and (last is None or number <= last))
