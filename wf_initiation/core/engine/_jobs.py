"""Large operator actions on a schedule, worked off a bounded amount per workflow task.

A backfill of 3,000 minutes admitted in one workflow task would run past the worker's 2-second
deadlock timeout: the task would fail, be retried with the same input, fail again, and wedge the
activation. So an action that covers more than the task's budget (``limits.ADMIT_PER_TASK``
occurrences, fewer when the task already admitted some) becomes an :class:`AdmitJob` in the
schedule's state: a backfill first counts its range (``limits.ENUMERATE_PER_TASK`` occurrences a
task; a range over ``limits.MAX_BACKFILL`` is refused with nothing admitted), then admits at most
the task's budget of occurrences per task, in instant order, each exactly as a small backfill
would (same identities, so a repeat admits nothing twice, SCHED-5). The shell wakes itself at once
while a job is unfinished (:func:`next_wakeup`). Jobs live in the carried state, so a
continue-as-new or a worker restart resumes them where they were.
"""

from __future__ import annotations

from datetime import datetime

from .. import schedule
from ..limits import ENUMERATE_PER_TASK, MAX_BACKFILL
from ._pipeline import Pipeline
from ._schedule import ACTIVE, TICK, admit_occurrence
from ._types import AdmitJob, OverflowRange, ScheduleState


def run_jobs(engine: Pipeline, now: datetime) -> None:
    """Advance unfinished jobs, oldest first, within this task's budget."""
    for st in engine.state.schedules.values():
        for job in [j for j in st.jobs if j.status in ACTIVE]:
            if engine.task_budget <= 0:
                return
            if job.status == "counting":
                _count_step(engine, job, now)
            else:
                _admit_step(engine, st, job, now)


def next_wakeup(engine: Pipeline) -> datetime | None:
    """An unfinished job needs the next workflow task at once: its request instant (in the past)."""
    pending = [j.requested_at for st in engine.state.schedules.values() for j in st.jobs if j.status in ACTIVE]
    return min(pending, default=None)


def _count_step(engine: Pipeline, job: AdmitJob, now: datetime) -> None:
    found = schedule.occurrences_between(engine.parsed_schedule(job.entry), job.after, job.last, ENUMERATE_PER_TASK)
    job.total += len(found)
    engine.task_budget = 0  # enumerating is this task's share of work
    if job.total > MAX_BACKFILL:
        job.status, job.finished_at = "refused", now
        job.message = (f"the range holds more than {MAX_BACKFILL} occurrences (the limit of one backfill); "
                       "nothing was admitted: split it into smaller ranges")
        engine.record_error(now, "backfill_refused", f"backfill {job.job_id} {job.first.isoformat()}.."
                            f"{job.last.isoformat()}: {job.message}", job.entry)
    elif len(found) < ENUMERATE_PER_TASK:
        job.status, job.after = "admitting", job.first - TICK
    else:
        job.after = found[-1]


def _admit_step(engine: Pipeline, st: ScheduleState, job: AdmitJob, now: datetime) -> None:
    processed = job.admitted + job.duplicates + job.other
    want = engine.task_budget if job.limit is None else min(engine.task_budget, job.limit - processed)
    instants = schedule.occurrences_between(engine.parsed_schedule(job.entry), job.after, job.last, max(want, 0))
    entry = engine.entry(job.entry)
    for instant in instants:
        outcome = admit_occurrence(engine, entry, st, instant, now, job.how)
        if outcome == job.how:
            job.admitted += 1
        elif outcome == "duplicate":
            job.duplicates += 1
        else:
            job.other += 1
    engine.task_budget -= len(instants)
    if instants:
        job.after = instants[-1]
    done = job.limit is not None and job.admitted + job.duplicates + job.other >= job.limit
    if len(instants) < want or done:
        _finish(engine, st, job, now)


def _finish(engine: Pipeline, st: ScheduleState, job: AdmitJob, now: datetime) -> None:
    processed = job.admitted + job.duplicates + job.other
    job.status, job.finished_at = "done", now
    if job.kind == "backfill":
        job.message = (f"{job.admitted} admitted, {job.duplicates} already had a run or a disposition, "
                       f"{job.total} in range")
    else:
        skipped = max(job.total - processed, 0)
        st.counts["skipped_overflow"] = st.counts.get("skipped_overflow", 0) + skipped
        job.message = f"{job.admitted} admitted, {skipped} skipped"
        rng = _range(st, job.range_id)
        if rng is not None:
            rng.note = f"{rng.note or ''} [{job.job_id}: {job.message}]".strip()
    engine.count(f"{job.kind}_jobs_done")


def _range(st: ScheduleState, range_id: str | None) -> OverflowRange | None:
    return next((r for r in st.overflow if r.range_id == range_id), None)

