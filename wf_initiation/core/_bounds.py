"""Bounds on what a Workfile or a deployment may configure: durations, instants, names, counts, files.

Each value is refused with a diagnostic by ``wfi validate`` (with ``--deployment`` where the value
comes from the deployment) and by ``wfi activate`` before anything runs. Together they make a
datetime overflow in the engine impossible by construction: every instant it is given lies in
[:data:`EARLIEST_INSTANT`, :data:`LATEST_INSTANT`), every duration is at most :data:`MAX_DURATION`,
so any instant plus a few durations stays far inside Python's ``datetime`` range (year 9999) and
inside the range of a Temporal timer (int64 nanoseconds, ~292 years from now). Listed in
docs/limits.md.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

MAX_DURATION = timedelta(days=3650)
"""Any duration setting (retention, waits, intervals, timeouts): at most ten years."""
MAX_DURATION_TEXT = timedelta(days=36500)
"""What ``parse_duration`` reads at all (numbers of at most 12 digits): past it the text is refused."""
EARLIEST_INSTANT = datetime(1970, 1, 1, tzinfo=UTC)
"""Earliest instant a schedule's ``start``/``end``, a backfill or ``--from`` may name (inclusive)."""
LATEST_INSTANT = datetime(2200, 1, 1, tzinfo=UTC)
"""Instants must lie before this one."""
MIN_POLL_INTERVAL = timedelta(milliseconds=10)
"""``poll.interval`` and ``poll.backoff_initial`` at least (0s would poll in a tight loop)."""
MAX_POLL_TIMEOUT = timedelta(hours=1)
"""``poll.timeout`` at most."""
MAX_BINDING_NAME = 64
"""Characters of a binding name (``as``): it is part of every run's workflow id."""
MAX_TEMPORAL_NAME = 1000
"""Characters of a workflow type or task queue name (Temporal's ``limit.maxIDLength``)."""
MAX_BATCH_SIZE = 10_000
"""``batch.size`` at most."""
MAX_CAUSATION_DEPTH = 100
"""``max_causation_depth`` at most (COMP-6)."""
MAX_CONCURRENT_RUNS = 10_000
"""``max_concurrent_runs`` at most."""
MAX_THROTTLE_RUNS = 10_000
"""``throttle.runs`` at most."""
MIN_THROTTLE_PER = timedelta(seconds=1)
"""``throttle.per`` at least: a shorter window would wake the activation more often than a timer fires on time."""
MAX_CATCH_UP_BOUND = 10_000
"""``missed.bound`` at most: the occurrences one workflow task may enumerate."""
MAX_HISTORY_EVENTS = 40_000
"""``max_history_events`` at most: continue-as-new well before Temporal's 51,200-event hard limit."""
MAX_FILE_BYTES = 1_048_576
"""Bytes of a Workfile or a deployment file."""
MAX_SCHEDULE_EXCLUSIONS = 1_000
"""Entries of ``exclude.dates`` plus ``exclude.cron`` of one schedule."""


def instant_problem(value: datetime) -> str | None:
    """Why ``value`` (aware) is outside the supported range, or None."""
    if EARLIEST_INSTANT <= value < LATEST_INSTANT:
        return None
    return f"lies outside {EARLIEST_INSTANT.year}-01-01 .. {LATEST_INSTANT.year - 1}-12-31 (UTC): choose an instant in that range"


def duration_problem(value: timedelta, *, at_least: timedelta = timedelta(0), at_most: timedelta = MAX_DURATION) -> str | None:
    """Why ``value`` is outside ``[at_least, at_most]``, or None."""
    if value < at_least:
        return f"is shorter than {_show(at_least)}"
    if value > at_most:
        return f"is longer than {_show(at_most)}, the limit"
    return None


def _show(value: timedelta) -> str:
    from ._durations import format_duration

    return format_duration(value)
