"""The occurrence sequence of ``time.schedule``: pure, deterministic, no clock and no host tz database.

The sequence is a function of the configuration and the ``tzdata`` package's IANA version alone
(SCHED-2). The activation workflow imports this module through
``workflow.unsafe.imports_passed_through()``: zones are loaded per call from the ``tzdata`` package
(never ``/usr/share/zoneinfo``), ``croniter`` is always given an explicit start, and every public
function returns plain data (aware UTC datetimes, strings, dicts).

Semantics, as documented to users:

* ``cron`` is a 5-field expression (minute hour day-of-month month day-of-week) or an alias:
  ``@yearly @annually @monthly @weekly @daily @midnight @hourly``. It names *local wall-clock*
  times in ``timezone``. Days follow Vixie cron exactly, as Temporal Schedules do: when the
  day-of-month or the day-of-week field starts with ``*`` (``*``, ``*/2``), a day must match
  **both** fields (``0 0 */2 * MON``: odd days that are Mondays); when both are restricted
  otherwise, either field matching is enough (``0 0 1,15 * MON``: the 1st, the 15th and every
  Monday). ``exclude.cron`` follows the same rule. Random and hashed fields (``R``, ``H``) are
  refused: the sequence must be the same on every evaluation (SCHED-2). A cron no date matches
  (``0 0 30 2 *``) is valid: its sequence is empty and the schedule is installed inactive (SCHED-4).
* ``interval`` (``15m``, ``1h30m``; at least ``1s``, at most ``3650d``) is absolute arithmetic on
  instants, anchored at ``start`` or else the Unix epoch. DST never affects it.
* With both, the sequence is the sorted union of the two, without duplicates.
* ``start`` and ``end`` are inclusive instants (ISO-8601 with an offset) from 1970-01-01 to
  2199-12-31 UTC (``wf_initiation.core._bounds``: no instant plus a duration can overflow).
* ``dst.gap`` (default ``shift``): a local time that does not exist on the spring-forward day is
  dropped (``skip``) or moved to the first instant after the gap (``shift``: 02:30 on a 02:00→03:00
  day fires at 03:00). ``dst.fold`` (default ``first``): a local time that occurs twice on the
  fall-back day fires at its ``first``, its ``last`` or ``both`` instants.
* The instant is the occurrence's identity (SCHED-13): local times that map to one instant (e.g.
  02:00, 02:15, 02:30, 02:45 and 03:00 under ``shift``) are one occurrence.
* ``exclude.dates`` removes every candidate whose local date is listed; ``exclude.cron`` removes
  every candidate whose local time matches one of the expressions (minute precision). For a cron
  candidate both its written wall time and the wall time it fires at (they differ under ``shift``)
  are checked.
* A search for the next occurrence looks at most :data:`HORIZON_YEARS` years past the previous
  one (or the search's start), and gives up
  after :data:`MAX_EXCLUDED_IN_A_ROW` consecutive excluded candidates (excluded whole days and
  hours count once); a schedule whose every candidate there is excluded has no future occurrence
  (SCHED-4). Both bounds depend only on the configuration and ``after``, so they stay deterministic.

The configuration (parsing, validation) is in :mod:`.config`, the sequence in :mod:`.sequence`.
"""

from .config import (
    ALIASES,
    HORIZON_YEARS,
    TZDATA_VERSION,
    FoldPolicy,
    GapPolicy,
    ScheduleConfigError,
    ScheduleSpec,
    load_zone,
    parse_instant,
    parse_schedule,
)
from .sequence import (
    MAX_EXCLUDED_IN_A_ROW,
    count_between,
    has_future,
    next_occurrences,
    occurrence_record,
    occurrences_between,
    to_local_iso,
)

__all__ = [
    "ALIASES",
    "HORIZON_YEARS",
    "MAX_EXCLUDED_IN_A_ROW",
    "TZDATA_VERSION",
    "FoldPolicy",
    "GapPolicy",
    "ScheduleConfigError",
    "ScheduleSpec",
    "count_between",
    "has_future",
    "load_zone",
    "next_occurrences",
    "occurrence_record",
    "occurrences_between",
    "parse_instant",
    "parse_schedule",
    "to_local_iso",
]
