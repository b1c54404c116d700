"""The wait behind ``schedule_wake_ahead`` (activities.clock), run in the SDK's activity environment."""

from __future__ import annotations

import time

from temporalio.testing import ActivityEnvironment

from wf_initiation.activities.clock import wait_for_instant


async def test_the_wait_never_returns_before_the_time_left_and_reports_what_it_slept() -> None:
    # proves: SCHED-6
    for seconds in (0.0, 0.001, 0.03, 0.12):
        began = time.monotonic()
        slept = await ActivityEnvironment().run(wait_for_instant, seconds)
        assert seconds <= slept <= time.monotonic() - began, (seconds, slept)
