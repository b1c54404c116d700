"""Scheduled initiation inside the engine (SCHED-1..15).

The occurrence sequence comes from :mod:`workfile.schedule` (deterministic from the fixed
configuration and the recorded tzdata version). Here: which occurrences are due, which are on
time, which were missed, the missed-occurrence policy, overflow ranges, backfill, pause/resume.

An occurrence ``t`` is *on time* when it is admitted no later than ``late_after`` after ``t``;
otherwise it was *missed* (the activation could not schedule it: worker down, paused) and the
policy decides: ``skip`` records it as skipped; ``catch_up`` admits the earliest ``bound`` missed
occurrences in instant order and records the rest as one overflow range, which either waits for
an operator decision (``wait_for_operator``, the default) or is recorded as skipped
(``skip_overflow``). Several occurrences are never collapsed into one run (SCHED-10).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from .. import schedule as seq
from ..activation import ActivationSpec, EntrySpec
from ._types import OccurrenceRecord, OverflowRange, ScheduleState

if TYPE_CHECKING:
    from ._engine import Engine

MAX_OCCURRENCE_LOG = 300
ENUMERATION_CAP = 200_000
ON_TIME_CAP = 10_000


def new_schedule_state(entry: EntrySpec, spec: ActivationSpec, now: datetime) -> ScheduleState:
    missed = spec.policies.missed
    parsed = seq.parse_schedule(entry.config)
    state = ScheduleState(entry=entry.name, policy=missed.policy, bound=missed.bound,
                          tzdata_version=parsed.tzdata_version, last_instant=now)
    refresh_next(state, parsed)
    return state


def refresh_next(state: ScheduleState, parsed: seq.ScheduleSpec) -> None:
    after = state.last_instant
    nxt = seq.next_occurrences(parsed, after, 1) if after is not None else []
    state.next_instant = nxt[0] if nxt else None
    if state.next_instant is None:
        state.active = False
        state.inactive_reason = "no future occurrence: the sequence has ended or never starts (SCHED-4)"


def schedule_tick(engine: "Engine", now: datetime) -> None:
    for entry in engine.spec.entries:
        st = engine.state.schedules.get(entry.name)
        if st is None or not st.active or st.paused:
            continue
        if st.next_instant is not None and st.next_instant > now:
            continue
        _advance(engine, entry, st, now)


def _advance(engine: "Engine", entry: EntrySpec, st: ScheduleState, now: datetime) -> None:
    parsed = engine.parsed_schedule(entry.name)
    last = st.last_instant or now
    cutoff = now - engine.spec.policies.late_after
    missed: list[datetime] = []
    if cutoff > last:
        missed = seq.occurrences_between(parsed, last, cutoff - timedelta(microseconds=1), ENUMERATION_CAP)
    on_time_from = missed[-1] if missed else last
    on_time = seq.occurrences_between(parsed, max(on_time_from, last), now, ON_TIME_CAP)
    if missed:
        _handle_missed(engine, entry, st, missed, now)
    for instant in on_time:
        admit_occurrence(engine, entry, st, instant, now, "admitted")
    processed = (missed[-1:] + on_time[-1:])
    if processed:
        st.last_instant = max(processed)
    refresh_next(st, parsed)


def _handle_missed(engine: "Engine", entry: EntrySpec, st: ScheduleState, missed: list[datetime], now: datetime) -> None:
    policy = engine.spec.policies.missed
    if policy.policy == "skip":
        for instant in missed:
            _log(st, engine, entry, instant, "skipped_missed", None, None)
        return
    bound = policy.bound or 0
    for instant in missed[:bound]:
        admit_occurrence(engine, entry, st, instant, now, "caught_up")
    rest = missed[bound:]
    if rest:
        status = "awaiting_operator" if policy.overflow == "wait_for_operator" else "skipped"
        st.overflow.append(OverflowRange(
            range_id=f"{entry.name}-{rest[0].strftime('%Y%m%dT%H%M%SZ')}", entry=entry.name, first=rest[0],
            last=rest[-1], count=len(rest), status=status, decided_at=None if status == "awaiting_operator" else now,
            note=f"catch-up bound {bound} exceeded by {len(rest)} occurrence(s) (SCHED-10)",
        ))
        st.counts["overflowed"] = st.counts.get("overflowed", 0) + len(rest)


def admit_occurrence(engine: "Engine", entry: EntrySpec, st: ScheduleState, instant: datetime, now: datetime, how: str) -> str:
    """Admit one occurrence through the common pipeline; returns its recorded disposition."""
    parsed = engine.parsed_schedule(entry.name)
    tz = parsed.timezone
    payload = {
        "scheduled_at": seq.to_local_iso(instant, tz),
        "fired_at": seq.to_local_iso(max(now, instant), tz),
        "timezone": tz,
        "tzdata_version": st.tzdata_version,
    }
    ident = instant.strftime("%Y%m%dT%H%M%S") + (f".{instant.microsecond:06d}" if instant.microsecond else "") + "Z"
    key = f"{entry.name}\x1f@{ident}"
    if key in engine.state.events:
        _log(st, engine, entry, instant, "duplicate", None, None)
        return "duplicate"
    problem = engine.validate_payload(entry, payload)
    if problem is not None:  # SCHED-11: validated before acceptance
        engine.record_error(now, "invalid", f"occurrence {payload['scheduled_at']} failed validation: {problem}", entry.name)
        _log(st, engine, entry, instant, "invalid", None, None)
        return "invalid"
    from ._engine import payload_digest

    disposition, run_key, _ = engine._accept(entry, payload, key, payload_digest({"scheduled_at": payload["scheduled_at"]}),
                                             now, scheduled_at=payload["scheduled_at"], ident=ident)
    value = disposition.value
    recorded = how if value in ("accepted", "queued", "batched") else value
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
    if len(st.occurrences) > MAX_OCCURRENCE_LOG:
        del st.occurrences[: len(st.occurrences) - MAX_OCCURRENCE_LOG]


def decide_overflow(engine: "Engine", range_id: str, choice: str, count: int | None, now: datetime, note: str | None) -> str:
    """Operator decision on an overflow range: admit_all, admit_first (count), or skip."""
    for st in engine.state.schedules.values():
        for rng in st.overflow:
            if rng.range_id != range_id:
                continue
            if rng.status != "awaiting_operator":
                return f"range {range_id} was already decided ({rng.status})"
            entry = engine.entry(rng.entry)
            parsed = engine.parsed_schedule(rng.entry)
            instants = seq.occurrences_between(parsed, rng.first - timedelta(microseconds=1), rng.last, ENUMERATION_CAP)
            if choice == "skip":
                take: list[datetime] = []
            elif choice == "admit_all":
                take = instants
            elif choice == "admit_first" and count and count > 0:
                take = instants[:count]
            else:
                return "choice must be admit_all, admit_first (with count >= 1) or skip"
            for instant in take:
                admit_occurrence(engine, entry, st, instant, now, "caught_up")
            for instant in instants[len(take):]:
                _log(st, engine, entry, instant, "skipped_overflow", None, None)
            rng.status = "skipped" if not take else ("admitted" if len(take) == len(instants) else "partially_admitted")
            rng.decided_at, rng.note = now, note or rng.note
            return f"{len(take)} admitted, {len(instants) - len(take)} skipped"
    return f"no overflow range {range_id!r}"


def backfill(engine: "Engine", entry_name: str, start: datetime, end: datetime, now: datetime) -> str:
    """Admit the occurrences of a past range, each at most once (SCHED-5)."""
    entry = engine.spec.entry(entry_name)
    st = engine.state.schedules.get(entry_name)
    if entry is None or st is None:
        return f"no schedule entry {entry_name!r}"
    if end > now:
        return "backfill covers past instants only: end must not be in the future"
    instants = seq.occurrences_between(engine.parsed_schedule(entry_name), start - timedelta(microseconds=1), end, 10_001)
    if len(instants) > 10_000:
        return "backfill range holds more than 10000 occurrences; split it"
    results = [admit_occurrence(engine, entry, st, t, now, "backfilled") for t in instants]
    return f"{results.count('backfilled')} admitted, {results.count('duplicate')} already had a run, {len(results)} in range"
