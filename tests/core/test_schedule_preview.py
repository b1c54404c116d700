"""`wfi schedule preview`: the next intended instants of a Workfile's schedule, as the activation computes them."""

from __future__ import annotations

import json
import pathlib
from datetime import UTC, datetime

import pytest
import tzdata

from wf_initiation.cli import main
from wf_initiation.core.schedule import next_occurrences, parse_schedule, to_local_iso

NIGHTLY = """\
name: nightly
on:
  time.schedule:
    cron: "30 2 * * *"
    timezone: America/New_York
    dst: {gap: shift}
"""

TWO_SCHEDULES = """\
name: reports
on:
  - time.schedule: {cron: "0 9 * * 1-5", timezone: Europe/Berlin}
    as: weekday
  - time.schedule: {interval: 6h}
    as: every_six
  - workflow.completed: {workflow: nightly}
    as: after_nightly
"""


@pytest.fixture
def workfile(tmp_path: pathlib.Path):
    def write(text: str) -> str:
        path = tmp_path / "Workfile.yaml"
        path.write_text(text)
        return str(path)

    return write


def test_preview_prints_local_and_utc_instants_under_a_tzdata_header(workfile, capsys) -> None:
    code = main(["schedule", "preview", workfile(NIGHTLY), "--from", "2026-03-06T12:00:00Z", "--count", "3"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert f"tzdata {tzdata.IANA_VERSION}" in lines[0] and "America/New_York" in lines[0]
    assert [line.split() for line in lines[1:]] == [
        ["2026-03-07T02:30:00-05:00", "2026-03-07T07:30:00Z"],
        ["2026-03-08T03:00:00-04:00", "2026-03-08T07:00:00Z"],
        ["2026-03-09T02:30:00-04:00", "2026-03-09T06:30:00Z"],
    ]


def test_preview_json_is_a_list_of_occurrences_with_scheduled_at(workfile, capsys) -> None:
    # proves: SCHED-2 (the preview records the tz-database version of every instant)
    code = main(["schedule", "preview", workfile(NIGHTLY), "--from", "2026-03-07T12:00:00+01:00", "--count", "2", "--json"])
    assert code == 0
    assert json.loads(capsys.readouterr().out) == [
        {"scheduled_at": "2026-03-08T03:00:00-04:00", "utc": "2026-03-08T07:00:00Z", "entry": "schedule",
         "timezone": "America/New_York", "tzdata_version": tzdata.IANA_VERSION},
        {"scheduled_at": "2026-03-09T02:30:00-04:00", "utc": "2026-03-09T06:30:00Z", "entry": "schedule",
         "timezone": "America/New_York", "tzdata_version": tzdata.IANA_VERSION},
    ]


def test_preview_agrees_with_the_sequence_the_activation_uses(workfile, capsys) -> None:
    config = {"cron": "*/15 * * * *", "timezone": "Australia/Sydney", "dst": {"fold": "both"}}
    text = "name: q\non:\n  time.schedule: " + json.dumps(config) + "\n"
    assert main(["schedule", "preview", workfile(text), "--from", "2026-04-04T15:00:00Z", "--count", "12", "--json"]) == 0
    spec = parse_schedule(config)
    expected = [to_local_iso(t, "Australia/Sydney") for t in next_occurrences(spec, datetime(2026, 4, 4, 15, tzinfo=UTC), 12)]
    assert [r["scheduled_at"] for r in json.loads(capsys.readouterr().out)] == expected


def test_preview_picks_the_named_entry(workfile, capsys) -> None:
    code = main(["schedule", "preview", workfile(TWO_SCHEDULES), "--entry", "weekday", "--from", "2026-01-02T12:00:00Z", "--count", "2", "--json"])
    assert code == 0
    got = json.loads(capsys.readouterr().out)
    assert [(r["entry"], r["scheduled_at"]) for r in got] == [("weekday", "2026-01-05T09:00:00+01:00"), ("weekday", "2026-01-06T09:00:00+01:00")]


def test_several_schedule_entries_without_entry_name_the_choices(workfile, capsys) -> None:
    assert main(["schedule", "preview", workfile(TWO_SCHEDULES), "--from", "2026-01-01T00:00:00Z"]) == 1
    err = capsys.readouterr().err
    assert "--entry" in err and "weekday" in err and "every_six" in err and "Traceback" not in err


def test_an_entry_that_is_not_a_schedule_is_refused_with_the_choices(workfile, capsys) -> None:
    assert main(["schedule", "preview", workfile(TWO_SCHEDULES), "--entry", "after_nightly"]) == 1
    err = capsys.readouterr().err
    assert "no time.schedule entry named 'after_nightly'" in err and "weekday, every_six" in err


def test_a_workfile_without_a_schedule_says_so(workfile, capsys) -> None:
    text = "name: follow\non:\n  workflow.completed: {workflow: nightly}\n"
    assert main(["schedule", "preview", workfile(text)]) == 1
    assert "has no time.schedule trigger" in capsys.readouterr().err


def test_an_invalid_workfile_prints_its_diagnostics_and_exits_1(workfile, capsys) -> None:
    text = "name: w\non:\n  time.schedule: {cron: '0 9 * * *', every: 1}\n"
    assert main(["schedule", "preview", workfile(text)]) == 1
    err = capsys.readouterr().err
    assert "error" in err and "every" in err and "Traceback" not in err


def test_a_schedule_that_cannot_be_evaluated_is_refused(workfile, capsys) -> None:
    # proves: SCHED-3 (the preview refuses what activation refuses, with the fix)
    text = "name: w\non:\n  time.schedule: {cron: '0 9 * * *', timezone: Mars/Olympus}\n"
    assert main(["schedule", "preview", workfile(text), "--from", "2026-01-01T00:00:00Z"]) == 1
    assert "Mars/Olympus" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["yesterday", "2026-03-08T00:00:00", "2026-13-01T00:00:00Z"])
def test_a_bad_from_is_a_usage_error(workfile, capsys, bad: str) -> None:
    with pytest.raises(SystemExit) as exited:  # argparse's usage error
        main(["schedule", "preview", workfile(NIGHTLY), "--from", bad])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --from" in err and "with an offset" in err and "Traceback" not in err


def test_a_schedule_with_no_future_occurrence_prints_none_and_succeeds(workfile, capsys) -> None:
    # proves: SCHED-4 (a valid sequence with no future occurrence is shown as such, not as an error)
    text = "name: w\non:\n  time.schedule: {cron: '@daily', end: '2025-01-01T00:00:00Z'}\n"
    assert main(["schedule", "preview", workfile(text), "--from", "2026-01-01T00:00:00Z"]) == 0
    assert "no occurrence follows" in capsys.readouterr().out
    assert main(["schedule", "preview", workfile(text), "--from", "2026-01-01T00:00:00Z", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_count_must_be_positive(workfile, capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["schedule", "preview", workfile(NIGHTLY), "--count", "0"])
    assert caught.value.code == 2
    assert "--count" in capsys.readouterr().err


def test_preview_without_from_lists_instants_after_now(workfile, capsys) -> None:
    before = datetime.now(UTC)
    assert main(["schedule", "preview", workfile(NIGHTLY), "--count", "1", "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)
    assert datetime.fromisoformat(record["utc"]) > before
