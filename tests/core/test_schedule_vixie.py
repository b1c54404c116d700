"""Cron day rule (Vixie cron, as Temporal Schedules) and schedules with no occurrence (SCHED-4).

Issue 11 items 13 and 14. Expected dates are computed by hand from a calendar of 2026 (1 January
2026 is a Thursday), not by croniter.
"""

from __future__ import annotations

import time
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wf_initiation.core import Catalog, DurationError, load_workfile, parse_duration
from wf_initiation.core._bounds import LATEST_INSTANT, MAX_DURATION_TEXT
from wf_initiation.core.activation import resolve_activation
from wf_initiation.core.deployment import parse_deployment
from wf_initiation.core.engine._schedule import new_schedule_state
from wf_initiation.core.schedule import MAX_EXCLUDED_IN_A_ROW, ScheduleConfigError, next_occurrences, parse_schedule

T0 = datetime(2026, 1, 1, tzinfo=UTC)  # a Thursday


def days(*pairs: tuple[int, int], year: int = 2026) -> list[date]:
    return [date(year, m, d) for m, d in pairs]


@pytest.mark.parametrize(
    ("cron", "expected"),
    [
        # a day field starting with `*`: a day must match both fields
        ("0 0 */2 * MON", days((1, 5), (1, 19), (2, 9), (2, 23), (3, 9), (3, 23))),  # odd days that are Mondays
        ("0 0 * * MON", days((1, 5), (1, 12), (1, 19), (1, 26))),
        ("0 0 */10 * */3", days((1, 11), (1, 21), (1, 31), (2, 1), (2, 11), (2, 21))),  # 1,11,21,31 on Sun/Wed/Sat
        ("0 0 */2 * *", days((1, 3), (1, 5), (1, 7))),
        ("0 0 13 * *", days((1, 13), (2, 13), (3, 13))),
        # both day fields restricted, neither starting with `*`: either field matching is enough
        ("0 0 1,15 * MON", days((1, 5), (1, 12), (1, 15), (1, 19), (1, 26), (2, 1), (2, 2), (2, 9))),
        ("0 0 13 * FRI", days((1, 2), (1, 9), (1, 13), (1, 16), (1, 23), (1, 30), (2, 6), (2, 13))),
        ("0 0 1-7 * MON", days((1, 2), (1, 3), (1, 4), (1, 5), (1, 6), (1, 7), (1, 12), (1, 19), (1, 26), (2, 1))),
        ("0 0 29 2 MON", [*days((2, 2), (2, 9), (2, 16), (2, 23)), date(2027, 2, 1)]),  # February only
        # a rare date is found years ahead
        ("0 0 29 2 *", [date(2028, 2, 29), date(2032, 2, 29)]),
    ],
)
def test_cron_days_follow_the_vixie_rule(cron: str, expected: list[date]) -> None:
    # proves: SCHED-1, SCHED-2
    got = next_occurrences(parse_schedule({"cron": cron}), T0, len(expected))
    assert [t.date() for t in got] == expected


def test_exclusions_follow_the_same_day_rule() -> None:
    # proves: SCHED-2
    spec = parse_schedule({"cron": "@daily", "exclude": {"cron": ["0 0 */2 * MON", "0 0 L * *"]}})
    got = {t.date() for t in next_occurrences(spec, T0, 40)}
    assert date(2026, 1, 5) not in got and date(2026, 1, 19) not in got  # odd Mondays
    assert date(2026, 1, 12) in got and date(2026, 1, 7) in got  # an even Monday, an odd Wednesday
    assert date(2026, 1, 31) not in got and date(2026, 1, 30) in got  # L: the last day of the month


@pytest.mark.parametrize("cron", ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 31 2 *"])
def test_a_valid_schedule_with_no_occurrence_is_valid_and_installed_inactive(cron: str) -> None:
    # proves: SCHED-3, SCHED-4
    started = time.perf_counter()
    spec = parse_schedule({"cron": cron})
    assert next_occurrences(spec, T0, 5) == []
    assert time.perf_counter() - started < 0.5
    text = f"name: never\non:\n  time.schedule: {{cron: '{cron}'}}\n"
    result = load_workfile(text, catalog=Catalog.default())
    assert result.status == "valid", result.diagnostics
    deployment = parse_deployment({"workflows": {"never": {"run": {"workflow_type": "X", "task_queue": "q"}}}})
    activation = resolve_activation(result.workfile, deployment, Catalog.default())
    state = new_schedule_state(activation.entries[0], activation, T0)
    assert state.active is False and "SCHED-4" in (state.inactive_reason or "")


def test_an_exhausting_search_ends_quickly_at_its_bound() -> None:
    # every minute excluded by two expressions that each cover half of them: no whole hour to skip
    spec = parse_schedule({"cron": "* * * * *", "exclude": {"cron": ["*/2 * * * *", "1-59/2 * * * *"]}})
    started = time.perf_counter()
    assert next_occurrences(spec, T0, 1) == []
    assert time.perf_counter() - started < 2.0, f"{MAX_EXCLUDED_IN_A_ROW} excluded candidates took too long"


@pytest.mark.parametrize("cron", ["R R * * *", "H H * * *", "0 R * * *", "H(0-29) * * * *"])
def test_random_and_hashed_cron_fields_are_refused(cron: str) -> None:
    # proves: SCHED-2, SCHED-3 (a random field would not give the same sequence on replay)
    result = load_workfile(f"name: w\non:\n  time.schedule: {{cron: '{cron}'}}\n", catalog=Catalog.default())
    assert result.status == "invalid"
    assert any("random (R) or hashed (H)" in d.message for d in result.diagnostics)


def test_thursday_and_other_names_are_not_mistaken_for_hashed_fields() -> None:
    got = next_occurrences(parse_schedule({"cron": "0 0 * * THU,SAT"}), T0, 2)
    assert [t.date() for t in got] == days((1, 3), (1, 8))


# ------------------------------------------------------------------ no datetime overflow, by construction

instants = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC))
durations = st.one_of(
    st.from_regex(r"\A[0-9]{1,14}(ms|s|m|h|d)\Z"), st.integers(-10, 10**15), st.floats(allow_nan=True)
)


@settings(max_examples=300, deadline=None)
@given(text=durations)
def test_any_duration_text_parses_within_its_bound_or_is_refused(text: object) -> None:
    try:
        value = parse_duration(text)  # type: ignore[arg-type]
    except DurationError:
        return
    assert timedelta(0) <= value <= MAX_DURATION_TEXT


@settings(max_examples=150, deadline=None)
@given(start=instants, end=instants, after=instants, every=durations, cron=st.sampled_from(["@daily", "0 0 30 2 *", "*/7 3 * * MON"]))
def test_an_accepted_schedule_never_overflows_a_datetime(start, end, after, every, cron) -> None:
    # proves: SCHED-3 (what cannot be evaluated is refused when parsed, never while running)
    config = {"cron": cron, "start": start.isoformat(), "end": end.isoformat(), "interval": every}
    try:
        spec = parse_schedule(config)
    except ScheduleConfigError:
        return
    assert spec.start is not None and spec.start < LATEST_INSTANT
    for t in next_occurrences(spec, min(after, LATEST_INSTANT - timedelta(days=1)), 3):
        assert t < LATEST_INSTANT + timedelta(days=3660)
