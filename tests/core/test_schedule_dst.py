"""DST policies of ``time.schedule`` against hand-written UTC instants.

The expected instants come from the published 2026 transitions, not from croniter or zoneinfo:

* America/New_York: 2026-03-08 02:00 EST (-05) -> 03:00 EDT (-04) at 07:00Z;
  2026-11-01 02:00 EDT -> 01:00 EST at 06:00Z (01:00-01:59 local happens twice).
* Australia/Sydney: 2026-04-05 03:00 AEDT (+11) -> 02:00 AEST (+10) at 2026-04-04 16:00Z
  (02:00-02:59 local happens twice); 2026-10-04 02:00 AEST -> 03:00 AEDT at 2026-10-03 16:00Z.
* Asia/Tokyo (+09, no DST) and UTC.

Every case runs under all six combinations of ``dst.gap`` x ``dst.fold``; a case lists the
expected instants per policy, keyed by the only policy that can matter for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import product

import pytest

from wf_initiation.core.schedule import next_occurrences, occurrences_between, parse_schedule, to_local_iso

GAPS = ("skip", "shift")
FOLDS = ("first", "last", "both")


def z(text: str) -> datetime:
    """A hand-written UTC instant, ``YYYY-MM-DD HH:MM``."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=UTC)


def quarters(first: str, last: str) -> list[datetime]:
    """Every quarter hour from ``first`` to ``last`` (UTC, inclusive): plain UTC arithmetic."""
    start, stop = z(first), z(last)
    return [start + timedelta(minutes=15 * i) for i in range(int((stop - start) / timedelta(minutes=15)) + 1)]


@dataclass(frozen=True)
class Case:
    name: str
    zone: str
    cron: str
    window: tuple[str, str]  # UTC instants, inclusive
    expected: dict[str, list[datetime]]  # keyed by a gap or fold policy, or "any"

    def expect(self, gap: str, fold: str) -> list[datetime]:
        for key in (gap, fold, "any"):
            if key in self.expected:
                return self.expected[key]
        raise AssertionError(f"case {self.name} has no expectation for gap={gap} fold={fold}")


CASES = [
    # --- daily 02:30 -------------------------------------------------------------------------
    Case("new-york 02:30 across spring-forward", "America/New_York", "30 2 * * *", ("2026-03-07 00:00", "2026-03-10 00:00"), {
        "skip": [z("2026-03-07 07:30"), z("2026-03-09 06:30")],
        "shift": [z("2026-03-07 07:30"), z("2026-03-08 07:00"), z("2026-03-09 06:30")],
    }),
    Case("new-york 02:30 across fall-back (02:30 is not repeated there)", "America/New_York", "30 2 * * *", ("2026-10-31 00:00", "2026-11-03 00:00"), {
        "any": [z("2026-10-31 06:30"), z("2026-11-01 07:30"), z("2026-11-02 07:30")],
    }),
    Case("new-york 01:30 across fall-back", "America/New_York", "30 1 * * *", ("2026-10-31 00:00", "2026-11-03 00:00"), {
        "first": [z("2026-10-31 05:30"), z("2026-11-01 05:30"), z("2026-11-02 06:30")],
        "last": [z("2026-10-31 05:30"), z("2026-11-01 06:30"), z("2026-11-02 06:30")],
        "both": [z("2026-10-31 05:30"), z("2026-11-01 05:30"), z("2026-11-01 06:30"), z("2026-11-02 06:30")],
    }),
    Case("sydney 02:30 across fall-back", "Australia/Sydney", "30 2 * * *", ("2026-04-03 00:00", "2026-04-06 00:00"), {
        "first": [z("2026-04-03 15:30"), z("2026-04-04 15:30"), z("2026-04-05 16:30")],
        "last": [z("2026-04-03 15:30"), z("2026-04-04 16:30"), z("2026-04-05 16:30")],
        "both": [z("2026-04-03 15:30"), z("2026-04-04 15:30"), z("2026-04-04 16:30"), z("2026-04-05 16:30")],
    }),
    Case("sydney 02:30 across spring-forward", "Australia/Sydney", "30 2 * * *", ("2026-10-02 00:00", "2026-10-05 00:00"), {
        "skip": [z("2026-10-02 16:30"), z("2026-10-04 15:30")],
        "shift": [z("2026-10-02 16:30"), z("2026-10-03 16:00"), z("2026-10-04 15:30")],
    }),
    Case("tokyo 02:30 on the new-york spring day", "Asia/Tokyo", "30 2 * * *", ("2026-03-06 00:00", "2026-03-09 00:00"), {
        "any": [z("2026-03-06 17:30"), z("2026-03-07 17:30"), z("2026-03-08 17:30")],
    }),
    Case("utc 02:30 on the new-york fall day", "UTC", "30 2 * * *", ("2026-10-31 00:00", "2026-11-03 00:00"), {
        "any": [z("2026-10-31 02:30"), z("2026-11-01 02:30"), z("2026-11-02 02:30")],
    }),
    # --- every 15 minutes, local 00:00-04:00 on the transition day -----------------------------
    # Under shift the gap's 02:00..02:45 all map to the 03:00 instant: one occurrence, so skip and
    # shift give the same instants.
    Case("new-york quarter hours across spring-forward", "America/New_York", "*/15 * * * *", ("2026-03-08 05:00", "2026-03-08 08:00"), {
        "any": quarters("2026-03-08 05:00", "2026-03-08 08:00"),
    }),
    Case("new-york quarter hours across fall-back", "America/New_York", "*/15 * * * *", ("2026-11-01 04:00", "2026-11-01 08:00"), {
        "first": quarters("2026-11-01 04:00", "2026-11-01 05:45") + quarters("2026-11-01 07:00", "2026-11-01 08:00"),
        "last": quarters("2026-11-01 04:00", "2026-11-01 04:45") + quarters("2026-11-01 06:00", "2026-11-01 08:00"),
        "both": quarters("2026-11-01 04:00", "2026-11-01 08:00"),
    }),
    Case("sydney quarter hours across fall-back", "Australia/Sydney", "*/15 * * * *", ("2026-04-04 13:00", "2026-04-04 18:00"), {
        "first": quarters("2026-04-04 13:00", "2026-04-04 15:45") + quarters("2026-04-04 17:00", "2026-04-04 18:00"),
        "last": quarters("2026-04-04 13:00", "2026-04-04 14:45") + quarters("2026-04-04 16:00", "2026-04-04 18:00"),
        "both": quarters("2026-04-04 13:00", "2026-04-04 18:00"),
    }),
    Case("sydney quarter hours across spring-forward", "Australia/Sydney", "*/15 * * * *", ("2026-10-03 14:00", "2026-10-03 17:00"), {
        "any": quarters("2026-10-03 14:00", "2026-10-03 17:00"),
    }),
    Case("tokyo quarter hours", "Asia/Tokyo", "*/15 * * * *", ("2026-03-07 15:00", "2026-03-07 19:00"), {
        "any": quarters("2026-03-07 15:00", "2026-03-07 19:00"),
    }),
    Case("utc quarter hours", "UTC", "*/15 * * * *", ("2026-11-01 00:00", "2026-11-01 04:00"), {
        "any": quarters("2026-11-01 00:00", "2026-11-01 04:00"),
    }),
]


@pytest.mark.parametrize(("gap", "fold"), list(product(GAPS, FOLDS)))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_occurrences_across_transition_days_match_the_hand_written_table(case: Case, gap: str, fold: str) -> None:
    # proves: SCHED-2 (the sequence follows from configuration + tzdata, DST policy included)
    spec = parse_schedule({"cron": case.cron, "timezone": case.zone, "dst": {"gap": gap, "fold": fold}})
    first, last = z(case.window[0]), z(case.window[1])
    expected = case.expect(gap, fold)
    assert occurrences_between(spec, first - timedelta(seconds=1), last, limit=1000) == expected
    assert next_occurrences(spec, first - timedelta(seconds=1), len(expected)) == expected


@pytest.mark.parametrize("fold", FOLDS)
def test_a_search_starting_inside_the_first_pass_finds_the_repeated_times(fold: str) -> None:
    # 05:20Z is 01:20 EDT, before the repeat of 01:00-01:59 as EST (06:00Z-06:59Z).
    spec = parse_schedule({"cron": "*/15 * * * *", "timezone": "America/New_York", "dst": {"fold": fold}})
    expected = {
        "first": [z("2026-11-01 05:30"), z("2026-11-01 05:45"), z("2026-11-01 07:00")],
        "last": [z("2026-11-01 06:00"), z("2026-11-01 06:15"), z("2026-11-01 06:30")],
        "both": [z("2026-11-01 05:30"), z("2026-11-01 05:45"), z("2026-11-01 06:00")],
    }[fold]
    assert next_occurrences(spec, z("2026-11-01 05:20"), 3) == expected


def test_shift_moves_a_missing_local_time_to_the_first_instant_after_the_gap() -> None:
    spec = parse_schedule({"cron": "30 2 * * *", "timezone": "America/New_York", "dst": {"gap": "shift"}})
    (instant,) = next_occurrences(spec, z("2026-03-08 00:00"), 1)
    assert to_local_iso(instant, "America/New_York") == "2026-03-08T03:00:00-04:00"


def test_gap_times_that_shift_onto_one_instant_are_one_occurrence() -> None:
    # proves: SCHED-13 (identity is the instant: two local times mapping to one instant are one occurrence)
    spec = parse_schedule({"cron": "0,30 2,3 * * *", "timezone": "America/New_York", "dst": {"gap": "shift"}})
    got = occurrences_between(spec, z("2026-03-08 00:00"), z("2026-03-08 12:00"), limit=10)
    assert got == [z("2026-03-08 07:00"), z("2026-03-08 07:30")]


def test_defaults_are_shift_and_first() -> None:
    spec = parse_schedule({"cron": "30 1,2 * * *", "timezone": "America/New_York"})
    assert (spec.dst_gap, spec.dst_fold) == ("shift", "first")
    spring = occurrences_between(spec, z("2026-03-08 00:00"), z("2026-03-08 12:00"), limit=10)
    fall = occurrences_between(spec, z("2026-11-01 00:00"), z("2026-11-01 12:00"), limit=10)
    assert spring == [z("2026-03-08 06:30"), z("2026-03-08 07:00")]
    assert fall == [z("2026-11-01 05:30"), z("2026-11-01 07:30")]


def test_intervals_are_absolute_and_ignore_dst() -> None:
    spec = parse_schedule({"interval": "1h", "timezone": "America/New_York", "dst": {"gap": "skip", "fold": "both"}})
    got = occurrences_between(spec, z("2026-03-08 04:30"), z("2026-03-08 09:00"), limit=10)
    assert got == [z("2026-03-08 05:00"), z("2026-03-08 06:00"), z("2026-03-08 07:00"), z("2026-03-08 08:00"), z("2026-03-08 09:00")]
    assert [to_local_iso(t, "America/New_York")[11:] for t in got] == [
        "00:00:00-05:00", "01:00:00-05:00", "03:00:00-04:00", "04:00:00-04:00", "05:00:00-04:00",
    ]
