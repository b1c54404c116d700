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
* One workflow task enumerates at most :data:`CHUNK` occurrences (``limits.ENUMERATE_PER_TASK``,
  and under ``catch_up`` no more than the task's admission budget, ``limits.ADMIT_PER_TASK``, in
  runs begun with the budgets). A longer gap is worked off over several consecutive tasks: ``missed_through`` keeps the gap open so that its rest is still
  missed (never on time) and ``gap_admitted`` keeps one catch-up bound for the whole gap; an
  overflow range then comes as several consecutive ranges, each naming its own occurrences.
* tz database: the binding records the ``tzdata`` version it was activated with. A worker whose
  ``tzdata`` differs keeps scheduling with the only database it has, records a ``tzdata_changed``
  initiation error naming both versions and the fix, and from then on every occurrence record
  carries the version actually used, so each recorded instant stays reproducible (SCHED-2).
* Options of the deployment's ``schedule:`` (Temporal Schedules' own, docs/deployment.md):
  ``jitter`` admits each occurrence ``t`` at ``due_at(t)``: ``t`` plus a delay that is a pure
  function of the binding and ``t`` (a hash), under the jitter and under the gap to the next
  occurrence, so occurrences stay in instant order and none is ever admitted early (SCHED-6); its
  lateness (``late_after``) counts from then, and ``fired_at`` is then. ``pause_on_failure``: a run
  of the entry that fails or times out pauses its schedule with a note naming the run
  (:func:`run_failed`). ``remaining_runs``: the schedule admits that many occurrences by itself
  (on time or caught up), then is inactive (:func:`refresh_next`); the count belongs to the limit
  it was started under. ``trigger`` (:func:`trigger`): one run now, identified by the operator's
  action id, never an occurrence of the sequence.
* Identity is the instant (SCHED-13): the event key is ``<entry>@<UTC instant>``, the run key
  ``<activation_id>/<entry>/<UTC compact instant>`` is the run's workflow id, so no restart,
  replay, backfill or retried start can give one occurrence a second run (SCHED-5).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Literal

from .. import schedule
from ..activation import ActivationSpec, EntrySpec
from ..deployment import ScheduleOptions
from ..limits import ADMIT_PER_TASK, ENUMERATE_PER_TASK, MAX_BACKFILL
from ._keys import event_key, payload_digest
from ._pipeline import Pipeline
from ._types import AdmitJob, OccurrenceRecord, OperatorRefused, OverflowRange, RunRecord, ScheduleState, TriggerRecord

RangeStatus = Literal["awaiting_operator", "admitted", "skipped", "partially_admitted"]


MAX_OCCURRENCE_LOG = 300
CHUNK = 10_000  # occurrences enumerated per workflow task before the budgets (croniter: ~40 us each)
TICK = timedelta(microseconds=1)
ADMITTED = ("accepted", "queued", "batched")
MAX_FINISHED_JOBS = 20
ACTIVE = ("counting", "admitting")  # job states still to work off (_jobs)
PAUSING = frozenset({"failed", "timed_out"})  # run outcomes that pause a schedule with pause_on_failure
MAX_TRIGGERS = 20  # trigger records kept per entry (the operator log keeps them all, bounded)
MAX_DUE_TIMES = 1_000  # jittered instants remembered per engine (recomputed when forgotten)


def new_schedule_state(
    entry: EntrySpec, spec: ActivationSpec, now: datetime, parsed: schedule.ScheduleSpec | None = None
) -> ScheduleState:
    """Fresh schedule state: occurrences strictly after ``now`` (the activation instant) are due.

    ``parsed`` is the engine's parse of the entry (legacy rules when replaying an older history)."""
    missed = spec.policies.missed
    parsed = parsed if parsed is not None else schedule.parse_schedule(entry.config)
    state = ScheduleState(entry=entry.name, policy=missed.policy, bound=missed.bound,
                          tzdata_version=spec.tzdata_version or parsed.tzdata_version, last_instant=now,
                          run_limit=options_of(spec, entry.name).remaining_runs)
    refresh_next(state, parsed)
    return state


def options_of(spec: ActivationSpec, entry: str) -> ScheduleOptions:
    """The deployment's schedule options for ``entry`` (``schedule:``, or its own under ``schedule.entries``)."""
    return spec.policies.schedule.options(entry)


def refresh_next(state: ScheduleState, parsed: schedule.ScheduleSpec) -> None:
    """Set ``next_instant`` from ``last_instant``; with none left (SCHED-4), or its ``remaining_runs``
    admitted, the schedule is inactive."""
    if exhausted(state):
        state.next_instant, state.active = None, False
        state.inactive_reason = (f"remaining_runs: its {state.run_limit} occurrence(s) were admitted; activate it "
                                 "with another remaining_runs (or none) to go on")
        return
    after = state.last_instant
    nxt = schedule.next_occurrences(parsed, after, 1) if after is not None else []
    state.next_instant = nxt[0] if nxt else None
    if state.next_instant is None:
        state.active = False
        state.inactive_reason = "no future occurrence: the sequence has ended or never starts (SCHED-4)"


def exhausted(state: ScheduleState) -> bool:
    """Whether the schedule admitted the ``remaining_runs`` it was given."""
    return state.run_limit is not None and state.runs_counted >= state.run_limit


def carry_over(fresh: ScheduleState, current: ScheduleState) -> None:
    """What a schedule keeps when its activation is bound again (``Machine.rebind``, ``sync_sources``):
    its sequence position, records and pause with its note; its count of runs when ``remaining_runs``
    is unchanged (a new value starts a new count)."""
    fresh.last_instant, fresh.occurrences, fresh.counts, fresh.overflow, fresh.jobs = (
        current.last_instant, current.occurrences, current.counts, current.overflow, current.jobs)
    fresh.paused, fresh.paused_at, fresh.note, fresh.resumed_at, fresh.failed_run, fresh.triggers = (
        current.paused, current.paused_at, current.note, current.resumed_at, current.failed_run, current.triggers)
    if fresh.run_limit == current.run_limit:
        fresh.runs_counted = current.runs_counted


# ------------------------------------------------------------------------------------------ jitter


def jitter_delay(seed: str, instant: datetime, bound: timedelta) -> timedelta:
    """The delay of the occurrence at ``instant``: whole milliseconds in ``[0, bound)``, a pure function of
    ``seed`` (the binding and entry) and the instant, so a replay, a restart and every worker agree."""
    bound_ms = bound // timedelta(milliseconds=1)
    if bound_ms <= 0:
        return timedelta(0)
    digest = hashlib.sha256(f"{seed}\x1f{_ident(instant)}".encode()).digest()
    return timedelta(milliseconds=int.from_bytes(digest[:8], "big") * bound_ms >> 64)


def due_at(engine: Pipeline, entry: str, instant: datetime) -> datetime:
    """When the occurrence at ``instant`` is admitted: the instant plus its jitter, never before it
    (SCHED-6) and before the next occurrence's instant (the sequence keeps its order)."""
    jitter = options_of(engine.spec, entry).jitter
    if not jitter:
        return instant
    key = (engine.spec.activation_id, entry, instant)
    due = engine.due_times.get(key)
    if due is None:
        following = schedule.next_occurrences(engine.parsed_schedule(entry), instant, 1)
        bound = min(jitter, following[0] - instant) if following else jitter
        due = instant + jitter_delay(f"{engine.spec.activation_id}\x1f{entry}", instant, bound)
        if len(engine.due_times) >= MAX_DUE_TIMES:
            engine.due_times.clear()
        engine.due_times[key] = due
    return due


def _due_prefix(engine: Pipeline, entry: str, instants: list[datetime], through: datetime,
                missed_through: datetime | None = None) -> list[datetime]:
    """The leading ``instants`` due by ``through`` (jittered); those up to ``missed_through`` whatever
    their jitter. Due instants ascend with the instants, so the rest are not due yet."""
    if not options_of(engine.spec, entry).jitter:
        return instants
    for i, instant in enumerate(instants):
        if not ((missed_through is not None and instant <= missed_through) or due_at(engine, entry, instant) <= through):
            return instants[:i]
    return instants


def schedule_tick(engine: Pipeline, now: datetime) -> None:
    """Dispose of every due occurrence of every active, unpaused schedule entry."""
    for entry in engine.spec.entries:
        st = engine.state.schedules.get(entry.name)
        if st is None or not st.active or st.paused:
            continue
        _check_tzdata(engine, st, now)
        if st.next_instant is None:
            # operator.resume clears next_instant: what fell due while paused was missed.
            st.missed_through = max(st.missed_through or now, now)
        elif due_at(engine, entry.name, st.next_instant) > now:
            continue
        _advance(engine, entry, st, now)


def _check_tzdata(engine: Pipeline, st: ScheduleState, now: datetime) -> None:
    worker = schedule.TZDATA_VERSION
    if st.tzdata_version == worker:
        return
    engine.record_error(now, "tzdata_changed", (
        f"schedule {st.entry!r} was bound to tz database {st.tzdata_version} but this worker has {worker}; "
        f"occurrences from now on are computed with {worker} and recorded with it (SCHED-2). To keep "
        f"{st.tzdata_version}, run workers with tzdata=={st.tzdata_version}; to adopt {worker}, activate again"
    ), st.entry)
    st.tzdata_version = worker


def _advance(engine: Pipeline, entry: EntrySpec, st: ScheduleState, now: datetime) -> None:
    parsed = engine.parsed_schedule(entry.name)
    catch_up = engine.spec.policies.missed.policy == "catch_up"
    enumerate_max, admit_max = _per_task(engine)
    if admit_max <= 0:
        return  # this task's admission budget is spent; its wake-up is due, the next task goes on
    chunk = min(enumerate_max, admit_max) if catch_up else enumerate_max  # catch-up may admit each one
    last = st.last_instant or now
    late_bound = now - engine.spec.policies.late_after - TICK  # due <= late_bound <=> due + late_after < now
    missed_bound, through = late_bound, None
    if st.missed_through is not None:
        through = min(st.missed_through, now)
        missed_bound = max(missed_bound, through)
    missed = schedule.occurrences_between(parsed, last, missed_bound, chunk + 1) if missed_bound > last else []
    missed = _due_prefix(engine, entry.name, missed, late_bound, through)  # jittered: missed once late after due
    if len(missed) > chunk:  # long gap: the rest stays missed in the next task, never on time
        missed = missed[:chunk]
        ended = _handle_missed(engine, entry, st, missed, now)
        _spend(engine, len(missed) if catch_up else 0)
        st.missed_through, st.last_instant = missed_bound, missed[-1]
        if ended is not None:
            st.missed_through, st.gap_admitted, st.last_instant = None, 0, ended
        refresh_next(st, parsed)
        return
    if missed:
        ended = _handle_missed(engine, entry, st, missed, now)
        _spend(engine, len(missed) if catch_up else 0)
        last = missed[-1] if ended is None else ended
    st.missed_through, st.gap_admitted = None, 0
    if exhausted(st):
        st.last_instant = last
        refresh_next(st, parsed)
        return
    on_time_max = enumerate_max - len(missed)
    if engine.bounded:
        on_time_max = min(on_time_max, engine.task_budget)  # the rest follows in the next task
    on_time = _due_prefix(engine, entry.name, schedule.occurrences_between(parsed, last, now, on_time_max), now)
    for instant in on_time:
        last = instant
        if not _admit_counted(engine, entry, st, instant, now, "admitted"):
            break  # remaining_runs reached: the schedule ends here
    _spend(engine, len(on_time))
    st.last_instant = last
    refresh_next(st, parsed)


def _admit_counted(engine: Pipeline, entry: EntrySpec, st: ScheduleState, instant: datetime, now: datetime, how: str) -> bool:
    """Admit an occurrence the schedule takes by itself, counted against ``remaining_runs``; False
    once they are all admitted."""
    if admit_occurrence(engine, entry, st, instant, now, how) == how and st.run_limit is not None:
        st.runs_counted += 1
    return not exhausted(st)


def _per_task(engine: Pipeline) -> tuple[int, int]:
    """(occurrences to enumerate, occurrences to admit) in this task; unbounded before the budgets."""
    if not engine.bounded:
        return CHUNK, CHUNK
    return ENUMERATE_PER_TASK, engine.task_budget


def _spend(engine: Pipeline, admitted: int) -> None:
    if engine.bounded:
        engine.task_budget -= admitted


def _handle_missed(engine: Pipeline, entry: EntrySpec, st: ScheduleState, missed: list[datetime],
                   now: datetime) -> datetime | None:
    """Dispose of missed occurrences under the policy; the instant at which ``remaining_runs`` ran out, if it did."""
    policy = engine.spec.policies.missed
    if policy.policy == "skip":
        st.missed_ranges.append(_range(entry, missed, "skipped", now, "missed while the activation could not "
                                       "schedule them; policy skip (SCHED-8)"))
        _log_many(st, engine, entry, missed, "skipped_missed")
        return None
    take = max(0, (policy.bound or 0) - st.gap_admitted)
    for i, instant in enumerate(missed[:take]):
        if not _admit_counted(engine, entry, st, instant, now, "caught_up"):
            st.gap_admitted += i + 1
            return instant  # the schedule ends at its remaining_runs: what follows is neither admitted nor held
    st.gap_admitted += min(take, len(missed))
    rest = missed[take:]
    if not rest:
        return None
    waiting = policy.overflow == "wait_for_operator"
    st.overflow.append(_range(
        entry, rest, "awaiting_operator" if waiting else "skipped", None if waiting else now,
        f"catch-up bound {policy.bound} exceeded by {len(rest)} occurrence(s) (SCHED-10); "
        + ("decide with decide_overflow: admit_all, admit_first (count) or skip" if waiting else "overflow policy skip_overflow"),
    ))
    st.counts["overflowed"] = st.counts.get("overflowed", 0) + len(rest)
    if not waiting:
        _log_many(st, engine, entry, rest, "skipped_overflow")
    return None


def _range(entry: EntrySpec, instants: Sequence[datetime], status: RangeStatus, decided_at: datetime | None, note: str) -> OverflowRange:
    return OverflowRange(range_id=f"{entry.name}-{_ident(instants[0])}", entry=entry.name, first=instants[0],
                         last=instants[-1], count=len(instants), status=status, decided_at=decided_at, note=note)


def _ident(instant: datetime) -> str:
    """Compact UTC form of an instant: the occurrence's identity within its binding (SCHED-13)."""
    # Formatted by hand: strftime costs an import hook per call inside the workflow sandbox.
    t = instant
    stamp = (f"{t.year:04d}{t.month:02d}{t.day:02d}T{t.hour:02d}{t.minute:02d}{t.second:02d}" if t.year >= 1000
             else t.strftime("%Y%m%dT%H%M%S"))
    return stamp + (f".{t.microsecond:06d}" if t.microsecond else "") + "Z"


def local_iso(engine: Pipeline, instant: datetime, timezone: str) -> str:
    """:func:`schedule.to_local_iso` with the zone loaded once per engine: loading it reads the
    tzdata package through importlib, which the workflow sandbox makes ~1 ms a call."""
    zone = engine.zones.get(timezone)
    if zone is None:
        zone = engine.zones[timezone] = schedule.load_zone(timezone)
    return instant.astimezone(zone).isoformat()


def occurrence_key(entry: str, instant: datetime) -> str:
    """Dedup key of one occurrence: entry name + instant."""
    return f"{entry}\x1f@{_ident(instant)}"


def admit_occurrence(engine: Pipeline, entry: EntrySpec, st: ScheduleState, instant: datetime, now: datetime, how: str) -> str:
    """Admit one occurrence through the common pipeline; returns its recorded disposition.

    ``how`` names an admission (admitted, caught_up, backfilled); a guard that is false records
    ``suppressed``, a faulting guard ``guard_fault`` (BATCH-8), overlap ``skipped`` (SCHED-14).
    """
    if instant > now:
        raise ValueError(f"occurrence {instant.isoformat()} is in the future; it cannot be admitted before its instant (SCHED-6)")
    tz = engine.parsed_schedule(entry.name).timezone
    payload = {
        "scheduled_at": local_iso(engine, instant, tz),
        "fired_at": local_iso(engine, now, tz),
        "timezone": tz,
        "tzdata_version": st.tzdata_version,
    }
    key = occurrence_key(entry.name, instant)
    seen = engine.lookup(key)
    if seen is not None:
        _log(st, engine, entry, instant, "duplicate", None, seen.run_key)
        return "duplicate"
    problem = engine.validate_payload(entry, payload)
    if problem is not None:  # SCHED-11: validated before acceptance
        engine.record_error(now, "invalid", f"occurrence {payload['scheduled_at']} failed validation: {problem}", entry.name)
        _log(st, engine, entry, instant, "invalid", None, None)
        return "invalid"
    digest = payload_digest({"scheduled_at": payload["scheduled_at"]})
    outcome = engine.accept(entry, payload, key, digest, now, scheduled_at=payload["scheduled_at"], ident=_ident(instant))
    value = outcome.disposition.value
    recorded = how if value in ADMITTED else value
    _log(st, engine, entry, instant, recorded, now, outcome.run_key)
    return recorded


def _log(st: ScheduleState, engine: Pipeline, entry: EntrySpec, instant: datetime, disposition: str,
         fired_at: datetime | None, run_key: str | None) -> None:
    tz = engine.parsed_schedule(entry.name).timezone
    st.occurrences.append(OccurrenceRecord(
        scheduled_at=local_iso(engine, instant, tz), utc=instant, disposition=disposition, fired_at=fired_at,
        run_key=run_key, tzdata_version=st.tzdata_version,
    ))
    st.counts[disposition] = st.counts.get(disposition, 0) + 1
    if len(st.occurrences) > 2 * MAX_OCCURRENCE_LOG:
        del st.occurrences[: len(st.occurrences) - MAX_OCCURRENCE_LOG]


def _log_many(st: ScheduleState, engine: Pipeline, entry: EntrySpec, instants: Sequence[datetime], disposition: str) -> None:
    """Count every one; keep individual records for the most recent (the range records them all)."""
    for instant in instants[-MAX_OCCURRENCE_LOG:]:
        _log(st, engine, entry, instant, disposition, None, None)
    st.counts[disposition] = st.counts.get(disposition, 0) + max(0, len(instants) - MAX_OCCURRENCE_LOG)


def decide_overflow(engine: Pipeline, range_id: str, choice: str, count: int | None, now: datetime, note: str | None) -> str:
    """Operator decision on an overflow range: ``admit_all``, ``admit_first`` (``count``, the rest skipped), ``skip``."""
    for st in engine.state.schedules.values():
        for rng in st.overflow:
            if rng.range_id != range_id:
                continue
            if rng.status != "awaiting_operator":
                raise OperatorRefused(f"range {range_id} was already decided ({rng.status})")
            if choice not in ("skip", "admit_all") and not (choice == "admit_first" and count and count > 0):
                raise OperatorRefused("choice must be admit_all, admit_first (with count >= 1) or skip")
            admit_n = 0 if choice == "skip" else rng.count if choice == "admit_all" else min(count or 0, rng.count)
            if engine.bounded and (admit_n > engine.task_budget or rng.count > ENUMERATE_PER_TASK):
                return _overflow_job(engine, st, rng, admit_n, now, note)
            engine.task_budget -= admit_n
            entry = engine.entry(rng.entry)
            instants = schedule.occurrences_between(engine.parsed_schedule(rng.entry), rng.first - TICK, rng.last, rng.count)
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


def add_job(engine: Pipeline, st: ScheduleState, job: AdmitJob) -> AdmitJob:
    """Record a job to work off over the next tasks (_jobs); the finished ones kept are bounded."""
    st.jobs.append(job)
    finished = [j for j in st.jobs if j.status not in ACTIVE]
    for old in finished[:-MAX_FINISHED_JOBS]:
        st.jobs.remove(old)
    engine.count(f"{job.kind}_jobs")
    return job


def _overflow_job(engine: Pipeline, st: ScheduleState, rng: OverflowRange, take: int, now: datetime, note: str | None) -> str:
    """A decision too large for one task: record it now, admit over the next tasks (see _jobs)."""
    rng.status = "skipped" if not take else ("admitted" if take == rng.count else "partially_admitted")
    rng.decided_at, rng.note = now, note or rng.note
    job = add_job(engine, st, AdmitJob(
        job_id=f"overflow-{engine.next_seq()}", kind="overflow", entry=rng.entry, how="caught_up", first=rng.first,
        last=rng.last, after=rng.first - TICK, total=rng.count, limit=take, range_id=rng.range_id, requested_at=now,
    ))
    return (f"{take} to admit, {rng.count - take} skipped: admitted over the next workflow tasks by job "
            f"{job.job_id} (see `wfi state`, schedules.{rng.entry}.jobs)")


def backfill(engine: Pipeline, entry_name: str, start: datetime, end: datetime, now: datetime) -> str:
    """Admit the occurrences ``start <= t <= end`` of a past range, each at most once (SCHED-5).

    More than this task can admit (see _jobs): counted and admitted over the next tasks."""
    entry = engine.spec.entry(entry_name)
    st = engine.state.schedules.get(entry_name)
    if entry is None or st is None:
        raise OperatorRefused(f"no schedule entry {entry_name!r}")
    if end > now:
        raise OperatorRefused("backfill covers past instants only: end must not be in the future (SCHED-6)")
    if end < start:
        raise OperatorRefused("backfill range is empty: end is before start")
    head = ADMIT_PER_TASK if engine.bounded else CHUNK  # what one task may take on at once
    instants = schedule.occurrences_between(engine.parsed_schedule(entry_name), start - TICK, end, head + 1)
    if not engine.bounded and len(instants) > CHUNK:
        raise OperatorRefused(f"backfill range holds more than {CHUNK} occurrences; split it into smaller ranges")
    if engine.bounded and len(instants) > min(head, engine.task_budget):
        job = add_job(engine, st, AdmitJob(
            job_id=f"backfill-{engine.next_seq()}", kind="backfill", entry=entry_name, how="backfilled", first=start,
            last=end, after=start - TICK, status="counting", requested_at=now,
        ))
        return (f"backfill of more than {len(instants) - 1} occurrences: counted (at most {MAX_BACKFILL}) and "
                f"admitted over the next workflow tasks by job {job.job_id} (see `wfi state`, schedules.{entry_name}.jobs)")
    engine.task_budget -= len(instants)
    results = [admit_occurrence(engine, entry, st, t, now, "backfilled") for t in instants]
    return (f"{results.count('backfilled')} admitted, {results.count('duplicate')} already had a run or a disposition, "
            f"{len(results)} in range")


def run_failed(engine: Pipeline, run: RunRecord, status: str, now: datetime) -> str | None:
    """A run of ``run.entry`` ended ``status``: with ``pause_on_failure`` a failure or time-out pauses the
    entry's schedule (an already paused one keeps its pause and note). Returns the note, when it paused."""
    st = engine.state.schedules.get(run.entry)
    if status not in PAUSING or st is None or st.paused or not options_of(engine.spec, run.entry).pause_on_failure:
        return None
    st.paused, st.paused_at, st.failed_run = True, now, run.run_key
    st.note = (f"paused on failure: run {run.run_key} {status.replace('_', ' ')} (pause_on_failure); "
               f"resume with `wfi operate resume --entry {run.entry}`")
    engine.count("schedules_paused_on_failure")
    return st.note


def trigger(engine: Pipeline, entry_name: str, action_id: str | None, now: datetime) -> str:
    """One run of a schedule entry now (``wfi operate trigger``), through the pipeline like an occurrence
    (``when``, ``queue_by``, overlap), but not one: its identity is the operator's action id
    (``trigger-<action id>``), so it consumes, moves and counts no occurrence of the sequence."""
    entry = engine.spec.entry(entry_name)
    st = engine.state.schedules.get(entry_name)
    if entry is None or st is None:
        raise OperatorRefused(f"no schedule entry {entry_name!r}")
    if not action_id:
        raise OperatorRefused("trigger needs an action_id: it is the identity of the run it starts "
                              "(`wfi operate` and WfiClient make one up when none is given)")
    ident = f"trigger-{action_id}"
    key = event_key(entry.name, ident)
    seen = engine.lookup(key)
    if seen is not None:
        run = f"run {seen.run_key}" if seen.run_key else "its run"
        return f"already triggered by action {action_id!r}: {run} ({seen.disposition.value})"
    tz = engine.parsed_schedule(entry.name).timezone
    at = local_iso(engine, now, tz)
    payload = {"scheduled_at": at, "fired_at": at, "timezone": tz, "tzdata_version": st.tzdata_version,
               "triggered_by": action_id}
    problem = engine.validate_payload(entry, payload)
    if problem is not None:
        raise OperatorRefused(f"the triggered run's payload failed validation: {problem}")
    outcome = engine.accept(entry, payload, key, payload_digest({"triggered_by": action_id}), now, scheduled_at=at, ident=ident)
    disposition = outcome.disposition.value
    st.triggers.append(TriggerRecord(at=now, action_id=action_id, run_key=outcome.run_key, disposition=disposition))
    del st.triggers[:-MAX_TRIGGERS]
    engine.count("schedule_triggers")
    run = f"run {outcome.run_key}" if outcome.run_key else "no run"
    return f"triggered {entry.name}: {run} ({disposition}{': ' + outcome.detail if outcome.detail else ''})"
