"""What the engine refuses at intake, before any rule runs: payloads it cannot carry, and deliveries
that arrived without the team's payload codec (:func:`unencoded`, ``core.unencoded``).

Called by the acceptance pipeline (``_pipeline``). Every delivery, poll item and lifecycle event passes :func:`payload_problem` first: a payload that
is not a plain JSON value within :mod:`core.limits` (too deep, NaN or infinity, an integer of
thousands of digits, a lone surrogate, too many bytes, an over-long delivery id) is ``invalid``
with the reason, so nothing downstream (digest, expressions, the data converter, the carried
state) ever meets it. Then :func:`defer_reason`: while the activation holds its budget of payload
bytes for runs not started yet, or cannot carry its state across continue-as-new, a new event is
``deferred`` (not consumed; deliver it again later) instead of growing the state past what
Temporal accepts. And :func:`capacity_reason`: what the activation carries (retained delivery
ids, payloads held) is kept within its capacity, so continue-as-new always fits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import unencoded as _unencoded
from ..activation import ActivationSpec, EntrySpec
from ..limits import (
    BYTES_PER_LIVE_RECORD,
    BYTES_PER_RETIRED_ID,
    BYTES_PER_SIGNAL_REF,
    BYTES_PER_THROTTLE_MARK,
    CAPACITY_BYTES,
    CAPACITY_WARNING,
    LEGACY_INT_DIGITS,
    MAX_DEFERRED_SIGNALS,
    MAX_DELIVERY_ID_CHARS,
    MAX_HELD_BYTES,
    STATE_BASE_BYTES,
    clip,
    json_problem,
    json_size,
    length_problem,
    payload_size_problem,
    retained_id,
)
from . import _kept
from ._keys import event_key
from ._types import DeliveryResult, Disposition, SignalRef

if TYPE_CHECKING:
    from ._runs import Runs

# Before the budgets (an unpatched run) only what always failed the workflow task is refused; a
# payload nested this deep never reached a handler through the data converter.
_LEGACY_DEPTH = 10_000


def payload_problem(engine: Runs, payload: Any, delivery_id: str | None) -> str | None:
    """Why the engine cannot take this payload at all, or None (then the manifest schema decides)."""
    problem = (json_problem(payload) if engine.bounded
               else json_problem(payload, max_depth=_LEGACY_DEPTH, max_int_digits=LEGACY_INT_DIGITS))
    if problem is not None or not engine.bounded:
        return problem
    too_long = None if delivery_id is None else length_problem("the delivery id", delivery_id, MAX_DELIVERY_ID_CHARS)
    return None if too_long is None else f"{too_long}: use a shorter id (e.g. a hash of it)"


def size_problem(engine: Runs, size: int) -> str | None:
    """Why a payload of ``size`` bytes (canonical JSON) is too large to take, or None."""
    return payload_size_problem(size) if engine.bounded else None


def held_bytes(engine: Runs) -> int:
    """Payload bytes held for runs not started yet: pending runs, open batches, a held poll item,
    subscription deliveries not confirmed. Runs being started are not counted: their inputs leave
    the state within a task or two."""
    state = engine.state
    total = engine.pending_bytes + engine.batch_bytes
    total += sum(json_size(p.held.payload) for p in state.polls.values() if p.held is not None)
    total += engine.kept_signal_bytes
    return total


def defer_reason(engine: Runs, size: int) -> str | None:
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


def deferred(engine: Runs, entry: EntrySpec, delivery_id: str | None, reason: str, now: Any, *,
             signalled: bool = False, quiet: bool = False, ref: SignalRef | None = None) -> DeliveryResult:
    """Record a deferred event: nothing consumed, no run; the sender delivers it again later.

    A signalled one is kept apart (``deferred_signal``): its sender was told it is durable and hears
    nothing, so the activation lists it with ``ref``, the reference to its signal in history, until
    its id is delivered again (:func:`keep_deferred`)."""
    engine.count("deferred")
    kept = retained_id(delivery_id)
    if signalled:
        keep_deferred(engine, entry.name, kept, reason, now, ref)
    elif not quiet:
        engine.record_error(now, "deferred", f"delivery {kept!r} deferred: {reason}", entry.name, kept)
    return DeliveryResult(entry=entry.name, delivery_id=kept, disposition=Disposition.DEFERRED,
                          message=clip(reason), activation_id=engine.spec.activation_id)


def keep_deferred(engine: Runs, entry: str, delivery_id: str | None, reason: str, now: Any, ref: SignalRef | None) -> None:
    """List a deferred signal by its id with the reference to its signal (at most
    ``MAX_DEFERRED_SIGNALS``: past it counted only, once recorded), so it can be delivered again."""
    engine.count("deferred_signals")
    deferred_signals = engine.state.signals_deferred
    key = None if delivery_id is None else event_key(entry, delivery_id)
    if key is not None and ref is not None and (key in deferred_signals or len(deferred_signals) < MAX_DEFERRED_SIGNALS):
        number = deferred_signals[key].number if key in deferred_signals else _kept.next_number(engine.state)
        deferred_signals[key] = ref.model_copy(update={"reason": clip(reason, 200), "at": now, "number": number})
        if len(deferred_signals) <= MAX_DEFERRED_SIGNALS // 10 or not engine.state.error_counts.get("deferred_signal"):
            engine.record_error(now, "deferred_signal", f"signalled delivery {delivery_id!r} of entry {entry!r} was "
                                f"deferred and not run ({reason}); it is listed with its signal (`wfi state "
                                "--redrivable`): re-drive it with `wfi operate redrive --delivery-id ID` (`wfi deliver --redrive ID`)",
                                entry, delivery_id)
        else:
            engine.state.error_counts["deferred_signal"] += 1  # counted; every one is listed, not each recorded
        return
    engine.count("deferred_signals_unlisted")
    if not engine.state.error_counts.get("deferred_signal_unlisted"):
        engine.record_error(now, "deferred_signal_unlisted", f"signalled delivery {delivery_id!r} of entry {entry!r} "
                            f"was deferred and not run ({reason}), and {MAX_DEFERRED_SIGNALS} deferred signals are "
                            "listed already: it and those after it are only counted (counters.deferred_signals_unlisted); "
                            "their senders must deliver them again", entry, delivery_id)
    else:
        engine.state.error_counts["deferred_signal_unlisted"] += 1


def undecodable(engine: Runs, problem: str, now: Any) -> DeliveryResult:
    """A delivery whose argument could not even be decoded: ``invalid``, recorded without identity."""
    engine.count("deliveries")
    engine.count("invalid")
    engine.record_error(now, "invalid", f"a delivery was refused before validation: {problem}")
    return DeliveryResult(entry=None, delivery_id=None, disposition=Disposition.INVALID, message=clip(problem),
                          activation_id=engine.spec.activation_id)


# ---------------------------------------------------------------------------- unencoded
def unencoded_refusal(spec: ActivationSpec, what: str) -> str | None:
    """The answer that refuses ``what`` before anything is recorded (an update's validator), or None
    when the activation takes it (``temporal.unencoded`` is not ``refuse``)."""
    return _unencoded.refusal(what, in_history=False) if spec.unencoded == "refuse" else None


def unencoded(engine: Runs, what: str, now: Any, *, entry: str | None = None, delivery_id: str | None = None) -> str | None:
    """``what`` arrived without the team's codec and is in history: the answer that refuses it, or None
    when it is taken. Refused, it is recorded without anything of its payload; taken under ``record``,
    recorded with its entry and id."""
    setting = engine.spec.unencoded
    if setting == "refuse":
        refusal = _unencoded.refusal(what, in_history=True)
        engine.record_error(now, _unencoded.REFUSED, refusal)
        return refusal
    if setting == "record":
        engine.record_error(now, _unencoded.RECORDED, _unencoded.recorded(what), entry, delivery_id)
    return None


# ---------------------------------------------------------------------------- capacity
def estimated_state_bytes(engine: Runs) -> int:
    """The carried state's size, estimated from above from what it holds (see core.limits)."""
    refs = len(engine.state.signals_waiting)  # deferred ones are held in capacity's margin (limits.MAX_DEFERRED_SIGNALS)
    return (STATE_BASE_BYTES + len(engine.retired) * BYTES_PER_RETIRED_ID + refs * BYTES_PER_SIGNAL_REF
            + len(engine.state.events) * BYTES_PER_LIVE_RECORD + held_bytes(engine) + _kept.estimated_bytes(engine.state)
            + _throttle_bytes(engine))


def _throttle_bytes(engine: Runs) -> int:
    """The throttle's start marks and keys (at most limits.MAX_THROTTLE_MARKS marks)."""
    throttle = engine.state.throttle
    return throttle.marks * BYTES_PER_THROTTLE_MARK + throttle.key_chars


def capacity_fill(engine: Runs) -> float:
    """Estimated carried state / capacity: 1.0 is full."""
    return estimated_state_bytes(engine) / CAPACITY_BYTES


def capacity(engine: Runs) -> dict[str, Any]:
    """The fill level and its parts, for operators (summary, page, gauge)."""
    estimate = estimated_state_bytes(engine)
    return {"fill": round(estimate / CAPACITY_BYTES, 3), "estimated_state_bytes": estimate, "capacity_bytes": CAPACITY_BYTES,
            "retained_ids": len(engine.state.events) + len(engine.retired), "held_bytes": held_bytes(engine),
            "policy": engine.spec.policies.at_capacity, "shed_through": engine.state.shed_through}


def capacity_reason(engine: Runs, size: int, now: Any) -> str | None:
    """Why a new event of ``size`` payload bytes cannot be retained (the activation is at capacity),
    or None; under ``shed_oldest`` the oldest released ids are dropped to make room first."""
    if not engine.capacity_checked:
        return None
    estimate = estimated_state_bytes(engine)
    _warn(engine, estimate, now)
    needed = estimate + BYTES_PER_LIVE_RECORD + size
    if needed <= CAPACITY_BYTES:
        engine.state.capacity_full = False
        return None
    if engine.spec.policies.at_capacity == "shed_oldest":
        # Make room for this event and 1% of capacity more, so shedding happens in steps, not per event.
        ids = (needed - CAPACITY_BYTES + CAPACITY_BYTES // 100) // BYTES_PER_RETIRED_ID + 1
        shed_through = engine.shed_oldest(ids)
        if shed_through is not None:
            engine.state.shed_through = max(engine.state.shed_through or shed_through, shed_through)
            engine.record_error(now, "capacity_shed", f"at capacity: dedup entries released up to "
                                f"{shed_through.isoformat()} were dropped before their retention ended (at_capacity: "
                                "shed_oldest); a redelivery of one of them is taken as new")
            if estimated_state_bytes(engine) + BYTES_PER_LIVE_RECORD + size <= CAPACITY_BYTES:
                return None
    ids = len(engine.state.events) + len(engine.retired)
    expiry = engine.next_expiry()
    when = f", the next at {expiry.isoformat()}" if expiry else ""
    if not engine.state.capacity_full:
        engine.state.capacity_full = True
        engine.record_error(now, "capacity_reached", f"the activation is at capacity with {ids} delivery ids kept for "
                            f"deduplication: deliveries of new ids are deferred (counted in counters.deferred) until "
                            f"retained ids are let go as their retention ends{when}")
    return (f"the activation is at capacity: it carries {ids} delivery ids kept for deduplication and "
            f"{held_bytes(engine)} bytes of payloads held for runs not started ({estimate} of {CAPACITY_BYTES} bytes); "
            f"ids are let go as their retention ({engine.spec.policies.dedup_retention}) ends{when}: deliver it again "
            "later, or give the workflow a shorter dedup_retention, at_capacity: shed_oldest or more shards")


def _warn(engine: Runs, estimate: int, now: Any) -> None:
    fill = estimate / CAPACITY_BYTES
    if fill >= CAPACITY_WARNING and not engine.state.capacity_warned:
        engine.state.capacity_warned = True
        engine.record_error(now, "capacity_warning", f"the activation's carried state is at {fill:.0%} of its capacity "
                            f"({estimate} of {CAPACITY_BYTES} bytes); at 100% new delivery ids are "
                            f"{'shed oldest first' if engine.spec.policies.at_capacity == 'shed_oldest' else 'deferred'}")
    elif fill < CAPACITY_WARNING - 0.1 and engine.state.capacity_warned:
        engine.state.capacity_warned = False
