"""The occurrence sequence of a parsed :class:`~.config.ScheduleSpec`: pure and deterministic.

See the package docstring for the semantics (cron and interval, DST policies, exclusions, search
bounds).
"""

from __future__ import annotations

import calendar
import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice, takewhile
from typing import Literal
from zoneinfo import ZoneInfo

from croniter import croniter

from .config import HORIZON_YEARS, REFERENCE, FoldPolicy, GapPolicy, ScheduleSpec, cron_iter, expand_cron, load_zone, utc_iso

MAX_EXCLUDED_IN_A_ROW = 2_000
_LEGACY_EXCLUDED_IN_A_ROW = 20_000  # ScheduleSpec.legacy

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TICK = timedelta(microseconds=1)
_MINUTE = timedelta(minutes=1)
_Unit = Literal["minute", "hour", "day"]


def to_local_iso(instant: datetime, timezone: str) -> str:
    """``instant`` as ISO-8601 with the offset it has in ``timezone`` (e.g. ``2026-03-08T03:00:00-04:00``)."""
    return require_aware(instant).astimezone(load_zone(timezone)).isoformat()


def occurrence_record(spec: ScheduleSpec, instant: datetime) -> dict[str, str]:
    """Plain-data record of one occurrence: local and UTC forms, zone and tzdata version (SCHED-2)."""
    return {
        "scheduled_at": to_local_iso(instant, spec.timezone),
        "utc": utc_iso(instant),
        "timezone": spec.timezone,
        "tzdata_version": spec.tzdata_version,
    }


def require_aware(instant: datetime) -> datetime:
    if instant.utcoffset() is None:
        raise ValueError(f"{instant!r} is naive: pass an aware datetime (e.g. with tzinfo=UTC)")
    return instant


# ------------------------------------------------------------------------------------- public API


def next_occurrences(spec: ScheduleSpec, after: datetime, count: int) -> list[datetime]:
    """Up to ``count`` occurrences strictly after ``after``, ascending, aware UTC, none past ``end``."""
    return list(islice(_instants(spec, require_aware(after).astimezone(UTC)), max(count, 0)))


def occurrences_between(spec: ScheduleSpec, start: datetime, end: datetime, limit: int) -> list[datetime]:
    """Occurrences ``t`` with ``start < t <= end``, ascending, at most ``limit`` (catch-up, backfill)."""
    return list(islice(_until(spec, start, end), max(limit, 0)))


def count_between(spec: ScheduleSpec, start: datetime, end: datetime, cap: int) -> int:
    """How many occurrences ``start < t <= end`` there are, counting no further than ``cap``."""
    return sum(1 for _ in islice(_until(spec, start, end), max(cap, 0)))


def has_future(spec: ScheduleSpec, after: datetime) -> bool:
    """Whether any occurrence follows ``after`` within the search horizon (SCHED-4)."""
    return bool(next_occurrences(spec, after, 1))


def _until(spec: ScheduleSpec, start: datetime, end: datetime) -> Iterator[datetime]:
    stop = require_aware(end).astimezone(UTC)
    return takewhile(lambda t: t <= stop, _instants(spec, require_aware(start).astimezone(UTC)))


# ----------------------------------------------------------------------------------- the sequence


@dataclass(frozen=True)
class _Window:
    """Where one search looks: instants ``> after`` and ``<= end``."""

    after: datetime
    end: datetime | None


def _instants(spec: ScheduleSpec, after: datetime) -> Iterator[datetime]:
    zone = load_zone(spec.timezone)
    if spec.start is not None and spec.start > after:
        after = spec.start - _TICK
    window = _Window(after, spec.end)
    streams = []
    if spec.cron is not None:
        expr = expand_cron(spec.cron)
        excluder = _Excluder(spec, _field(expr, 0, 60), _field(expr, 1, 24))
        streams.append(_cron_instants(spec, zone, window, excluder))
    if spec.interval is not None:
        streams.append(_interval_instants(spec, zone, window, _Excluder(spec)))
    return _dedupe(heapq.merge(*streams))


def _dedupe(instants: Iterator[datetime]) -> Iterator[datetime]:
    last = None
    for t in instants:
        if t != last:
            yield t
        last = t


def _wall(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None, fold=0)


def _in_window(t: datetime, window: _Window) -> bool:
    return t > window.after and (window.end is None or t <= window.end)


def _map_local(wall: datetime, zone: ZoneInfo, gap: GapPolicy, fold: FoldPolicy) -> tuple[datetime, ...]:
    """The instants a local wall time fires at, under the DST policies (ascending)."""
    u0 = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    u1 = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if u0 == u1:
        return (u0,)
    if _wall(u0, zone) != wall:  # in a gap fold=0 reads the pre-transition offset and lands past the gap
        return () if gap == "skip" else (_gap_end(u1, u0, zone),)
    return {"first": (u0,), "last": (u1,), "both": (u0, u1)}[fold]


def _gap_end(lo: datetime, hi: datetime, zone: ZoneInfo) -> datetime:
    """First instant in ``(lo, hi]`` carrying ``hi``'s offset: the transition (zone changes are whole seconds)."""
    target = hi.astimezone(zone).utcoffset()
    lo_s, hi_s = int(lo.timestamp()), int(hi.timestamp())
    while hi_s - lo_s > 1:
        mid = (lo_s + hi_s) // 2
        if datetime.fromtimestamp(mid, UTC).astimezone(zone).utcoffset() == target:
            hi_s = mid
        else:
            lo_s = mid
    return datetime.fromtimestamp(hi_s, UTC)


def _backoff(after: datetime, zone: ZoneInfo) -> timedelta:
    """How far before ``after``'s wall time a local time may lie and still fire after it.

    That happens only when a fall-back transition follows within a day: its repeated local times
    (second pass) fire after ``after``.
    """
    here = _offset(after, zone)
    ahead = [_offset(after + timedelta(hours=h), zone) for h in range(27)]
    return max(timedelta(0), *(here - offset for offset in ahead)) + _MINUTE


def _offset(instant: datetime, zone: ZoneInfo) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None  # an aware instant converted to a ZoneInfo always has one
    return offset


def _cron_instants(spec: ScheduleSpec, zone: ZoneInfo, window: _Window, excluder: _Excluder) -> Iterator[datetime]:
    """Cron instants in ascending order.

    Wall times come from croniter in ascending local order; their instants are not always ascending
    (``fold: both`` yields the second pass after later first-pass times), so they wait in a heap
    until the smallest instant of a later wall time proves nothing smaller can follow.
    """
    it = cron_iter(spec.cron or "", _wall(window.after, zone) - _backoff(window.after, zone), legacy=spec.legacy)
    pending: list[datetime] = []
    misses, horizon = 0, _horizon(_wall(window.after, zone))
    limit = _miss_limit(spec)
    while (wall := _next_wall(it)) is not None and wall <= horizon and misses <= limit:
        instants = _map_local(wall, zone, spec.dst_gap, spec.dst_fold)
        if instants and window.end is not None and instants[0] > window.end:
            break
        kept = _kept(instants, wall, zone, window, excluder, it)
        misses, horizon = (0, _horizon(wall)) if kept else (misses + 1, horizon)
        for t in kept:
            heapq.heappush(pending, t)
        while pending and instants and pending[0] <= instants[0]:
            yield heapq.heappop(pending)
    while pending:
        yield heapq.heappop(pending)


def _kept(
    instants: tuple[datetime, ...], wall: datetime, zone: ZoneInfo, window: _Window, excluder: _Excluder, it: croniter
) -> list[datetime]:
    """The instants of ``wall`` that survive the window and ``exclude``; skips ``it`` past excluded units."""
    unit = excluder.unit(wall)
    if unit is not None:
        it.set_current(_unit_end(wall, unit) - _TICK, force=True)
        return []
    return [t for t in instants if _in_window(t, window) and not _shifted_into_exclusion(t, wall, zone, excluder)]


def _shifted_into_exclusion(t: datetime, wall: datetime, zone: ZoneInfo, excluder: _Excluder) -> bool:
    actual = _wall(t, zone)
    return actual != wall and excluder.unit(actual) is not None


def _next_wall(it: croniter) -> datetime | None:
    try:
        return it.get_next(datetime)
    except ValueError:  # CroniterBadDateError: no further match (e.g. a Feb-29 rule past year 9999)
        return None


def _interval_instants(spec: ScheduleSpec, zone: ZoneInfo, window: _Window, excluder: _Excluder) -> Iterator[datetime]:
    step = spec.interval or timedelta(seconds=1)
    anchor = spec.start or _EPOCH
    k = (window.after - anchor) // step + 1
    misses, horizon = 0, _horizon(_wall(window.after, zone))
    while True:
        t = anchor + k * step
        wall = _wall(t, zone)
        if (window.end is not None and t > window.end) or wall > horizon:
            return
        unit = excluder.unit(wall)
        if unit is None:
            misses, horizon = 0, _horizon(wall)
            yield t
            k += 1
        elif (misses := misses + 1) > _miss_limit(spec):
            return
        else:
            k = max(k + 1, _first_step_at(_unit_end(wall, unit), zone, anchor, step))


def _first_step_at(wall: datetime, zone: ZoneInfo, anchor: datetime, step: timedelta) -> int:
    earliest = min(_map_local(wall, zone, "shift", "first") + _map_local(wall, zone, "shift", "last"))
    return -((anchor - earliest) // step)


def _horizon(wall: datetime) -> datetime:
    """The furthest local time a search looks at after ``wall`` (its last kept candidate or start)."""
    return wall.replace(year=wall.year + HORIZON_YEARS, day=1) if wall.year + HORIZON_YEARS <= 9999 else datetime.max


def _unit_end(wall: datetime, unit: _Unit) -> datetime:
    """Start of the next local minute, hour or day after ``wall``."""
    if unit == "day":
        return datetime.combine(wall.date() + timedelta(days=1), datetime.min.time())
    if unit == "hour":
        return wall.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    return wall.replace(second=0, microsecond=0) + _MINUTE


class _Excluder:
    """Matches local wall times against ``exclude``; one per stream (croniter objects are stateful).

    ``minutes``/``hours`` are the values the stream's candidates can take (all, for an interval):
    an exclusion covering all of them excludes whole hours (days), which the search skips at once.
    """

    def __init__(
        self, spec: ScheduleSpec, minutes: frozenset[int] = frozenset(range(60)), hours: frozenset[int] = frozenset(range(24))
    ):
        self._dates = frozenset(spec.exclude_dates)
        self._crons = [(_CronMatcher(e, spec.legacy), _cron_unit(e, minutes, hours)) for e in spec.exclude_cron]

    def unit(self, wall: datetime) -> _Unit | None:
        """The coarsest local unit (day, hour, minute) around ``wall`` that is excluded, if any."""
        if wall.date() in self._dates:
            return "day"
        minute = wall.replace(second=0, microsecond=0)
        units = [unit for matcher, unit in self._crons if matcher.matches(minute)]
        return min(units, key=("day", "hour", "minute").index) if units else None


class _CronMatcher:
    """Whether a local minute matches a cron, by its fields (constant time), croniter's way.

    Asking croniter for the next match instead costs a search per candidate, up to years ahead for
    a rare expression. The day rule is croniter's with ``implement_cron_bug`` (Vixie cron's): both
    day fields must match when either is ``*``/``?`` or starts with ``*``, either one otherwise.
    ``exclude.cron`` takes no ``W`` or ``#`` (refused when the configuration is parsed).
    """

    def __init__(self, expr: str, legacy: bool = False):
        self._it = cron_iter(expr, REFERENCE, legacy=legacy)
        # Earlier builds asked croniter (its own day rule); W and # (allowed in them) need it too.
        self._search = legacy or bool(self._it.nth_weekday_of_month or self._it.nearest_weekday)
        expanded = self._it.expanded
        self._fields = [None if field == ["*"] else frozenset(v if v == "l" else int(v) % 7 if i == 4 else int(v)
                                                               for v in field)
                        for i, field in enumerate(expanded)]
        dom, dow = expand_cron(expr).split()[2::2]
        self._both_days = dom.startswith("*") or dow.startswith("*") or None in self._fields[2::2]

    def matches(self, minute: datetime) -> bool:
        if self._search:
            self._it.set_current(minute - _TICK, force=True)
            return _next_wall(self._it) == minute
        minutes, hours, doms, months, dows = self._fields
        if not all(f is None or v in f for f, v in ((minutes, minute.minute), (hours, minute.hour), (months, minute.month))):
            return False
        dom_ok = doms is None or minute.day in doms or ("l" in doms and minute.day == _last_day(minute))
        dow_ok = dows is None or minute.isoweekday() % 7 in dows
        return (dom_ok and dow_ok) if self._both_days else (dom_ok or dow_ok)


def _miss_limit(spec: ScheduleSpec) -> int:
    return _LEGACY_EXCLUDED_IN_A_ROW if spec.legacy else MAX_EXCLUDED_IN_A_ROW


def _last_day(day: datetime) -> int:
    return calendar.monthrange(day.year, day.month)[1]


def _field(expr: str, index: int, size: int) -> frozenset[int]:
    values = cron_iter(expr, REFERENCE).expanded[index]
    return frozenset(range(size)) if values == ["*"] else frozenset(int(v) for v in values)


def _cron_unit(expr: str, minutes: frozenset[int], hours: frozenset[int]) -> _Unit:
    if not minutes <= _field(expr, 0, 60):
        return "minute"
    return "day" if hours <= _field(expr, 1, 24) else "hour"
