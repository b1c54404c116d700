"""The ``time.schedule`` occurrence sequence: aliases, bounds, exclusions, unions, validation, determinism."""

from __future__ import annotations

import json
import sys
from datetime import UTC, date, datetime, timedelta

import pytest
import tzdata
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from wf_initiation.core.schedule import (
    TZDATA_VERSION,
    ScheduleConfigError,
    ScheduleSpec,
    count_between,
    has_future,
    next_occurrences,
    occurrence_record,
    occurrences_between,
    parse_schedule,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)  # a Thursday


def z(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# ------------------------------------------------------------------------------------ aliases


@pytest.mark.parametrize(
    ("alias", "written"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ],
)
def test_an_alias_fires_exactly_like_its_five_field_expression(alias: str, written: str) -> None:
    for zone in ("UTC", "Europe/Berlin"):
        by_alias = next_occurrences(parse_schedule({"cron": alias, "timezone": zone}), T0, 5)
        by_fields = next_occurrences(parse_schedule({"cron": written, "timezone": zone}), T0, 5)
        assert by_alias == by_fields and len(by_alias) == 5


def test_aliases_name_the_expected_instants() -> None:
    assert next_occurrences(parse_schedule({"cron": "@weekly"}), T0, 2) == [z("2026-01-04T00:00"), z("2026-01-11T00:00")]
    assert next_occurrences(parse_schedule({"cron": "@yearly", "timezone": "Asia/Tokyo"}), T0, 1) == [z("2026-12-31T15:00")]


# ------------------------------------------------------------------------------- start and end


def test_start_and_end_are_inclusive() -> None:
    spec = parse_schedule({"cron": "0 * * * *", "start": "2026-01-01T03:00:00Z", "end": "2026-01-01T05:00:00+00:00"})
    assert next_occurrences(spec, T0, 10) == [z("2026-01-01T03:00"), z("2026-01-01T04:00"), z("2026-01-01T05:00")]


def test_start_and_end_accept_any_offset() -> None:
    spec = parse_schedule({"cron": "0 * * * *", "start": "2026-01-01T12:00:00+09:00", "end": "2026-01-01T04:00:00+01:00"})
    assert next_occurrences(spec, T0, 10) == [z("2026-01-01T03:00")]


def test_next_occurrences_stops_at_end_and_is_strictly_after() -> None:
    spec = parse_schedule({"cron": "*/30 * * * *", "end": "2026-01-01T02:00:00Z"})
    assert next_occurrences(spec, z("2026-01-01T01:00"), 10) == [z("2026-01-01T01:30"), z("2026-01-01T02:00")]


def test_a_sequence_whose_end_has_passed_has_no_future() -> None:
    # proves: SCHED-4 (a valid sequence with no future occurrence is detected as such)
    spec = parse_schedule({"cron": "@daily", "end": "2025-06-01T00:00:00Z"})
    assert not has_future(spec, T0)
    assert next_occurrences(spec, T0, 5) == []
    assert has_future(spec, z("2025-05-01T00:00"))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "config",
    [
        {"cron": "*/15 * * * *", "exclude": {"cron": ["*/15 * * * *"]}},
        {"cron": "*/15 * * * *", "exclude": {"cron": ["0,15 * * * *", "30,45 * * * *"]}},
        {"cron": "0 9 * * *", "exclude": {"cron": ["* * * * *"]}},
        {"interval": "1m", "exclude": {"cron": ["0-29 * * * *", "30-59 * * * *"]}},
    ],
    ids=["same-expression", "two-halves", "every-minute", "interval"],
)
def test_a_schedule_whose_every_candidate_is_excluded_terminates_with_no_future(config: dict) -> None:
    # proves: SCHED-4
    spec = parse_schedule({**config, "timezone": "America/New_York"})
    assert not has_future(spec, T0)


# ---------------------------------------------------------------------------------- exclusions


def test_excluded_dates_are_local_dates() -> None:
    # 2026-01-02 in Tokyo runs from 2026-01-01T15:00Z to 2026-01-02T15:00Z.
    spec = parse_schedule({"cron": "0 */6 * * *", "timezone": "Asia/Tokyo", "exclude": {"dates": ["2026-01-02"]}})
    got = occurrences_between(spec, z("2026-01-01T08:00"), z("2026-01-02T22:00"), limit=20)
    assert got == [z("2026-01-01T09:00"), z("2026-01-02T15:00"), z("2026-01-02T21:00")]


def test_exclusion_dates_may_be_yaml_dates() -> None:
    spec = parse_schedule({"cron": "@daily", "exclude": {"dates": [date(2026, 1, 2)]}})
    assert next_occurrences(spec, T0, 2) == [z("2026-01-03T00:00"), z("2026-01-04T00:00")]


def test_exclusion_crons_remove_matching_local_instants() -> None:
    spec = parse_schedule({"cron": "0 9 * * *", "timezone": "Europe/Berlin", "exclude": {"cron": ["* * * * 0,6"]}})
    got = next_occurrences(spec, T0, 5)
    assert [t.date().isoformat() for t in got] == ["2026-01-01", "2026-01-02", "2026-01-05", "2026-01-06", "2026-01-07"]
    assert all(t.hour == 8 for t in got)


def test_an_exclusion_matching_the_shifted_wall_time_removes_it() -> None:
    spec = parse_schedule({"cron": "30 2 * * *", "timezone": "America/New_York", "exclude": {"cron": ["0 3 * * *"]}})
    assert next_occurrences(spec, z("2026-03-07T12:00"), 1) == [z("2026-03-09T06:30")]


def test_exclusions_apply_to_interval_instants_by_local_time() -> None:
    spec = parse_schedule({"interval": "30m", "timezone": "Asia/Tokyo", "exclude": {"cron": ["* 0-8 * * *"]}})
    got = next_occurrences(spec, z("2026-01-01T14:00"), 3)  # 23:00 JST, then midnight to 09:00 is excluded
    assert got == [z("2026-01-01T14:30"), z("2026-01-02T00:00"), z("2026-01-02T00:30")]


# ------------------------------------------------------------------------------------ interval


def test_an_interval_is_anchored_at_start() -> None:
    spec = parse_schedule({"interval": "1h30m", "start": "2026-01-01T00:10:00Z"})
    assert next_occurrences(spec, z("2025-12-01T00:00"), 3) == [z("2026-01-01T00:10"), z("2026-01-01T01:40"), z("2026-01-01T03:10")]
    assert next_occurrences(spec, z("2026-01-01T01:40"), 1) == [z("2026-01-01T03:10")]


def test_an_interval_without_start_is_anchored_at_the_unix_epoch() -> None:
    spec = parse_schedule({"interval": "7m"})
    got = next_occurrences(spec, T0, 3)
    assert all(int(t.timestamp()) % 420 == 0 for t in got)
    assert got[0] - T0 <= timedelta(minutes=7) and got[1] - got[0] == timedelta(minutes=7)


def test_cron_and_interval_together_are_the_sorted_union_without_duplicates() -> None:
    spec = parse_schedule({"cron": "0 * * * *", "interval": "40m"})
    got = occurrences_between(spec, z("2026-01-01T00:00"), z("2026-01-01T02:00"), limit=20)
    assert got == [z(f"2026-01-01T{h}") for h in ("00:40", "01:00", "01:20", "02:00")]


# ------------------------------------------------------------------------------- between/count


def test_occurrences_between_excludes_the_start_and_includes_the_end() -> None:
    spec = parse_schedule({"cron": "0 * * * *"})
    assert occurrences_between(spec, z("2026-01-01T01:00"), z("2026-01-01T03:00"), 10) == [z("2026-01-01T02:00"), z("2026-01-01T03:00")]
    assert occurrences_between(spec, z("2026-01-01T01:00"), z("2026-01-01T03:00"), 1) == [z("2026-01-01T02:00")]


def test_count_between_stops_at_its_cap() -> None:
    spec = parse_schedule({"cron": "* * * * *"})
    assert count_between(spec, T0, T0 + timedelta(days=365), cap=100) == 100
    assert count_between(spec, T0, T0 + timedelta(hours=1), cap=1000) == 60


# ---------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ({"cron": "61 * * * *"}, "'cron': '61 * * * *' is not a valid cron expression"),
        ({"cron": "99 99 * * *"}, "is not a valid cron expression"),
        ({"cron": "R R * * *"}, "random (R) or hashed (H)"),
        ({"cron": "H 3 * * *"}, "random (R) or hashed (H)"),
        ({"interval": "999999999d"}, "longer than"),
        ({"interval": "3651d"}, "longer than 3650d"),
        ({"cron": "@daily", "start": "9999-12-31T00:00:00Z"}, "outside 1970-01-01 .. 2199-12-31"),
        ({"cron": "@daily", "end": "1969-12-31T23:59:59Z"}, "outside 1970-01-01"),
        ({"cron": "* * * * * *"}, "write exactly 5"),
        ({"cron": "@reboot"}, "unknown alias"),
        ({"cron": "@daily", "timezone": "Mars/Olympus"}, "unknown zone 'Mars/Olympus'"),
        ({"cron": "@daily", "timezone": "../etc/passwd"}, "is not an IANA zone name"),
        ({"cron": "@daily", "timezone": "america/new_york"}, "case-sensitive"),
        ({"interval": "fortnight"}, "'interval': 'fortnight' is not an interval"),
        ({"interval": "0s"}, "at least 1s"),
        ({"cron": "@daily", "start": "2026-02-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, "is before 'start'"),
        ({"cron": "@daily", "start": "2026-01-01T00:00:00"}, "with an offset"),
        ({"cron": "@daily", "exclude": {"dates": ["01/02/2026"]}}, "write YYYY-MM-DD"),
        ({"cron": "@daily", "exclude": {"cron": ["nope"]}}, "'exclude.cron'"),
        ({"cron": "@daily", "exclude": {"weekdays": [1]}}, "'exclude.weekdays' is not allowed"),
        ({"cron": "@daily", "dst": {"gap": "jump"}}, "use skip or shift"),
        ({"cron": "@daily", "dst": {"fold": "second"}}, "use first, last or both"),
        ({"timezone": "UTC"}, "give 'cron'"),
        ({"cron": "@daily", "every": "1h"}, "unknown key(s) every"),
    ],
)
def test_a_configuration_that_cannot_be_evaluated_is_rejected_with_the_fix(config: dict, fragment: str) -> None:
    # proves: SCHED-3
    with pytest.raises(ScheduleConfigError) as caught:
        parse_schedule(config)
    assert any(fragment in problem for problem in caught.value.problems), caught.value.problems


def test_every_problem_of_a_configuration_is_reported_at_once() -> None:
    # proves: SCHED-3
    with pytest.raises(ScheduleConfigError) as caught:
        parse_schedule({"cron": "bad", "timezone": "Nowhere/City", "interval": "x"})
    assert len(caught.value.problems) == 3
    assert isinstance(caught.value, ValueError)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(
    st.sampled_from(["cron", "interval", "timezone", "start", "end", "exclude", "dst", "other"]),
    st.one_of(st.text(max_size=20), st.integers(), st.none(), st.lists(st.text(max_size=8), max_size=3),
              st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=2)),
))
def test_arbitrary_configuration_either_parses_or_raises_schedule_config_error(config: dict) -> None:
    # proves: SCHED-3 (nothing but a diagnosable ScheduleConfigError escapes)
    try:
        spec = parse_schedule(config)
    except ScheduleConfigError as exc:
        assert exc.problems
        return
    next_occurrences(spec, T0, 2)


# --------------------------------------------------------------------------------- determinism

CRONS = ["*/15 * * * *", "30 2 * * *", "0 1,2,3 * * *", "0 0 * * 1-5", "@hourly", "5 4 1 * *", "0 0 29 2 *"]
ZONES = ["UTC", "America/New_York", "Australia/Sydney", "Asia/Tokyo", "Europe/London", "Australia/Lord_Howe"]


@st.composite
def specs(draw: st.DrawFn) -> ScheduleSpec:
    config: dict = {"timezone": draw(st.sampled_from(ZONES)), "dst": {"gap": draw(st.sampled_from(["skip", "shift"])), "fold": draw(st.sampled_from(["first", "last", "both"]))}}
    kind = draw(st.sampled_from(["cron", "interval", "both"]))
    if kind != "interval":
        config["cron"] = draw(st.sampled_from(CRONS))
    if kind != "cron":
        config["interval"] = draw(st.sampled_from(["15m", "1h", "45m", "1d", "90s"]))
    return parse_schedule(config)


moments = st.datetimes(min_value=datetime(2024, 1, 1), max_value=datetime(2030, 1, 1)).map(lambda d: d.replace(tzinfo=UTC))


@settings(max_examples=150, deadline=None)
@given(specs(), moments)
def test_asking_later_never_moves_or_renames_later_occurrences(spec: ScheduleSpec, after: datetime) -> None:
    # proves: SCHED-7 (the instants after any point are the same whenever the sequence is consulted)
    # proves: SCHED-2 (same configuration and instant, same answer)
    got = next_occurrences(spec, after, 8)
    assert got == sorted(set(got)) and all(t > after for t in got) and len(got) == 8
    for i, t in enumerate(got):
        assert next_occurrences(spec, t, 7 - i) == got[i + 1 :]
    assert occurrences_between(spec, after, got[-1], 100) == got
    assert next_occurrences(parse_schedule(_config(spec)), after, 8) == got


def _config(spec: ScheduleSpec) -> dict:
    return {k: v for k, v in spec.to_dict().items() if k != "tzdata_version"}


def test_the_spec_is_hashable_and_round_trips_through_json() -> None:
    config = {"cron": "30 2 * * 1-5", "interval": "1h30m", "timezone": "Europe/Berlin", "start": "2026-01-01T00:00:00+01:00",
              "end": "2027-01-01T00:00:00Z", "exclude": {"dates": ["2026-12-25"], "cron": ["* * 24 12 *"]}, "dst": {"gap": "skip", "fold": "both"}}
    spec = parse_schedule(config)
    data = json.loads(json.dumps(spec.to_dict()))
    assert data["tzdata_version"] == TZDATA_VERSION == tzdata.IANA_VERSION
    assert ScheduleSpec.from_dict(data) == spec and hash(ScheduleSpec.from_dict(data)) == hash(spec)
    assert parse_schedule(config) == spec


def test_from_dict_keeps_the_recorded_tzdata_version() -> None:
    data = parse_schedule({"cron": "@daily"}).to_dict() | {"tzdata_version": "2024a"}
    assert ScheduleSpec.from_dict(data).tzdata_version == "2024a"


def test_each_occurrence_record_names_the_zone_offset_and_tzdata_version() -> None:
    # proves: SCHED-2 (the tz-database version is recorded with every occurrence)
    spec = parse_schedule({"cron": "30 2 * * *", "timezone": "America/New_York"})
    (instant,) = next_occurrences(spec, z("2026-03-08T00:00"), 1)
    assert occurrence_record(spec, instant) == {
        "scheduled_at": "2026-03-08T03:00:00-04:00",
        "utc": "2026-03-08T07:00:00Z",
        "timezone": "America/New_York",
        "tzdata_version": tzdata.IANA_VERSION,
    }


def test_the_sequence_never_reads_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    # proves: SCHED-2 (no hidden input: croniter is never left to read the host clock)
    def no_clock() -> float:
        raise AssertionError("the host clock was read")

    monkeypatch.setattr(sys.modules["croniter.croniter"], "time", no_clock)
    with pytest.raises(AssertionError, match="clock"):  # the trap works: croniter without a start reads it
        croniter("* * * * *")
    spec = parse_schedule({"cron": "*/15 * * * *", "interval": "7m", "timezone": "Australia/Sydney", "exclude": {"cron": ["0 3 * * *"]}})
    assert len(next_occurrences(spec, T0, 50)) == 50


def test_naive_instants_are_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        next_occurrences(parse_schedule({"cron": "@daily"}), datetime(2026, 1, 1), 1)
