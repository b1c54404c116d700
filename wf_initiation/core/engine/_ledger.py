"""Layer 1 of the engine: the activation's context and its dedup ledger (dedup entries, retention, counts).

Owns: the spec and carried state, the commands decided so far (``outbox``, drained by the facade
into a Decision), the per-task budget, counters and initiation errors, and every dedup entry from
its acceptance to its expiry: retained (EXT-3), released when suppressed or when its run is
terminal (retention starts, EXT-5), retired into the compact form before continue-as-new
(``_codec``) and expired once the retention has elapsed (EXT-7). Calls nothing above it.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime

from ..activation import ActivationSpec, EntrySpec
from ..limits import ADMIT_PER_TASK, RECORDS_PER_RUN, clip, json_size, retained_id
from . import _kept
from ._codec import Retired
from ._types import RELEASED_AT_ACCEPTANCE, Command, Disposition, EngineState, ErrorRecord, EventRecord, SignalRun

MAX_ERRORS = 200
KEEP_LIVE_RELEASED = 500
"""Released dedup entries carried across continue-as-new as full records, the newest (what the
operator page's recent dispositions and ``wfi state --events`` show); older ones are carried in the
compact form. A full record takes ~0.5 KB of the worker's memory: 500 of them ~0.26 MB per shard."""
KEEP_LIVE_RELEASED_BEFORE = 2000
"""The same for runs recorded before patch ``wfi-fewer-records`` (workflows/_compat.py)."""


class Ledger:
    """One activation's state and dedup ledger; the layers above extend it."""

    def __init__(self, spec: ActivationSpec, state: EngineState):
        self.spec = spec
        self.state = state
        self.outbox: list[Command] = []
        self._release_queue: deque[tuple[datetime, str]] = deque(
            sorted((r.released_at, k) for k, r in state.events.items() if r.released_at is not None)
        )
        self.retired = Retired.unpack(state.compact_events)
        state.compact_events = b""
        # Payload bytes of the kept subscription deliveries (``unacked`` SignalRuns), kept up to date by
        # _lifecycle.keep and _subscriptions.command_done: read at every new delivery id (held bytes),
        # where summing ``unacked`` (thousands of kept lifecycle events) would be quadratic.
        self.kept_signal_bytes = sum(json_size(c.payload) for c in state.unacked.values() if isinstance(c, SignalRun))
        # Whether the budgets of core.limits apply (depth, id length, held bytes, batch bytes, work
        # per task). Off for runs begun before them (the shell's BOUNDED_PATCH): their recorded
        # decisions must replay. Checks for input that always failed apply regardless.
        self.bounded = True
        self.signals_kept = True  # Compat.signals_kept
        self.keeps_for_redrive = True  # Compat.redrive_kept: invalid payloads, quarantined items, start faults (_kept)
        self.capacity_checked = True  # Compat.capacity
        self.task_budget = ADMIT_PER_TASK  # occurrence admissions left in this workflow task
        # Set while the carried state is over its limit: new deliveries are deferred.
        self.carry_blocked: str | None = None
        # Whether poll_now during a poll in flight polls again when it ends; off only to replay a
        # build before it (set per operator action, see Engine.operate).
        self.poll_now_survives_flight = True

    def entry(self, name: str) -> EntrySpec:
        found = self.spec.entry(name)
        if found is None:
            raise KeyError(name)
        return found

    def count(self, name: str, n: int = 1) -> None:
        self.state.counters[name] = self.state.counters.get(name, 0) + n

    def next_seq(self) -> int:
        self.state.seq += 1
        return self.state.seq

    def begin_task(self) -> None:
        """A new workflow task: its budget of work starts afresh (limits.ADMIT_PER_TASK)."""
        self.task_budget = ADMIT_PER_TASK

    def record_error(self, now: datetime, kind: str, message: str, entry: str | None = None,
                     delivery_id: str | None = None) -> None:
        # Bounded: a record never keeps more of a sender's text than limits allow (ids, messages).
        self.state.errors.append(ErrorRecord(at=now, kind=kind, entry=entry, delivery_id=retained_id(delivery_id),
                                             message=clip(message) or ""))
        self.state.error_counts[kind] = self.state.error_counts.get(kind, 0) + 1
        if len(self.state.errors) > MAX_ERRORS:
            del self.state.errors[: len(self.state.errors) - MAX_ERRORS]

    # ------------------------------------------------------------------ dedup entries
    def retain(
        self, entry: EntrySpec, key: str, digest: str, delivery_id: str | None, disposition: Disposition,
        now: datetime, detail: str | None, *, run_key: str | None = None, kind: str | None = None,
    ) -> None:
        """Record the disposition of an accepted event under its key; ``kind`` also counts and records an error."""
        record = EventRecord(entry=entry.name, delivery_id=delivery_id or key.split("\x1f", 1)[1], digest=digest,
                             disposition=disposition, run_key=run_key, accepted_at=now,
                             activation_id=self.spec.activation_id, detail=clip(detail), seq=self.next_seq())
        self.state.events[key] = record
        if disposition in RELEASED_AT_ACCEPTANCE:
            self.release(key, now)
        if kind:
            self.count(kind)
            self.record_error(now, kind, detail or kind, entry.name, delivery_id)

    def release(self, key: str, now: datetime) -> None:
        """The event's retention starts now (its run is terminal, or it started none)."""
        record = self.state.events.get(key)
        if record is not None and record.released_at is None:
            record.released_at = now
            self._release_queue.append((now, key))

    def lookup(self, key: str) -> EventRecord | None:
        """The retained dedup entry of an event key, live or retired (see _codec)."""
        record = self.state.events.get(key)
        if record is not None:
            return record
        retired = self.retired.get(key)
        if retired is None:
            return None
        digest, disposition, released = retired
        entry, _, ident = key.partition("\x1f")
        return EventRecord(entry=entry, delivery_id=ident, digest=digest, disposition=disposition, accepted_at=released,
                           released_at=released, activation_id=self.spec.activation_id, detail="retired")

    def retire_released(self, keep_live: int = KEEP_LIVE_RELEASED) -> int:
        """Move released dedup entries, all but the ``keep_live`` most recent, into the compact form
        (called before continue-as-new). Recent ones keep their full record for operators."""
        moved = 0
        while len(self._release_queue) > keep_live:
            _, key = self._release_queue.popleft()
            record = self.state.events.pop(key, None)
            if record is not None and record.released_at is not None:
                self.retired.add(key, record.digest, record.disposition, record.released_at)
                moved += 1
        return moved

    def retire_due(self, keep_live: int = KEEP_LIVE_RELEASED) -> bool:
        """Whether this run holds more released entries as full records than it carries as such
        (``keep_live``) plus ``limits.RECORDS_PER_RUN``: time to continue as new, which retires them
        into the compact form (a full record takes ~20 times a retired id's memory)."""
        return len(self._release_queue) > keep_live + RECORDS_PER_RUN

    def shed_oldest(self, n: int) -> datetime | None:
        """Drop the ``n`` dedup entries released longest ago, before their retention ends (the
        ``shed_oldest`` capacity policy); return the latest release instant dropped, or None."""
        shed, latest = self.retired.pop_oldest(n)  # retired before the live ones: released earlier
        while shed < n and self._release_queue:
            released, key = self._release_queue.popleft()
            record = self.state.events.get(key)
            if record is not None and record.released_at is not None:
                del self.state.events[key]
                latest = max(latest, released) if latest else released
                shed += 1
        if shed:
            self.count("dedup_shed", shed)
        return latest

    def expire(self, now: datetime) -> int:
        """Drop dedup entries whose retention elapsed (EXT-5, EXT-7); later deliveries count as new."""
        retention = self.spec.policies.dedup_retention
        expired = 0
        while self._release_queue and self._release_queue[0][0] + retention <= now:
            _, key = self._release_queue.popleft()
            record = self.state.events.get(key)
            if record is not None and record.released_at is not None and record.released_at + retention <= now:
                del self.state.events[key]
                expired += 1
        oldest = self.retired.oldest()
        if oldest is not None and oldest + retention <= now:
            expired += self.retired.pop_expired(now - retention)
        if expired:
            self.count("dedup_expired", expired)
        if self.state.redrive_kept:  # kept for re-drive as long as a dedup entry is kept (_kept)
            _kept.expire(self.state, now, retention)
        return expired

    def next_expiry(self) -> datetime | None:
        fronts = [t for t in (self._release_queue[0][0] if self._release_queue else None, self.retired.oldest()) if t]
        return min(fronts) + self.spec.policies.dedup_retention if fronts else None
