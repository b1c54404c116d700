"""The schedule sequence in a fresh interpreter whose host time zone database lies: the tzdata package defines the zones
(split from tests/core/test_schedule_sequence.py: a child process)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import tzdata

from wf_initiation.core import schedule


def test_the_sequence_ignores_the_host_tz_database(tmp_path: pathlib.Path) -> None:
    # proves: SCHED-2 (the tzdata package, not the host, defines the zones)
    fake = tmp_path / "zoneinfo" / "America"
    fake.mkdir(parents=True)
    shutil.copy(pathlib.Path(tzdata.__file__).parent / "zoneinfo" / "Asia" / "Tokyo", fake / "New_York")
    code = (
        "import json, sys, zoneinfo\n"
        "from datetime import datetime, UTC\n"
        "from wf_initiation.core.schedule import parse_schedule, next_occurrences\n"
        "assert zoneinfo.ZoneInfo('America/New_York').utcoffset(datetime(2026, 1, 1)).total_seconds() == 9 * 3600\n"
        "spec = parse_schedule({'cron': '30 2 * * *', 'timezone': 'America/New_York'})\n"
        "print(json.dumps([t.isoformat() for t in next_occurrences(spec, datetime(2026, 3, 7, tzinfo=UTC), 3)]))\n"
    )
    env = {**os.environ, "PYTHONTZPATH": str(tmp_path / "zoneinfo"), "TZ": "Asia/Tokyo"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=pathlib.Path(schedule.__file__).parents[1])
    assert json.loads(out.stdout) == ["2026-03-07T07:30:00+00:00", "2026-03-08T07:00:00+00:00", "2026-03-09T06:30:00+00:00"]
