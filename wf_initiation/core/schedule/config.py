"""A ``time.schedule`` configuration: parsing and validating it into a :class:`ScheduleSpec` (SCHED-3).

Pure and clock-free: a cron is checked against a fixed reference instant, zones are loaded from
the ``tzdata`` package. The occurrence sequence of a parsed spec is in :mod:`.sequence`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from importlib import resources
from typing import Any, Literal
from zoneinfo import ZoneInfo

import tzdata
from croniter import croniter

from wf_initiation.core._bounds import MAX_DURATION, MAX_SCHEDULE_EXCLUSIONS, instant_problem
from wf_initiation.core._durations import DurationError, format_duration, parse_duration
from wf_initiation.errors import ScheduleConfigError

TZDATA_VERSION: str = tzdata.IANA_VERSION
HORIZON_YEARS = 10
MAX_EXCLUDE_CRON = 20
"""Expressions in ``exclude.cron``: each is checked against every candidate of a search."""

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
_MAX_CRON = 1_000
_MAX_ZONE_NAME = 64  # the longest IANA name has 32 characters
_ZONE_NAME = re.compile(r"^[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*$")
REFERENCE = datetime(2000, 1, 1)  # fixed start for a croniter that is never asked for a date: never the clock
# croniter's random (R) and hashed (H) fields: R differs on every evaluation, H needs a hash id.
_RANDOM_OR_HASHED = re.compile(r"(?<![A-Za-z])[RrHh](?![A-Za-z])")


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
    legacy: bool = False
    """Evaluate as activations of a spec before evaluation 2 (``ActivationSpec.evaluation``) did, to replay their histories: croniter's
    own day rule (either day field, ``*/2`` counted as restricted), 50-year searches, 20,000
    excluded candidates in a row, no bounds on instants, interval and exclusions."""

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
                out[key] = utc_iso(value)
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


def parse_schedule(config: Mapping[str, Any], *, legacy: bool = False) -> ScheduleSpec:
    """Validate a ``time.schedule`` configuration.

    ``legacy=True`` parses a configuration recorded by an earlier build for replay: the bounds
    added since (instants, interval, exclusions, random fields) are not applied and the sequence
    keeps the earlier rules (see :attr:`ScheduleSpec.legacy`).

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
            f"'end' ({utc_iso(fields['end'])}) is before 'start' ({utc_iso(fields['start'])}): "
            "swap them or move 'end' later"
        )
    if problems:
        raise ScheduleConfigError(problems)
    spec = ScheduleSpec(
        **fields, exclude_dates=exclude[0], exclude_cron=exclude[1], dst_gap=dst[0], dst_fold=dst[1], legacy=legacy
    )
    problems = [] if legacy else _bound_problems(spec)
    if problems:
        raise ScheduleConfigError(problems)
    return spec


def _bound_problems(spec: ScheduleSpec) -> list[str]:
    """The limits of docs/limits.md and determinism: what makes an evaluation cheap and repeatable."""
    problems = [
        f"'{key}': {text!r} uses a random (R) or hashed (H) field: a schedule must be deterministic "
        "(SCHED-2); write the minute and hour out"
        for key, text in [("cron", spec.cron), *(("exclude.cron", e) for e in spec.exclude_cron)]
        if text is not None and _RANDOM_OR_HASHED.search(expand_cron(text))
    ]
    for key in ("start", "end"):
        value = getattr(spec, key)
        problem = instant_problem(value) if value is not None else None
        if problem is not None:
            problems.append(f"'{key}': {utc_iso(value)} {problem}")
    if spec.interval is not None and spec.interval > MAX_DURATION:
        problems.append(f"'interval': {format_duration(spec.interval)} is longer than {MAX_DURATION.days}d: use a cron for rarer events")
    if len(spec.exclude_dates) > MAX_SCHEDULE_EXCLUSIONS:
        problems.append(
            f"'exclude.dates' lists {len(spec.exclude_dates):,} dates; at most {MAX_SCHEDULE_EXCLUSIONS:,}: "
            "use exclude.cron for patterns"
        )
    if len(spec.exclude_cron) > MAX_EXCLUDE_CRON:
        problems.append(f"'exclude.cron' lists {len(spec.exclude_cron)} expressions; at most {MAX_EXCLUDE_CRON}: combine them")
    for text in spec.exclude_cron:
        it = croniter(expand_cron(text), REFERENCE)
        if it.nth_weekday_of_month or it.nearest_weekday:
            problems.append(
                f"'exclude.cron': {text!r} uses # or W: exclusions take plain fields (numbers, names, ranges, "
                "steps, lists, L for the last day of the month)"
            )
    return problems


def _collect(problems: list[str], parse: Any, value: Any) -> Any:
    try:
        return parse(value)
    except ScheduleConfigError as exc:
        problems.extend(exc.problems)
        return None


def _optional(problems: list[str], parse: Any, value: Any, key: str) -> Any:
    return None if value is None else _collect(problems, lambda v: parse(v, key), value)


def _parse_zone(name: Any) -> str:
    load_zone(name)
    return name


def _parse_cron(expr: Any, key: str = "cron") -> str:
    if not isinstance(expr, str) or not expr.strip():
        raise ScheduleConfigError([f"'{key}' must be a cron string such as '30 2 * * *' or '@daily', not {expr!r}"])
    text = expr.strip()
    if len(text) > _MAX_CRON:
        raise ScheduleConfigError([f"'{key}': {_cut(text)} has {len(text):,} characters; a cron has at most {_MAX_CRON}"])
    if text.startswith("@") and text.lower() not in ALIASES:
        raise ScheduleConfigError([f"'{key}': unknown alias {text!r}: use one of {', '.join(ALIASES)}"])
    fields = expand_cron(text).split()
    if len(fields) != 5:
        raise ScheduleConfigError([
            f"'{key}': {text!r} has {len(fields)} field(s): "
            "write exactly 5 (minute hour day-of-month month day-of-week)"
        ])
    try:
        # Syntax and ranges only: whether any date matches (0 0 30 2 *) is the sequence's question,
        # and a valid sequence with no occurrence leaves the activation inactive (SCHED-4).
        croniter.expand(expand_cron(text))
    # croniter's own errors are ValueErrors; its parser lets the others escape on odd input
    except (ValueError, KeyError, TypeError, IndexError, OverflowError) as exc:
        if _RANDOM_OR_HASHED.search(expand_cron(text)):
            raise ScheduleConfigError([
                f"'{key}': {text!r} uses a random (R) or hashed (H) field: a schedule must be deterministic "
                "(SCHED-2); write the minute and hour out"
            ]) from None
        raise ScheduleConfigError([
            f"'{key}': {text!r} is not a valid cron expression ({exc}): write e.g. '*/15 * * * *'"
        ]) from None
    return text


def expand_cron(expr: str) -> str:
    return ALIASES.get(expr.strip().lower(), expr.strip())


def cron_iter(expr: str, start: datetime, *, legacy: bool = False) -> croniter:
    """A croniter over ``expr`` from ``start`` with Vixie cron's day rule and a bounded search.

    Vixie cron (and Temporal Schedules): when the day-of-month or the day-of-week field starts
    with ``*``, a day must match both fields (``0 0 */2 * MON``: odd days that are Mondays);
    when both are restricted, either field matching is enough (``0 0 1,15 * MON``). croniter's
    ``implement_cron_bug`` is exactly that rule. A search for the next match gives up after
    :data:`HORIZON_YEARS` + 1 years (croniter raises; the sequence ends there).
    """
    if legacy:  # see ScheduleSpec.legacy
        return croniter(expand_cron(expr), start)
    return croniter(
        expand_cron(expr), start, day_or=True, implement_cron_bug=True, max_years_between_matches=HORIZON_YEARS + 1
    )


def _parse_interval(text: Any, key: str = "interval") -> timedelta:
    try:
        if not isinstance(text, str):
            raise DurationError(text)
        value = parse_duration(text)
    except DurationError as exc:
        reason = f" ({exc})" if "longer than" in str(exc) else ""
        raise ScheduleConfigError([f"'{key}': {_cut(text)} is not an interval{reason}: write e.g. 15m, 1h30m, 1d"]) from None
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
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59-01:00 is past datetime.max in UTC
        return value.replace(tzinfo=UTC) if value.year > 9000 else None


def parse_instant(text: str) -> datetime:
    """Parse an ISO-8601 instant that carries an offset (``Z`` or ``+01:00``) into aware UTC.

    Raises:
        ScheduleConfigError: when ``text`` is not such an instant, or lies outside 1970..2199.
    """
    parsed = _parse_instant(text, "instant")
    problem = instant_problem(parsed)
    if problem is not None:
        raise ScheduleConfigError([f"{text!r} {problem}"])
    return parsed


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


def load_zone(name: Any) -> ZoneInfo:
    """Load ``name`` from the tzdata package, never from the host (a fresh object: no global cache)."""
    if not isinstance(name, str) or len(name) > _MAX_ZONE_NAME or not _ZONE_NAME.match(name):
        raise ScheduleConfigError([
            f"'timezone': {_cut(name)} is not an IANA zone name: write e.g. 'America/New_York' or 'UTC'"
        ])
    unknown = ScheduleConfigError([
        f"'timezone': unknown zone {name!r} in tzdata {TZDATA_VERSION}: "
        "write an IANA name such as 'Europe/Berlin' (names are case-sensitive)"
    ])
    try:
        path = resources.files("tzdata.zoneinfo").joinpath(*name.split("/"))
        if not path.is_file():
            raise unknown
        with path.open("rb") as handle:
            return ZoneInfo.from_file(handle, key=name)
    except (OSError, ValueError):  # a name the file system cannot hold, or a file that is not a zone
        raise unknown from None


def utc_iso(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _cut(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:56] + "...'"
