"""Batch closure and admission inside the engine (BATCH-1..7, TRIG-15, TRIG-16, EXT-6, EXT-11).

An event reaches a batch after the per-event steps of the pipeline (``when``, ``partition_by`` and
``into``, each evaluated over that single event, TRIG-16); a fault in any of them has already
disposed the event, so it never enters a batch (BATCH-6, BATCH-7). A batch is one per (entry,
partition) and closes at ``size`` events or at ``max_wait`` after the acceptance of its first
event, whichever comes first (BATCH-1); it never holds more than ``size`` (BATCH-2) and is never
closed before its deadline (BATCH-3): the deadline is an instant in the carried state, compared
with the ``now`` the shell passes in, so an early wake-up, a worker restart or a continue-as-new
cannot close it early, and the shell recomputes its timer from :func:`next_deadline` (POLL-13).

A closed batch becomes exactly one run (BATCH-4) whose binding holds the events' payloads in
acceptance order (EXT-11, SCHED-15). It goes through ordinary admission but never through
``overlap: skip``: when it cannot start (overlap, concurrency cap, the throttle's window) it stays
pending, listed by :func:`pending_batches`, until it is admitted or an operator drops it (BATCH-5).
Under a keyed throttle a batch's run counts under its first event's key. Every batched
event's dedup entry points at that run and is released when the run is terminal (EXT-6).

``into`` on a batched entry: each event's projection is evaluated at its acceptance (a fault is
that event's disposition, BATCH-6) and kept with the event; the run then receives, under each
name ``into`` binds, the list of that name's per-event values in acceptance order. The bound names
are the same as for an unbatched run; like the trigger binding itself, each holds a list.

Bytes: a batch also closes early, before ``size`` and ``max_wait``, when its next event would take
its payloads past ``limits.MAX_BATCH_BYTES``; that event opens the next batch. A batch's run input
so always fits Temporal's payload limits (20 events of 150 KB make several runs, never one run
that can never start). ``size`` stays a maximum (BATCH-2); the early close is documented in
docs/limits.md.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any

from ..activation import EntrySpec
from ..limits import MAX_BATCH_BYTES
from ..runinput import Causation
from ..sharding import batch_lane_text
from . import _lanes
from ._inputs import run_input
from ._runs import Runs
from ._types import BatchEvent, Disposition, OpenBatch, Outcome, RunRecord


def batch_key(entry: str, partition: str) -> str:
    """Key of the open batch of one entry and partition in ``EngineState.batches``."""
    return f"{entry}\x1f{partition}"


def add(
    engine: Runs, entry: EntrySpec, payload: Any, key: str, digest: str, now: datetime, *,
    partition: str, into: dict[str, Any] | None, delivery_id: str | None, scheduled_at: str | None, size: int = 0,
    throttle_key: str | None = None,
) -> Outcome:
    """Put one accepted event into its partition's open batch; close the batch when it is full."""
    assert entry.batch is not None
    bound = entry.batch.size
    bkey = batch_key(entry.name, partition)
    batch = engine.state.batches.get(bkey)
    if batch is not None and bound is not None and len(batch.events) >= bound:
        close(engine, bkey, now)  # only after a rebind lowered `size`: never exceed the current bound
        batch = None
    if batch is not None and engine.bounded and batch.events and batch.bytes + size > MAX_BATCH_BYTES:
        engine.count("batches_closed_by_bytes")
        close(engine, bkey, now)
        batch = None
    if batch is None:
        batch = _open(engine, entry, partition, key, now)
        batch.throttle_key = throttle_key  # its run is throttled under its first event's key
        engine.state.batches[bkey] = batch
    batch.events.append(BatchEvent(event_key=key, payload=payload, accepted_at=now, delivery_id=delivery_id,
                                   scheduled_at=scheduled_at, into=into if entry.into else None, bytes=size))
    batch.bytes += size
    engine.batch_bytes += size
    engine.retain(entry, key, digest, delivery_id, Disposition.BATCHED, now, None, run_key=batch.run_key)
    engine.count("batched")
    if bound is not None and len(batch.events) >= bound:
        close(engine, bkey, now)
    return Outcome(Disposition.BATCHED, batch.run_key)


def _open(engine: Runs, entry: EntrySpec, partition: str, first_key: str, now: datetime) -> OpenBatch:
    assert entry.batch is not None
    wait = entry.batch.max_wait_seconds
    batch_id = f"b{engine.next_seq()}-{hashlib.sha256(first_key.encode()).hexdigest()[:12]}"
    return OpenBatch(
        batch_id=batch_id, entry=entry.name, partition=partition, opened_at=now,
        deadline=now + timedelta(seconds=wait) if wait is not None else None,
        run_key=f"{engine.spec.activation_id}/{entry.name}/{batch_id}",
    )


def close(engine: Runs, bkey: str, now: datetime) -> None:
    """Close one open batch: build its single run and admit it (BATCH-4, BATCH-5)."""
    batch = engine.state.batches.pop(bkey)
    engine.batch_bytes -= batch.bytes
    entry = engine.entry(batch.entry)
    run_key = batch.run_key or f"{engine.spec.activation_id}/{entry.name}/{batch.batch_id}"
    made = run_input(
        engine.spec, entry, [e.payload for e in batch.events], batch_into(entry, batch.events), run_key,
        [e.delivery_id for e in batch.events if e.delivery_id], batch.events[0].scheduled_at, batch.opened_at,
        Causation(), batched=True,
    )
    lane = batch_lane_text(entry.name, batch.partition) if engine.spec.shards > 1 and entry.kind == "external" else None
    run = RunRecord(run_key=run_key, entry=entry.name, input=made, event_keys=[e.event_key for e in batch.events],
                    accepted_at=batch.opened_at, activation_id=engine.spec.activation_id,
                    scheduled_at=batch.events[0].scheduled_at, input_bytes=batch.bytes, lane=lane,
                    throttle_key=batch.throttle_key)
    engine.count("batches_closed")
    engine.batch_runs_made = True
    engine.admit(run, now)
    if lane is not None:
        _lanes.lane_done(engine, lane)  # a split's parent: the partition's next batch may start on its new shard


def batch_into(entry: EntrySpec, events: list[BatchEvent]) -> dict[str, Any]:
    """Each name ``into`` binds -> the list of its per-event values, in acceptance order."""
    if not entry.into:
        return {}
    return {name: [(e.into or {}).get(name) for e in events] for name in entry.into}


def close_due(engine: Runs, now: datetime) -> None:
    """Close every batch whose deadline has passed; a deadline still ahead is left alone (BATCH-3)."""
    due = [k for k, b in engine.state.batches.items() if b.deadline is not None and b.deadline <= now]
    for bkey in sorted(due, key=lambda k: (engine.state.batches[k].deadline, k)):
        close(engine, bkey, now)


def next_deadline(engine: Runs) -> datetime | None:
    """The earliest open batch deadline: the shell's timer (recomputed from state after any restart)."""
    deadlines = [b.deadline for b in engine.state.batches.values() if b.deadline is not None]
    return min(deadlines) if deadlines else None


def close_orphans(engine: Runs, new_entries: set[str], now: datetime) -> None:
    """On rebind: close the batches of entries the new activation no longer has.

    Their events were accepted and must still get their run (INIT-5); with no binding left to
    fill them, closing now is the only closure that can come.
    """
    for bkey in [k for k, b in engine.state.batches.items() if b.entry not in new_entries]:
        close(engine, bkey, now)


def pending_batches(engine: Runs) -> list[dict[str, Any]]:
    """Closed batches awaiting admission (BATCH-5): what an operator may admit or drop by run key."""
    out: list[dict[str, Any]] = []
    if not engine.batch_runs_made:  # no batch was closed into a run that may still wait
        return out
    # A closed batch never has a queue key (batch + queue_by is invalid), so when pending it waits in
    # `waiting` (overlap / concurrency) or a throttle's line: scan those, not every run (this runs on
    # every workflow task).
    lines = engine.state.throttle.lines
    throttled = [k for line in lines.values() for k in line] if lines else []
    in_line = set(throttled)
    for run_key in dict.fromkeys([*engine.state.waiting, *throttled]):
        run = engine.state.runs.get(run_key)
        if run is not None and run.status == "pending" and run.input is not None and run.input.trigger.batched:
            out.append({"run_key": run.run_key, "entry": run.entry, "events": len(run.event_keys),
                        "accepted_at": run.accepted_at.isoformat(), "waiting_for": run.waiting_for,
                        "throttled": run_key in in_line})
    return out


def open_batches(engine: Runs) -> list[dict[str, Any]]:
    """Open batches: entry, partition, size so far, first acceptance and closing deadline."""
    return [{"entry": b.entry, "partition": b.partition, "events": len(b.events), "opened_at": b.opened_at.isoformat(),
             "deadline": b.deadline.isoformat() if b.deadline else None, "run_key": b.run_key}
            for b in engine.state.batches.values()]
