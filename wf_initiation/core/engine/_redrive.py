"""Re-drive: events that did not run, offered again once an operator fixed the cause (``wfi operate redrive``).

What "offered again" means for each kind of kept event (``_kept``):

- ``invalid``: an external delivery whose payload failed its manifest's schema, kept with its
  payload. Delivered again as it was, through the whole pipeline under the activation's current
  binding (the fix is often a new binding: a connector version whose schema takes it). It was never
  accepted, so nothing accepted is reinterpreted (INIT-5), and its delivery id was left unconsumed
  (EXT-10): when a delivery with that id was accepted since, the kept one is settled, not offered.
- ``quarantined``: a poll item that failed validation and was quarantined so that the cursor could
  move on (POLL-11), kept with its payload. Offered to its poll entry as if it were polled now; its
  quarantine record stays as the disposition of the fetch.
- ``deferred_signal``: a signalled delivery deferred and listed with a reference to its signal in
  history. Its payload, read back from that history by the client and sent with the action, must
  have the digest kept with the reference; it is then delivered again.
- ``start_fault``: an accepted event whose run could not be started, kept with its run as admitted.
  The same run (same run key, same input: the event is not reinterpreted) is admitted again, behind
  its queue key and the overlap policy, and its events' dedup entries take the new disposition.

At most one run per event: an event offered again takes the ordinary dedup path (a run key is the
run's workflow id), its dedup entry keeps its original delivery id and names the action
(``EventRecord.redriven_by``), and the kept event is let go. A later re-drive of it is refused,
naming that action. An event still invalid (or deferred) when offered again stays kept. One action
offers at most ``MAX_REDRIVE_PER_ACTION`` events, each once; its action id makes it once-only, also
across continue-as-new (``operator``).
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..activation import EntrySpec
from ..limits import MAX_REDRIVE_PER_ACTION, clip, json_problem
from ..sharding import shard_of
from . import _kept
from ._keys import event_key, payload_digest
from ._pipeline import Pipeline
from ._types import Disposition, EventRecord, OperatorOutcome, RedrivenEvent

NOT_OFFERED = "not_offered"
STAYS_KEPT = frozenset({Disposition.INVALID, Disposition.DEFERRED})
_ENTRY_KINDS = {"invalid": ("external",), "deferred_signal": ("external",), "quarantined": ("poll",)}


@dataclass(frozen=True, slots=True)
class Selection:
    """What a re-drive names (None: any): the fields of the ``Redrive`` action."""

    kind: str | None = None
    entry: str | None = None
    delivery_id: str | None = None
    first: int | None = None
    last: int | None = None

    @classmethod
    def of(cls, req: Any) -> Selection:
        return cls(*(getattr(req, name, None) for name in ("kind", "entry", "delivery_id", "first", "last")))

    def selects(self, view: dict[str, Any]) -> bool:
        return _kept.selects(view, kind=self.kind, entry=self.entry, delivery_id=self.delivery_id,
                             first=self.first, last=self.last)

    def named(self) -> str:
        parts = [f"kind {self.kind}" if self.kind else "", f"entry {self.entry!r}" if self.entry else "",
                 f"delivery id {self.delivery_id!r}" if self.delivery_id else "",
                 f"numbers from {self.first}" if self.first is not None else "",
                 f"numbers to {self.last}" if self.last is not None else ""]
        return ", ".join(p for p in parts if p) or "every event"


def redrive(engine: Pipeline, req: Any, now: datetime) -> OperatorOutcome:
    """Offer the kept events ``req`` selects again, oldest first, at most ``MAX_REDRIVE_PER_ACTION``.
    ``ok`` when at least one was offered; each event's outcome in ``events``."""
    selection = Selection.of(req)
    retention = engine.spec.policies.dedup_retention
    _kept.expire(engine.state, now, retention)
    chosen = [v for v in _kept.views(engine.state, retention) if selection.selects(v)]
    if not chosen:
        return OperatorOutcome(False, _nothing(engine, selection))
    page = chosen[:MAX_REDRIVE_PER_ACTION]
    supplied = _supplied(getattr(req, "payloads", None) or [])
    action_id = getattr(req, "action_id", None) or "-"
    events = tuple(_one(engine, view, supplied, action_id, now) for view in page)
    offered = sum(e.outcome != NOT_OFFERED for e in events)
    return OperatorOutcome(offered > 0, _message(events, len(chosen) - len(page)), events)


def _supplied(payloads: list[Any]) -> dict[str, Any]:
    """Deferred signals' payloads sent with the action, by digest (one the engine cannot carry is ignored)."""
    return {payload_digest(p): p for p in payloads if json_problem(p) is None}


def _one(engine: Pipeline, view: dict[str, Any], supplied: dict[str, Any], action_id: str, now: datetime) -> RedrivenEvent:
    entry = engine.spec.entry(view["entry"])
    if entry is None:
        return _not(engine, view, f"entry {view['entry']!r} is not in this activation's binding "
                    f"({engine.spec.activation_id}) any more: there is nothing to offer it to")
    kinds = _ENTRY_KINDS.get(view["kind"])
    if kinds is not None and entry.kind not in kinds:
        return _not(engine, view, f"entry {entry.name!r} is a {entry.kind} entry now: a {view['kind']} event is not offered to it")
    if view["kind"] == "start_fault":
        return _start_again(engine, view, action_id, now)
    home = shard_of(entry.name, view["delivery_id"], engine.spec.shards) if view["delivery_id"] else engine.spec.shard
    if home != engine.spec.shard:
        return _not(engine, view, f"its delivery id is served by shard {home} now (a split): deliver it there again")
    if view["kind"] == "deferred_signal":
        payload = supplied.get(view["digest"], supplied)
        if payload is supplied:
            return _not(engine, view, f"its payload was not sent with the action: `wfi operate redrive` and "
                        f"WfiClient.redrive read it from the history of activation run {view['run_id']}; when that "
                        "history no longer holds it (past the namespace's retention), its sender must deliver it again")
    else:
        kept = _kept.find(engine.state, view["number"])
        assert kept is not None  # listed from the kept events just now
        payload = kept.payload
    return _offer(engine, view, entry, payload, action_id, now)


def _offer(engine: Pipeline, view: dict[str, Any], entry: EntrySpec, payload: Any, action_id: str,
           now: datetime) -> RedrivenEvent:
    """Deliver a kept payload again through the pipeline; a disposition lets the kept event go."""
    ident = view["delivery_id"]
    existing = engine.lookup(event_key(entry.name, ident)) if ident else None
    if existing is not None:  # its id was taken since (EXT-3): offering it would be a duplicate or a conflict
        _let_go(engine, view)
        return _not(engine, view, _had(existing))
    try:
        lane = engine.lane(entry, payload)
    except Exception:  # noqa: BLE001 - its key faults: the pipeline records that fault when it is offered
        lane = None
    if lane is not None and lane != engine.spec.shard:
        return _not(engine, view, f"its queue key's events run on shard {lane}: deliver it there again")
    seq = engine.state.seq
    result = engine.deliver_event(entry, payload, now)
    if result.disposition in STAYS_KEPT:
        kept = _kept.find(engine.state, view["number"])
        if kept is not None:
            kept.tries, kept.reason = kept.tries + 1, clip(result.message) or result.disposition.value
        return _event(engine, view, result.disposition.value, None, result.message)
    _let_go(engine, view)
    engine.count("redriven")
    record = engine.state.events.get(event_key(entry.name, result.delivery_id)) if result.delivery_id else None
    if record is not None and record.seq > seq:
        record.redriven_by = action_id
    return _event(engine, view, result.disposition.value, result.run_key, result.message)


def _start_again(engine: Pipeline, view: dict[str, Any], action_id: str, now: datetime) -> RedrivenEvent:
    """Admit a start fault's run again, as it was admitted; its events' dedup entries follow it."""
    kept = _kept.find(engine.state, view["number"])
    assert kept is not None and kept.run is not None and kept.run.input is not None
    run, made = kept.run, kept.run.input
    records = {r.delivery_id: r for r in kept.records}
    current = [(key, engine.lookup(key)) for key in run.event_keys]
    moved = next((r for _, r in current if r is not None and r.disposition is not Disposition.START_FAULT), None)
    if moved is not None or any(r is None for _, r in current):
        _let_go(engine, view)
        return _not(engine, view, _had(moved) if moved is not None else "its events' dedup entries were let go "
                    "since (their retention ended): a redelivery of them is taken as new")
    fresh = run.model_copy(update={"status": "pending", "waiting_for": None, "started_at": None, "ended_at": None,
                                   "temporal_run_id": None, "cancel_requested": False})
    disposition = engine.admit(fresh, now)
    for key, found in current:
        assert found is not None
        record = engine.state.events.get(key)
        if record is None:  # retired into the compact form since (it keeps only a digest's prefix): its copy
            record = copy.copy(records.get(found.delivery_id, found))
            engine.state.events[key] = record
        record.disposition, record.detail, record.released_at = disposition, None, None
        record.run_key, record.redriven_by = run.run_key, action_id
    if made.trigger.batched:
        engine.batch_runs_made = True
    _let_go(engine, view)
    engine.count("redriven")
    return _event(engine, view, disposition.value, run.run_key, None)


def _let_go(engine: Pipeline, view: dict[str, Any]) -> None:
    if view["kind"] == "deferred_signal":
        engine.state.signals_deferred.pop(event_key(view["entry"], view["delivery_id"]), None)
    else:
        _kept.remove(engine.state, view["number"])


def _had(record: EventRecord) -> str:
    run = f", run {record.run_key}" if record.run_key else ""
    if record.redriven_by:
        return (f"re-driven already, by operator action {record.redriven_by!r}: {record.disposition.value}{run} "
                "(an event is re-driven once)")
    return (f"its delivery id has a disposition since: {record.disposition.value} at "
            f"{record.accepted_at.isoformat()}{run}; there is nothing to re-drive")


def _nothing(engine: Pipeline, selection: Selection) -> str:
    """Why a re-drive selects nothing: what became of the event it names, or what is kept."""
    if selection.delivery_id is not None:
        names = [selection.entry] if selection.entry else [e.name for e in engine.spec.entries]
        for name in names:
            record = engine.lookup(event_key(name, selection.delivery_id))
            if record is not None:
                return f"delivery {selection.delivery_id!r} of entry {name!r}: {_had(record)}"
    return (f"nothing kept for re-drive matches {selection.named()}: `wfi state --redrivable` lists what is kept "
            f"(an event is kept for the dedup retention, {engine.spec.policies.dedup_retention}, from when it was kept)")


def _not(engine: Pipeline, view: dict[str, Any], why: str) -> RedrivenEvent:
    return _event(engine, view, NOT_OFFERED, None, why)


def _event(engine: Pipeline, view: dict[str, Any], outcome: str, run_key: str | None, message: str | None) -> RedrivenEvent:
    return RedrivenEvent(number=view["number"], kind=view["kind"], entry=view["entry"], delivery_id=view["delivery_id"],
                         outcome=outcome, run_key=run_key, message=clip(message),
                         activation_id=engine.spec.activation_id)


def _message(events: tuple[RedrivenEvent, ...], more: int) -> str:
    offered = [e for e in events if e.outcome != NOT_OFFERED]
    counts = Counter(e.outcome for e in events)
    text = (f"re-drive: {len(offered)} of {len(events)} selected event(s) offered again: "
            + ", ".join(f"{n} {outcome.replace('_', ' ')}" for outcome, n in counts.items()))
    if not offered:
        text += f" ({events[0].message})"
    if more:
        text += (f"; {more} more selected: each action offers at most {MAX_REDRIVE_PER_ACTION} "
                 "(`wfi operate redrive` and WfiClient.redrive go on in pages)")
    return clip(text) or text
