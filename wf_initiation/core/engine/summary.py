"""Operator views of the engine state: full state, short summary, one delivery, UI markdown."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ..limits import CAPACITY_WARNING, MAX_DEFERRED_SIGNALS
from . import _batch, _deactivate, _growth, _intake, _kept, _schedule, _throttle, _view
from ._keys import event_key
from ._machine import Machine
from ._types import EVENT_RECORD, Deactivation, ScheduleState, SignalRef


def status(engine: Machine) -> str:
    """One word for the `WfiState` search attribute."""
    st = engine.state
    deactivation = _deactivate.status(engine)
    if deactivation is not None:
        return deactivation
    if any(p.held is not None for p in st.polls.values()) or any(
        r.status == "awaiting_operator" for s in st.schedules.values() for r in s.overflow
    ):
        return "needs_operator"
    sources = [*st.schedules.values(), *st.polls.values()]
    if sources and all(getattr(s, "paused", False) for s in sources):
        return "paused"
    if st.schedules and not any(s.active for s in st.schedules.values()) and not any(
        e.kind != "schedule" for e in engine.spec.entries
    ):
        return "inactive"
    return "active"


def short(engine: Machine) -> dict[str, Any]:
    st = engine.state
    return {
        "workflow": engine.spec.workflow,
        "activation_id": engine.spec.activation_id,
        "previous_activations": st.previous_activations,
        "status": status(engine),
        "entries": [{"name": e.name, "connector": e.connector, "kind": e.kind} for e in engine.spec.entries],
        "counters": dict(st.counters),
        "error_counts": dict(st.error_counts),
        "capacity": _intake.capacity(engine),
        "dedup_entries": len(st.events) + len(engine.retired),
        "dedup_retired": len(engine.retired),
        "runs_pending": len(st.runs) - engine.running - engine.starting,
        "runs_starting": engine.starting,
        "runs_running": engine.running,
        "queues": {k: len(v) for k, v in st.queues.items()},
        "open_batches": len(st.batches),
        "batches": _batch.open_batches(engine),
        "pending_batches": _batch.pending_batches(engine),
        "schedules": {n: _schedule_summary(engine, n, s) for n, s in st.schedules.items()},
        "polls": {n: {"cursor": p.cursor, "paused": p.paused, "held": p.held is not None, "failures": p.failures,
                      "last_error": p.last_error, "note": p.note} for n, p in st.polls.items()},
        "deactivation": _deactivation(st.deactivation) if st.deactivation else None,
        "signals": signals(engine),
        "redrive": redrive(engine),
        "throttle": throttle(engine),
        **({"growth": growth} if (growth := _growth.summary(engine)) is not None else {}),
    }


MAX_THROTTLE_LINES = 10


def throttle(engine: Machine) -> dict[str, Any] | None:
    """The throttle (None without one): its rule, the runs waiting for it, and when the next may
    start: ``next_start_at`` of the waiting run that may start first (without a key and nothing
    waiting: of the next run to come; None: one may start now), from the starts recorded, so an
    instant already past means now too. ``lines``: the keys with the most runs waiting."""
    policy, state = engine.spec.policies.throttle, engine.state.throttle
    if policy is None:
        return None
    held = set(engine.state.waiting)  # those start when the overlap policy lets them, not at an instant
    nexts = [_throttle.next_start(state, key, policy) for key, line in state.lines.items() if line[0] not in held]
    if not state.lines and policy.key is None:
        nexts = [_throttle.next_start(state, _throttle.UNKEYED, policy)]
    instants = [i for i in nexts if i is not None]
    busiest = sorted(state.lines.items(), key=lambda kv: -len(kv[1]))[:MAX_THROTTLE_LINES]
    return {"runs": policy.runs, "per": _throttle.per_text(policy), "per_seconds": policy.per.total_seconds(),
            "key": policy.key, "waiting": _throttle.waiting(state), "keys_waiting": len(state.lines),
            "keys_tracked": len(state.starts), "marks": _throttle.marks_total(state),
            "next_start_at": min(instants).isoformat() if instants else None,
            "lines": [{"key": key, "waiting": len(line), "first": line[0],
                       "next_start_at": _iso(_throttle.next_start(state, key, policy))} for key, line in busiest]}


def _iso(moment: Any) -> str | None:
    return moment.isoformat() if moment is not None else None


def _schedule_summary(engine: Machine, name: str, s: ScheduleState) -> dict[str, Any]:
    """One schedule entry: where it is in its sequence, its pause and note, and its options' effects."""
    due = _schedule.due_at(engine, name, s.next_instant) if s.next_instant is not None else None
    options = _schedule.options_of(engine.spec, name)
    return {
        "active": s.active, "paused": s.paused, "next": s.next_instant.isoformat() if s.next_instant else None,
        "next_at": due.isoformat() if due is not None and due != s.next_instant else None,
        "policy": s.policy, "bound": s.bound, "inactive_reason": s.inactive_reason, "counts": s.counts,
        "paused_at": s.paused_at.isoformat() if s.paused_at else None, "note": s.note,
        "resumed_at": s.resumed_at.isoformat() if s.resumed_at else None, "failed_run": s.failed_run,
        "jitter": _seconds(options.jitter), "pause_on_failure": options.pause_on_failure,
        "remaining_runs": None if s.run_limit is None else max(0, s.run_limit - s.runs_counted),
        "run_limit": s.run_limit, "triggers": [t.model_dump(mode="json") for t in s.triggers[-3:]],
    }


def _seconds(value: timedelta) -> float | None:
    return value.total_seconds() if value else None


def _deactivation(d: Deactivation) -> dict[str, Any]:
    """The deactivation without its binding and run keys: ``controlled_runs`` counts them."""
    return {**d.model_dump(mode="json", exclude={"spec", "controlled"}), "controlled_runs": len(d.controlled)}


MAX_EVENTS_IN_STATE = 500


MAX_RUNS_IN_STATE = 500
MAX_QUEUE_KEYS_IN_STATE = 200


def full_state(engine: Machine) -> dict[str, Any]:
    """The operator's view, bounded in size: runs without their inputs (at most 500, oldest first),
    queue heads, and no dedup entries (see :func:`events` for those, paged)."""
    st = engine.state
    data = st.model_dump(mode="json", exclude={"compact_events": True, "events": True, "runs": True, "queues": True,
                                              "deactivation": {"spec"}, "signals_deferred": True, "signals_waiting": True,
                                              "redrive_kept": True,
                                              "throttle": True})  # up to 10,000 marks: the summary's view
    data["events_total"] = len(st.events)
    data["runs_total"] = len(st.runs)
    data["runs"] = {k: r.model_dump(mode="json", exclude={"input"})
                    for k, r in list(st.runs.items())[:MAX_RUNS_IN_STATE]}
    data["queues"] = {k: {"length": len(v), "head": v[0] if v else None, "next": v[1:4]}
                      for k, v in list(st.queues.items())[:MAX_QUEUE_KEYS_IN_STATE]}
    data["queues_total"] = len(st.queues)
    data["spec"] = engine.spec.model_dump(mode="json")
    data["recent_runs"] = [r.model_dump(mode="json", exclude={"input"}) for r in engine.recent_runs]
    data["summary"] = short(engine)
    return data


def events(engine: Machine, after_seq: int = 0, limit: int = MAX_EVENTS_IN_STATE) -> list[dict[str, Any]]:
    """Dedup entries in acceptance order, ``seq > after_seq``, at most ``limit`` (<= 500) per page."""
    chosen = sorted((r for r in engine.state.events.values() if r.seq > after_seq), key=lambda r: r.seq)
    return [{"key": f"{r.entry}\x1f{r.delivery_id}", **EVENT_RECORD.dump_python(r, mode="json")}
            for r in chosen[: max(1, min(limit, MAX_EVENTS_IN_STATE))]]


def delivery(engine: Machine, entry: str, delivery_id: str) -> dict[str, Any] | None:
    key = event_key(entry, delivery_id)
    record = engine.lookup(key)
    if record is None:
        return _kept_signal(engine, key)
    out = EVENT_RECORD.dump_python(record, mode="json")
    run = engine.state.runs.get(record.run_key or "")
    out["run_status"] = run.status if run else ("terminal" if record.run_key else None)
    return out


def _kept_signal(engine: Machine, key: str) -> dict[str, Any] | None:
    """A signalled delivery kept by reference (``SignalRef``): ``deferred_signal`` (listed, to be
    delivered again) or ``waiting_signal`` (carried across continue-as-new, taken when there is room)."""
    st = engine.state
    ref = st.signals_deferred.get(key)
    disposition = "deferred_signal"
    if ref is None:
        ref = next((r for r in st.signals_waiting if event_key(r.entry, r.delivery_id) == key), None)
        disposition = "waiting_signal"
    return None if ref is None else kept_signal(engine, ref, disposition)


def kept_signal(engine: Machine, ref: SignalRef, disposition: str) -> dict[str, Any]:
    """The ``delivery`` answer for a signal kept by reference."""
    return {"entry": ref.entry, "delivery_id": ref.delivery_id, "disposition": disposition, "digest": ref.digest,
            "run_key": None, "run_status": None, "kept_at": ref.at.isoformat(),
            "detail": ref.reason, "signal": {"workflow_run_id": ref.run_id, "bytes": ref.size},
            "activation_id": engine.spec.activation_id}


def signals(engine: Machine) -> dict[str, int]:
    """Signalled deliveries kept by reference (docs/webhooks.md, "What a signal sender can rely on")."""
    st = engine.state
    return {"waiting_carried": len(st.signals_waiting), "deferred_listed": len(st.signals_deferred),
            "deferred_unlisted": st.counters.get("deferred_signals_unlisted", 0)}


def redrive(engine: Machine) -> dict[str, int]:
    """Events kept for re-drive (``_kept``; deferred signals are counted in :func:`signals`) and those let go."""
    st = engine.state
    return {"kept": len(st.redrive_kept), "kept_bytes": _kept.kept_bytes(st),
            **{name: st.counters.get(f"redrive_{name}", 0) for name in ("evicted", "expired", "not_kept")}}


def markdown(engine: Machine) -> str:
    """The operator's page shown as Current Details in the Temporal UI (bounded, no secrets): see _view."""
    notes = []
    if engine.state.deactivation is not None:  # rare: the full summary only then
        s = short(engine)
        notes.append(_deactivation_line(s["deactivation"], s))
    faults = engine.state.counters.get("start_faults", 0)
    if faults:  # runs that could never be started (a start fault): an operator should look
        notes.append(f"**start faults {faults}**: runs that could not be started; see `wfi state` (errors)")
    kept = signals(engine)
    if kept["deferred_listed"]:  # their senders were told they are durable: nobody else will deliver them again
        notes.append(f"**{kept['deferred_listed']} signalled deliveries deferred and not run**: listed by "
                     f"`wfi state --redrivable --workflow {engine.spec.workflow}`; offer them again with "
                     "`wfi operate redrive --kind deferred_signal`")
    if engine.state.redrive_kept:  # invalid deliveries, quarantined items, start faults: kept for a while
        notes.append(f"**{len(engine.state.redrive_kept)} events that did not run kept for re-drive** (invalid, "
                     f"quarantined, start faults): `wfi state --redrivable --workflow {engine.spec.workflow}`; once "
                     "the cause is fixed, `wfi operate redrive`")
    if kept["deferred_unlisted"]:
        notes.append(f"**{kept['deferred_unlisted']} signalled deliveries deferred and not run, not listed** (past "
                     f"the {MAX_DEFERRED_SIGNALS} listed): their senders must deliver them again")
    if engine.spec.shards > 1:  # each shard's page is its own: say where the whole activation is
        notes.append(f"**shard {engine.spec.shard} of {engine.spec.shards}**: this page shows this shard's deliveries"
                     + (" and the schedules and polls" if engine.spec.shard == 0 else "")
                     + f"; the whole activation: `wfi state --workflow {engine.spec.workflow} --summary`")
    growth = _growth.summary(engine)
    if growth is not None:
        notes.append(_growth_line(growth))
    fill = _intake.capacity_fill(engine)
    if fill >= CAPACITY_WARNING:
        policy = engine.spec.policies.at_capacity
        notes.append(f"**capacity {fill:.0%}**: what this activation carries (delivery ids kept for deduplication, "
                     f"payloads held) is near its limit; at 100% new ids are "
                     f"{'shed, oldest first' if policy == 'shed_oldest' else 'deferred'} (`wfi help limits`, capacity)")
    return _view.markdown(engine, status(engine), notes=notes)


def _growth_line(growth: dict[str, Any]) -> str:
    """``**grows itself** (scale.grow_at 80%, at most 16 shards) · fill per shard at T: 0 12% · 1 14% · next: ...``."""
    fills = growth["fills"]
    measured = (f" · fill per shard at {_view.utc(growth['measured_at'])}: "
                + " · ".join(f"{k} {'not running' if v is None else f'{v:.0%}'}" for k, v in fills.items())) if fills else ""
    return (f"**grows itself** (scale.grow_at {growth['grow_at']:.0%}, at most {growth['max_shards']} shards){measured}"
            f" · next: {_view.clip(growth['next'], limit=400, prose=True)}")


def _deactivation_line(d: dict[str, Any], s: dict[str, Any]) -> str:
    why = f" · {d['note']}" if d.get("note") else ""  # e.g. a cancellation request (workflows/activation.py)
    return _deactivation_progress(d, s) + why


def _deactivation_progress(d: dict[str, Any], s: dict[str, Any]) -> str:
    if d["completed_at"]:
        return (f"**deactivated** at {d['completed_at']} (requested {d['requested_at']}): {d['dropped_runs']} pending "
                f"run(s) and {d['dropped_batches']} batch(es) dropped, {d['left_running']} run(s) left running, "
                f"{d['refused']} delivery(ies) refused · `wfi activate` to activate it again")
    return (f"**deactivating** since {d['requested_at']} (queued: {d['queued']}, running: {d['running']}): "
            f"{s['runs_pending']} pending, {s['runs_starting']} starting, {s['runs_running']} running, "
            f"{s['open_batches']} open batch(es) · deliveries refused ({d['refused']})")
