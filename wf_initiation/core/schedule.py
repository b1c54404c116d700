"""The occurrence sequence of ``time.schedule``: pure, deterministic, no clock and no host tz database.

The sequence is a function of the configuration and the ``tzdata`` package's IANA version alone
(SCHED-2). The activation workflow imports this module through
``workflow.unsafe.imports_passed_through()``: zones are loaded per call from the ``tzdata`` package
(never ``/usr/share/zoneinfo``), ``croniter`` is always given an explicit start, and every public
function returns plain data (aware UTC datetimes, strings, dicts).

Semantics, as documented to users:

* ``cron`` is a 5-field expression (minute hour day-of-month month day-of-week, Vixie ``OR`` rule
  when both day fields are restricted) or an alias: ``@yearly @annually @monthly @weekly @daily
  @midnight @hourly``. It names *local wall-clock* times in ``timezone``.
* ``interval`` (``15m``, ``1h30m``; at least ``1s``) is absolute arithmetic on instants, anchored
  at ``start`` or else the Unix epoch. DST never affects it.
* With both, the sequence is the sorted union of the two, without duplicates.
* ``start`` and ``end`` are inclusive instants (ISO-8601 with an offset).
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
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from importlib import resources
from itertools import islice, takewhile
from typing import Any, Literal
from zoneinfo import ZoneInfo

import tzdata
from croniter import croniter

from wf_initiation.core._durations import DurationError, format_duration, parse_duration

TZDATA_VERSION: str = tzdata.IANA_VERSION
HORIZON_YEARS = 10
MAX_EXCLUDED_IN_A_ROW = 20_000

GapPolicy = Literal["skip", "shift"]
FoldPolicy = Literal["first", "last", "both"]

ALIASES: Mapping[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_KEYS = frozenset({"cron", "interval", "timezone", "start", "end", "exclude", "dst"})
_ZONE_NAME = re.compile(r"^[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_REFERENCE = datetime(2000, 1, 1)  # fixed start for validating a cron: never the clock
_TICK = timedelta(microseconds=1)
_MINUTE = timedelta(minutes=1)
_Unit = Literal["minute", "hour", "day"]


class ScheduleConfigError(ValueError):
    """A ``time.schedule`` configuration whose sequence cannot be evaluated (SCHED-3).

    Attributes:
        problems: one message per problem, each naming the fix.
    """

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("invalid time.schedule configuration: " + "; ".join(self.problems))


@dataclass(frozen=True)
class ScheduleSpec:
    """A parsed, validated ``time.schedule`` configuration plus the tzdata version it is bound to."""

    timezone: str = "UTC"
    cron: str | None = None
    interval: timedelta | None = None
    start: datetime | None = None
    end: datetime | None = None
    exclude_dates: tuple[date, ...] = ()
    exclude_cron: tuple[str, ...] = ()
    dst_gap: GapPolicy = "shift"
    dst_fold: FoldPolicy = "first"
    tzdata_version: str = TZDATA_VERSION

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: the configuration (as :func:`parse_schedule` accepts it) plus ``tzdata_version``."""
        out: dict[str, Any] = {"timezone": self.timezone}
        if self.cron is not None:
            out["cron"] = self.cron
        if self.interval is not None:
            out["interval"] = format_duration(self.interval)
        for key in ("start", "end"):
            value = getattr(self, key)
            if value is not None:
                out[key] = _utc_iso(value)
        if self.exclude_dates or self.exclude_cron:
            out["exclude"] = {"dates": [d.isoformat() for d in self.exclude_dates], "cron": list(self.exclude_cron)}
        out["dst"] = {"gap": self.dst_gap, "fold": self.dst_fold}
        out["tzdata_version"] = self.tzdata_version
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScheduleSpec:
        """Inverse of :meth:`to_dict`; keeps the recorded ``tzdata_version``."""
        config = {k: v for k, v in data.items() if k != "tzdata_version"}
        spec = parse_schedule(config)
        return _replace(spec, tzdata_version=str(data.get("tzdata_version", spec.tzdata_version)))


def _replace(spec: ScheduleSpec, **changes: Any) -> ScheduleSpec:
    return ScheduleSpec(**{**spec.__dict__, **changes})


# --------------------------------------------------------------------------------------- parsing


def parse_schedule(config: Mapping[str, Any]) -> ScheduleSpec:
    """Validate a ``time.schedule`` configuration.

    Raises:
        ScheduleConfigError: listing every problem (bad cron, unknown zone, bad interval, bad
            instants, ``end`` before ``start``, bad ``exclude`` or ``dst``), each naming the fix.
    """
    if not isinstance(config, Mapping):
        raise ScheduleConfigError([f"the configuration must be a mapping of keys, not {type(config).__name__}"])
    problems: list[str] = []
    unknown = sorted(str(k) for k in config if k not in _KEYS)
    if unknown:
        problems.append(f"unknown key(s) {', '.join(unknown)}: allowed keys are {', '.join(sorted(_KEYS))}")
    if config.get("cron") is None and config.get("interval") is None:
        problems.append("give 'cron' (e.g. '30 2 * * *' or '@daily') and/or 'interval' (e.g. '15m')")
    fields = {
        "timezone": _collect(problems, _parse_zone, config.get("timezone", "UTC")),
        "cron": _optional(problems, _parse_cron, config.get("cron"), "cron"),
        "interval": _optional(problems, _parse_interval, config.get("interval"), "interval"),
        "start": _optional(problems, _parse_instant, config.get("start"), "start"),
        "end": _optional(problems, _parse_instant, config.get("end"), "end"),
    }
    exclude = _collect(problems, _parse_exclude, config.get("exclude") or {})
    dst = _collect(problems, _parse_dst, config.get("dst") or {})
    if fields["start"] and fields["end"] and fields["end"] < fields["start"]:
        problems.append(
            f"'end' ({_utc_iso(fields['end'])}) is before 'start' ({_utc_iso(fields['start'])}): "
            "swap them or move 'end' later"
        )
    if problems:
        raise ScheduleConfigError(problems)
    return ScheduleSpec(
        **fields, exclude_dates=exclude[0], exclude_cron=exclude[1], dst_gap=dst[0], dst_fold=dst[1]
    )


def _collect(problems: list[str], parse: Any, value: Any) -> Any:
    try:
        return parse(value)
    except ScheduleConfigError as exc:
        problems.extend(exc.problems)
        return None


def _optional(problems: list[str], parse: Any, value: Any, key: str) -> Any:
    return None if value is None else _collect(problems, lambda v: parse(v, key), value)


def _parse_zone(name: Any) -> str:
    _load_zone(name)
    return name


def _parse_cron(expr: Any, key: str = "cron") -> str:
    if not isinstance(expr, str) or not expr.strip():
        raise ScheduleConfigError([f"'{key}' must be a cron string such as '30 2 * * *' or '@daily', not {expr!r}"])
    text = expr.strip()
    if text.startswith("@") and text.lower() not in ALIASES:
        raise ScheduleConfigError([f"'{key}': unknown alias {text!r}: use one of {', '.join(ALIASES)}"])
    fields = _expand(text).split()
    if len(fields) != 5:
        raise ScheduleConfigError([
            f"'{key}': {text!r} has {len(fields)} field(s): "
            "write exactly 5 (minute hour day-of-month month day-of-week)"
        ])
    try:
        croniter(_expand(text), _REFERENCE).get_next(datetime)
    # croniter's own errors are ValueErrors; its parser lets the others escape on odd input
    except (ValueError, KeyError, TypeError, IndexError, OverflowError) as exc:
        raise ScheduleConfigError([
            f"'{key}': {text!r} is not a valid cron expression ({exc}): write e.g. '*/15 * * * *'"
        ]) from None
    return text


def _expand(expr: str) -> str:
    return ALIASES.get(expr.strip().lower(), expr.strip())


def _parse_interval(text: Any, key: str = "interval") -> timedelta:
    try:
        if not isinstance(text, str):
            raise DurationError(text)
        value = parse_duration(text)
    except DurationError:
        raise ScheduleConfigError([f"'{key}': {text!r} is not an interval: write e.g. 15m, 1h30m, 1d"]) from None
    if value < timedelta(seconds=1):
        raise ScheduleConfigError([f"'{key}': {text!r} is shorter than 1s: use an interval of at least 1s"])
    return value


def _parse_instant(value: Any, key: str) -> datetime:
    parsed = _instant_or_none(value)
    if parsed is None:
        raise ScheduleConfigError([
            f"'{key}': {value!r} is not an ISO-8601 instant with an offset: "
            "write e.g. '2026-03-08T00:00:00Z' or '2026-03-08T00:00:00-05:00' (quoted)"
        ])
    return parsed


def _instant_or_none(value: Any) -> datetime | None:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            return None
    if not isinstance(value, datetime) or value.utcoffset() is None:
        return None
    return value.astimezone(UTC)


def parse_instant(text: str) -> datetime:
    """Parse an ISO-8601 instant that carries an offset (``Z`` or ``+01:00``) into aware UTC.

    Raises:
        ScheduleConfigError: when ``text`` is not such an instant.
    """
    return _parse_instant(text, "instant")


def _parse_exclude(value: Any) -> tuple[tuple[date, ...], tuple[str, ...]]:
    if not isinstance(value, Mapping):
        raise ScheduleConfigError(["'exclude' must be a mapping with 'dates' and/or 'cron' lists"])
    problems = [
        f"'exclude.{k}' is not allowed: use 'exclude.dates' or 'exclude.cron'" for k in value if k not in ("dates", "cron")
    ]
    dates = [_collect(problems, _parse_date, v) for v in _as_list(problems, value.get("dates"), "dates")]
    crons = [_collect(problems, _parse_exclude_cron, v) for v in _as_list(problems, value.get("cron"), "cron")]
    if problems:
        raise ScheduleConfigError(problems)
    return tuple(sorted(set(dates))), tuple(crons)


def _as_list(problems: list[str], value: Any, key: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        problems.append(f"'exclude.{key}' must be a list, not {type(value).__name__}")
        return []
    return value


def _parse_date(value: Any) -> date:
    if isinstance(value, date) and not isinstance(value, datetime):
        return value
    try:
        if not (isinstance(value, str) and len(value) == 10):
            raise ValueError(value)
        return date.fromisoformat(value)
    except ValueError:
        raise ScheduleConfigError([
            f"'exclude.dates': {value!r} is not a local date: write YYYY-MM-DD, e.g. 2026-12-25"
        ]) from None


def _parse_exclude_cron(value: Any) -> str:
    return _parse_cron(value, "exclude.cron")


def _parse_dst(value: Any) -> tuple[GapPolicy, FoldPolicy]:
    if not isinstance(value, Mapping):
        raise ScheduleConfigError(["'dst' must be a mapping such as {gap: shift, fold: first}"])
    problems = [
        f"'dst.{k}' is not allowed: use 'dst.gap' (skip|shift) or 'dst.fold' (first|last|both)"
        for k in value
        if k not in ("gap", "fold")
    ]
    gap, fold = value.get("gap", "shift"), value.get("fold", "first")
    if gap not in ("skip", "shift"):
        problems.append(f"'dst.gap': {gap!r} is not a policy: use skip or shift")
    if fold not in ("first", "last", "both"):
        problems.append(f"'dst.fold': {fold!r} is not a policy: use first, last or both")
    if problems:
        raise ScheduleConfigError(problems)
    return gap, fold


# ------------------------------------------------------------------------------------------ zones


def _load_zone(name: Any) -> ZoneInfo:
    """Load ``name`` from the tzdata package, never from the host (a fresh object: no global cache)."""
    if not isinstance(name, str) or not _ZONE_NAME.match(name):
        raise ScheduleConfigError([
            f"'timezone': {name!r} is not an IANA zone name: write e.g. 'America/New_York' or 'UTC'"
        ])
    path = resources.files("tzdata.zoneinfo").joinpath(*name.split("/"))
    if not path.is_file():
        raise ScheduleConfigError([
            f"'timezone': unknown zone {name!r} in tzdata {TZDATA_VERSION}: "
            "write an IANA name such as 'Europe/Berlin' (names are case-sensitive)"
        ])
    with path.open("rb") as handle:
        try:
            return ZoneInfo.from_file(handle, key=name)
        except ValueError:
            raise ScheduleConfigError([
                f"'timezone': {name!r} is not a zone in tzdata {TZDATA_VERSION}: "
                "write an IANA name such as 'Europe/Berlin'"
            ]) from None


def load_zone(name: str) -> ZoneInfo:
    """The zone ``name`` from the tzdata package (a fresh object); ``ScheduleConfigError`` if unknown."""
    return _load_zone(name)


def to_local_iso(instant: datetime, timezone: str) -> str:
    """``instant`` as ISO-8601 with the offset it has in ``timezone`` (e.g. ``2026-03-08T03:00:00-04:00``)."""
    return _require_aware(instant).astimezone(_load_zone(timezone)).isoformat()


def occurrence_record(spec: ScheduleSpec, instant: datetime) -> dict[str, str]:
    """Plain-data record of one occurrence: local and UTC forms, zone and tzdata version (SCHED-2)."""
    return {
        "scheduled_at": to_local_iso(instant, spec.timezone),
        "utc": _utc_iso(instant),
        "timezone": spec.timezone,
        "tzdata_version": spec.tzdata_version,
    }


def _utc_iso(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _require_aware(instant: datetime) -> datetime:
    if instant.utcoffset() is None:
        raise ValueError(f"{instant!r} is naive: pass an aware datetime (e.g. with tzinfo=UTC)")
    return instant


# ------------------------------------------------------------------------------------- public API


def next_occurrences(spec: ScheduleSpec, after: datetime, count: int) -> list[datetime]:
    """Up to ``count`` occurrences strictly after ``after``, ascending, aware UTC, none past ``end``."""
    return list(islice(_instants(spec, _require_aware(after).astimezone(UTC)), max(count, 0)))


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
    stop = _require_aware(end).astimezone(UTC)
    return takewhile(lambda t: t <= stop, _instants(spec, _require_aware(start).astimezone(UTC)))


# ----------------------------------------------------------------------------------- the sequence


@dataclass(frozen=True)
class _Window:
    """Where one search looks: instants ``> after`` and ``<= end``."""

    after: datetime
    end: datetime | None


def _instants(spec: ScheduleSpec, after: datetime) -> Iterator[datetime]:
    zone = _load_zone(spec.timezone)
    if spec.start is not None and spec.start > after:
        after = spec.start - _TICK
    window = _Window(after, spec.end)
    streams = []
    if spec.cron is not None:
        expr = _expand(spec.cron)
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
    here = after.astimezone(zone).utcoffset()
    ahead = [(after + timedelta(hours=h)).astimezone(zone).utcoffset() for h in range(27)]
    return max(timedelta(0), *(here - offset for offset in ahead)) + _MINUTE


def _cron_instants(spec: ScheduleSpec, zone: ZoneInfo, window: _Window, excluder: _Excluder) -> Iterator[datetime]:
    """Cron instants in ascending order.

    Wall times come from croniter in ascending local order; their instants are not always ascending
    (``fold: both`` yields the second pass after later first-pass times), so they wait in a heap
    until the smallest instant of a later wall time proves nothing smaller can follow.
    """
    it = croniter(_expand(spec.cron or ""), _wall(window.after, zone) - _backoff(window.after, zone))
    pending: list[datetime] = []
    misses, horizon = 0, _horizon(_wall(window.after, zone))
    while (wall := _next_wall(it)) is not None and wall <= horizon and misses <= MAX_EXCLUDED_IN_A_ROW:
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
        elif (misses := misses + 1) > MAX_EXCLUDED_IN_A_ROW:
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
        self._crons = [(croniter(_expand(e), _REFERENCE), _cron_unit(e, minutes, hours)) for e in spec.exclude_cron]

    def unit(self, wall: datetime) -> _Unit | None:
        """The coarsest local unit (day, hour, minute) around ``wall`` that is excluded, if any."""
        if wall.date() in self._dates:
            return "day"
        minute = wall.replace(second=0, microsecond=0)
        units = [unit for it, unit in self._crons if _matches(it, minute)]
        return min(units, key=("day", "hour", "minute").index) if units else None


def _matches(it: croniter, minute: datetime) -> bool:
    it.set_current(minute - _TICK, force=True)
    return _next_wall(it) == minute


def _field(expr: str, index: int, size: int) -> frozenset[int]:
    values = croniter(_expand(expr), _REFERENCE).expanded[index]
    return frozenset(range(size)) if values == ["*"] else frozenset(int(v) for v in values)


def _cron_unit(expr: str, minutes: frozenset[int], hours: frozenset[int]) -> _Unit:
    if not minutes <= _field(expr, 0, 60):
        return "minute"
    return "day" if hours <= _field(expr, 1, 24) else "hour"


__all__ = [
    "ALIASES",
    "HORIZON_YEARS",
    "MAX_EXCLUDED_IN_A_ROW",
    "TZDATA_VERSION",
    "ScheduleConfigError",
    "ScheduleSpec",
    "count_between",
    "has_future",
    "next_occurrences",
    "occurrence_record",
    "occurrences_between",
    "parse_instant",
    "parse_schedule",
    "to_local_iso",
]
