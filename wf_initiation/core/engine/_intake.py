"""What the engine refuses at intake, before any rule runs (issue 11): payloads it cannot carry.

Called by the acceptance pipeline (``_pipeline``). Every delivery, poll item and lifecycle event passes :func:`payload_problem` first: a payload that
is not a plain JSON value within :mod:`core.limits` (too deep, NaN or infinity, an integer of
thousands of digits, a lone surrogate, too many bytes, an over-long delivery id) is ``invalid``
with the reason, so nothing downstream (digest, expressions, the data converter, the carried
state) ever meets it. Then :func:`defer_reason`: while the activation holds its budget of payload
bytes for runs not started yet, or cannot carry its state across continue-as-new, a new event is
``deferred`` (not consumed; deliver it again later) instead of growing the state past what
Temporal accepts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..activation import EntrySpec
from ..limits import (
    LEGACY_INT_DIGITS,
    MAX_DELIVERY_BYTES,
    MAX_DELIVERY_ID_CHARS,
    MAX_HELD_BYTES,
    clip,
    json_problem,
    json_size,
    retained_id,
)
from ._types import DeliveryResult, Disposition, SignalRun

if TYPE_CHECKING:
    from ._runs import Runs

# Before the budgets (an unpatched run) only what always failed the workflow task is refused; a
# payload nested this deep never reached a handler through the data converter.
_LEGACY_DEPTH = 10_000


def payload_problem(engine: "Runs", payload: Any, delivery_id: str | None) -> str | None:
    """Why the engine cannot take this payload at all, or None (then the manifest schema decides)."""
    problem = (json_problem(payload) if engine.bounded
               else json_problem(payload, max_depth=_LEGACY_DEPTH, max_int_digits=LEGACY_INT_DIGITS))
    if problem is not None or not engine.bounded:
        return problem
    if delivery_id is not None and len(delivery_id) > MAX_DELIVERY_ID_CHARS:
        return (f"the delivery id has {len(delivery_id)} characters; the limit is {MAX_DELIVERY_ID_CHARS}: "
                "use a shorter id (e.g. a hash of it)")
    return None


def size_problem(engine: "Runs", size: int) -> str | None:
    """Why a payload of ``size`` bytes (canonical JSON) is too large to take, or None."""
    if engine.bounded and size > MAX_DELIVERY_BYTES:
        return (f"the payload is {size} bytes; the limit is {MAX_DELIVERY_BYTES}: send a reference "
                "(URL, object key) instead of the content")
    return None


def held_bytes(engine: "Runs") -> int:
    """Payload bytes held for runs not started yet: pending runs, open batches, a held poll item,
    subscription deliveries not confirmed. Runs being started are not counted: their inputs leave
    the state within a task or two."""
    state = engine.state
    total = engine.pending_bytes + engine.batch_bytes
    total += sum(json_size(p.held.payload) for p in state.polls.values() if p.held is not None)
    total += sum(json_size(c.payload) for c in state.unacked.values() if isinstance(c, SignalRun))
    return total


def defer_reason(engine: "Runs", size: int) -> str | None:
    """Why a new event of ``size`` payload bytes must wait, or None."""
    if not engine.bounded:
        return None
    if engine.carry_blocked is not None:
        return engine.carry_blocked
    held = held_bytes(engine)
    if held + size > MAX_HELD_BYTES:
        return (f"the activation holds {held} bytes of payloads for runs not started yet; with this one "
                f"({size} bytes) it would pass its budget of {MAX_HELD_BYTES}: deliver it again later")
    return None


def deferred(engine: "Runs", entry: EntrySpec, delivery_id: str | None, reason: str, now: Any, *,
             signalled: bool = False) -> DeliveryResult:
    """Record a deferred event: nothing consumed, no run; the sender delivers it again later.

    A signalled one is recorded apart (``deferred_signal``): its sender was told it is durable and
    hears nothing, so the operator is shown it, with what redelivering it needs (entry, id)."""
    engine.count("deferred")
    kept = retained_id(delivery_id)
    if signalled:
        engine.count("deferred_signals")
        engine.record_error(now, "deferred_signal", f"signalled delivery {kept!r} of entry {entry.name!r} was deferred "
                            f"and not run ({reason}); its sender was told it is durable: deliver it again "
                            "(by update or HTTP, which answer deferred while the activation is under pressure)",
                            entry.name, kept)
    else:
        engine.record_error(now, "deferred", f"delivery {kept!r} deferred: {reason}", entry.name, kept)
    return DeliveryResult(entry=entry.name, delivery_id=kept, disposition=Disposition.DEFERRED,
                          message=clip(reason), activation_id=engine.spec.activation_id)


def undecodable(engine: "Runs", problem: str, now: Any) -> DeliveryResult:
    """A delivery whose argument could not even be decoded: ``invalid``, recorded without identity."""
    engine.count("deliveries")
    engine.count("invalid")
    engine.record_error(now, "invalid", f"a delivery was refused before validation: {problem}")
    return DeliveryResult(entry=None, delivery_id=None, disposition=Disposition.INVALID, message=clip(problem),
                          activation_id=engine.spec.activation_id)
