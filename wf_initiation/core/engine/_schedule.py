"""Scheduled initiation inside the engine (SCHED-1..15).

The occurrence sequence comes from :mod:`wf_initiation.core.schedule` (deterministic from the fixed
configuration and the recorded tzdata version, SCHED-2). Here: which occurrences are due, which are
on time, which were missed, the missed-occurrence policy, overflow ranges, backfill, pause/resume.

Rules, as documented to users:

* An occurrence ``t`` is admitted no earlier than ``t`` (SCHED-6). It is *on time* when admitted no
  later than the deployment's ``late_after`` after ``t``; otherwise it was *missed* (the activation
  could not schedule it: worker down, activation paused). Every occurrence whose instant fell while
  the activation was paused counts as missed at resume, however recent.
* Missed occurrences follow the one declared policy (SCHED-8, SCHED-9): ``skip`` records each gap
  as a range in ``missed_ranges`` (plus the most recent ones individually in ``occurrences``);
  ``catch_up`` admits the earliest ``bound`` missed occurrences of a gap in instant order and
  records the rest as an overflow range that waits for an operator decision
  (``overflow: wait_for_operator``, the default: ``decide_overflow`` admit_all | admit_first |
  skip) or is recorded as skipped (``overflow: skip_overflow``). Several occurrences are never
  collapsed into one run (SCHED-10). A range is a span of the deterministic sequence, so it names
  every occurrence it holds.
* One workflow task enumerates at most :data:`CHUNK` occurrences. A longer gap is worked off over
  several consecutive tasks: ``missed_through`` keeps the gap open so that its rest is still
  missed (never on time) and ``gap_admitted`` keeps one catch-up bound for the whole gap; an
  overflow range then comes as several consecutive ranges, each naming its own occurrences.
* tz database: the binding records the ``tzdata`` version it was activated with. A worker whose
  ``tzdata`` differs keeps scheduling with the only database it has, records a ``tzdata_changed``
  initiation error naming both versions and the fix, and from then on every occurrence record
  carries the version actually used, so each recorded instant stays reproducible (SCHED-2).
* Identity is the instant (SCHED-13): the event key is ``<entry>@<UTC instant>``, the run key
  ``<activation_id>/<entry>/<UTC compact instant>`` is the run's workflow id, so no restart,
  replay, backfill or retried start can give one occurrence a second run (SCHED-5).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from .. import schedule as seq
from ..activation import ActivationSpec, EntrySpec
from ._types import OperatorRefused
from ._types import OccurrenceRecord, OverflowRange, ScheduleState

if TYPE_CHECKING:
    from ._engine import Engine

MAX_OCCURRENCE_LOG = 300
CHUNK = 10_000  # occurrences enumerated per workflow task (croniter: ~35 us each)
TICK = timedelta(microseconds=1)
ADMITTED = ("accepted", "queued", "batched")


def new_schedule_state(
    entry: EntrySpec, spec: ActivationSpec, now: datetime, parsed: seq.ScheduleSpec | None = None
) -> ScheduleState:
    """Fresh schedule state: occurrences strictly after ``now`` (the activation instant) are due.

    ``parsed`` is the engine's parse of the entry (legacy rules when replaying an older history)."""
    missed = spec.policies.missed
    parsed = parsed if parsed is not None else seq.parse_schedule(entry.config)
    state = ScheduleState(entry=entry.name, policy=missed.policy, bound=missed.bound,
                          tzdata_version=spec.tzdata_version or parsed.tzdata_version, last_instant=now)
    refresh_next(state, parsed)
    return state


def refresh_next(state: ScheduleState, parsed: seq.ScheduleSpec) -> None:
    """Set ``next_instant`` from ``last_instant``; with none left the schedule is inactive (SCHED-4)."""
    after = state.last_instant
    nxt = seq.next_occurrences(parsed, after, 1) if after is not None else []
    state.next_instant = nxt[0] if nxt else None
    if state.next_instant is None:
        state.active = False
        state.inactive_reason = "no future occurrence: the sequence has ended or never starts (SCHED-4)"


def schedule_tick(engine: "Engine", now: datetime) -> None:
    """Dispose of every due occurrence of every active, unpaused schedule entry."""
    for entry in engine.spec.entries:
        st = engine.state.schedules.get(entry.name)
        if st is None or not st.active or st.paused:
            continue
        _check_tzdata(engine, st, now)
        if st.next_instant is None:
            # operator.resume clears next_instant: what fell due while paused was missed.
            st.missed_through = max(st.missed_through or now, now)
        elif st.next_instant > now:
            continue
        _advance(engine, entry, st, now)


def _check_tzdata(engine: "Engine", st: ScheduleState, now: datetime) -> None:
    worker = seq.TZDATA_VERSION
    if st.tzdata_version == worker:
        return
    engine.record_error(now, "tzdata_changed", (
        f"schedule {st.entry!r} was bound to tz database {st.tzdata_version} but this worker has {worker}; "
        f"occurrences from now on are computed with {worker} and recorded with it (SCHED-2). To keep "
        f"{st.tzdata_version}, run workers with tzdata=={st.tzdata_version}; to adopt {worker}, activate again"
    ), st.entry)
    st.tzdata_version = worker


def _advance(engine: "Engine", entry: EntrySpec, st: ScheduleState, now: datetime) -> None:
    parsed = engine.parsed_schedule(entry.name)
    last = st.last_instant or now
    missed_bound = now - engine.spec.policies.late_after - TICK  # t <= missed_bound <=> t + late_after < now
    if st.missed_through is not None:
        missed_bound = max(missed_bound, min(st.missed_through, now))
    missed = seq.occurrences_between(parsed, last, missed_bound, CHUNK + 1) if missed_bound > last else []
    if len(missed) > CHUNK:  # long gap: the rest stays missed in the next task, never on time
        missed = missed[:CHUNK]
        _handle_missed(engine, entry, st, missed, now)
        st.missed_through, st.last_instant = missed_bound, missed[-1]
        refresh_next(st, parsed)
        return
    if missed:
        _handle_missed(engine, entry, st, missed, now)
        last = missed[-1]
    st.missed_through, st.gap_admitted = None, 0
    on_time = seq.occurrences_between(parsed, last, now, CHUNK - len(missed))
    for instant in on_time:
        admit_occurrence(engine, entry, st, instant, now, "admitted")
    st.last_instant = on_time[-1] if on_time else last
    refresh_next(st, parsed)


def _handle_missed(engine: "Engine", entry: EntrySpec, st: ScheduleState, missed: list[datetime], now: datetime) -> None:
    policy = engine.spec.policies.missed
    if policy.policy == "skip":
        st.missed_ranges.append(_range(entry, missed, "skipped", now, "missed while the activation could not "
                                       "schedule them; policy skip (SCHED-8)"))
        _log_many(st, engine, entry, missed, "skipped_missed")
        return
    take = max(0, (policy.bound or 0) - st.gap_admitted)
    for instant in missed[:take]:
        admit_occurrence(engine, entry, st, instant, now, "caught_up")
    st.gap_admitted += min(take, len(missed))
    rest = missed[take:]
    if not rest:
        return
    waiting = policy.overflow == "wait_for_operator"
    st.overflow.append(_range(
        entry, rest, "awaiting_operator" if waiting else "skipped", None if waiting else now,
        f"catch-up bound {policy.bound} exceeded by {len(rest)} occurrence(s) (SCHED-10); "
        + ("decide with decide_overflow: admit_all, admit_first (count) or skip" if waiting else "overflow policy skip_overflow"),
    ))
    st.counts["overflowed"] = st.counts.get("overflowed", 0) + len(rest)
    if not waiting:
        _log_many(st, engine, entry, rest, "skipped_overflow")


def _range(entry: EntrySpec, instants: Sequence[datetime], status: str, decided_at: datetime | None, note: str) -> OverflowRange:
    return OverflowRange(range_id=f"{entry.name}-{_ident(instants[0])}", entry=entry.name, first=instants[0],
                         last=instants[-1], count=len(instants), status=status, decided_at=decided_at, note=note)


def _ident(instant: datetime) -> str:
    """Compact UTC form of an instant: the occurrence's identity within its binding (SCHED-13)."""
    return instant.strftime("%Y%m%dT%H%M%S") + (f".{instant.microsecond:06d}" if instant.microsecond else "") + "Z"


def occurrence_key(entry: str, instant: datetime) -> str:
    """Dedup key of one occurrence: entry name + instant."""
    return f"{entry}\x1f@{_ident(instant)}"


def admit_occurrence(engine: "Engine", entry: EntrySpec, st: ScheduleState, instant: datetime, now: datetime, how: str) -> str:
    """Admit one occurrence through the common pipeline; returns its recorded disposition.

    ``how`` names an admission (admitted, caught_up, backfilled); a guard that is false records
    ``suppressed``, a faulting guard ``guard_fault`` (BATCH-8), overlap ``skipped`` (SCHED-14).
    """
    if instant > now:
        raise ValueError(f"occurrence {instant.isoformat()} is in the future; it cannot be admitted before its instant (SCHED-6)")
    tz = engine.parsed_schedule(entry.name).timezone
    payload = {
        "scheduled_at": seq.to_local_iso(instant, tz),
        "fired_at": seq.to_local_iso(now, tz),
        "timezone": tz,
        "tzdata_version": st.tzdata_version,
    }
    key = occurrence_key(entry.name, instant)
    if engine.lookup(key) is not None:
        _log(st, engine, entry, instant, "duplicate", None, engine.lookup(key).run_key)
        return "duplicate"
    problem = engine.validate_payload(entry, payload)
    if problem is not None:  # SCHED-11: validated before acceptance
        engine.record_error(now, "invalid", f"occurrence {payload['scheduled_at']} failed validation: {problem}", entry.name)
        _log(st, engine, entry, instant, "invalid", None, None)
        return "invalid"
    from ._engine import payload_digest

    disposition, run_key, _ = engine._accept(entry, payload, key, payload_digest({"scheduled_at": payload["scheduled_at"]}),
                                             now, scheduled_at=payload["scheduled_at"], ident=_ident(instant))
    value = disposition.value
    recorded = how if value in ADMITTED else value
    _log(st, engine, entry, instant, recorded, now, run_key)
    return recorded


def _log(st: ScheduleState, engine: "Engine", entry: EntrySpec, instant: datetime, disposition: str,
         fired_at: datetime | None, run_key: str | None) -> None:
    tz = engine.parsed_schedule(entry.name).timezone
    st.occurrences.append(OccurrenceRecord(
        scheduled_at=seq.to_local_iso(instant, tz), utc=instant, disposition=disposition, fired_at=fired_at,
        run_key=run_key, tzdata_version=st.tzdata_version,
    ))
    st.counts[disposition] = st.counts.get(disposition, 0) + 1
    if len(st.occurrences) > 2 * MAX_OCCURRENCE_LOG:
        del st.occurrences[: len(st.occurrences) - MAX_OCCURRENCE_LOG]


def _log_many(st: ScheduleState, engine: "Engine", entry: EntrySpec, instants: Sequence[datetime], disposition: str) -> None:
    """Count every one; keep individual records for the most recent (the range records them all)."""
    for instant in instants[-MAX_OCCURRENCE_LOG:]:
        _log(st, engine, entry, instant, disposition, None, None)
    st.counts[disposition] = st.counts.get(disposition, 0) + max(0, len(instants) - MAX_OCCURRENCE_LOG)


def decide_overflow(engine: "Engine", range_id: str, choice: str, count: int | None, now: datetime, note: str | None) -> str:
    """Operator decision on an overflow range: ``admit_all``, ``admit_first`` (``count``, the rest skipped), ``skip``."""
    for st in engine.state.schedules.values():
        for rng in st.overflow:
            if rng.range_id != range_id:
                continue
            if rng.status != "awaiting_operator":
                raise OperatorRefused(f"range {range_id} was already decided ({rng.status})")
            entry = engine.entry(rng.entry)
            instants = seq.occurrences_between(engine.parsed_schedule(rng.entry), rng.first - TICK, rng.last, rng.count)
            if choice == "skip":
                take: list[datetime] = []
            elif choice == "admit_all":
                take = instants
            elif choice == "admit_first" and count and count > 0:
                take = instants[:count]
            else:
                raise OperatorRefused("choice must be admit_all, admit_first (with count >= 1) or skip")
            results = [admit_occurrence(engine, entry, st, instant, now, "caught_up") for instant in take]
            _log_many(st, engine, entry, instants[len(take):], "skipped_overflow")
            rng.status = "skipped" if not take else ("admitted" if len(take) == len(instants) else "partially_admitted")
            rng.decided_at, rng.note = now, note or rng.note
            return f"{results.count('caught_up')} admitted, {len(instants) - len(take)} skipped"
    raise OperatorRefused(f"no overflow range {range_id!r}")


def backfill(engine: "Engine", entry_name: str, start: datetime, end: datetime, now: datetime) -> str:
    """Admit the occurrences ``start <= t <= end`` of a past range, each at most once (SCHED-5)."""
    entry = engine.spec.entry(entry_name)
    st = engine.state.schedules.get(entry_name)
    if entry is None or st is None:
        raise OperatorRefused(f"no schedule entry {entry_name!r}")
    if end > now:
        raise OperatorRefused("backfill covers past instants only: end must not be in the future (SCHED-6)")
    if end < start:
        raise OperatorRefused("backfill range is empty: end is before start")
    instants = seq.occurrences_between(engine.parsed_schedule(entry_name), start - TICK, end, CHUNK + 1)
    if len(instants) > CHUNK:
        raise OperatorRefused(f"backfill range holds more than {CHUNK} occurrences; split it into smaller ranges")
    results = [admit_occurrence(engine, entry, st, t, now, "backfilled") for t in instants]
    return (f"{results.count('backfilled')} admitted, {results.count('duplicate')} already had a run or a disposition, "
            f"{len(results)} in range")
