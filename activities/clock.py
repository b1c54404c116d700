"""Holding an anticipated schedule occurrence until its instant (``schedule_wake_ahead``).

A Temporal timer fires after its instant, late by the server's timer processing (up to
``history.timerProcessorMaxTimeShift``, 1 s by default) and the dispatch of the task that follows.
The activation therefore sets its timer ``schedule_wake_ahead`` before an occurrence. Woken early,
it admits the occurrence at its instant in that task and holds the task until the instant: the
run's start (a local activity) first sleeps out the rest (:func:`sleep_at_least`), or, when the
occurrence starts no run, :func:`wait_for_instant` does. Nothing can reach the activation while its
task is held, so deciding a few hundred milliseconds ahead decides exactly what deciding at the
instant would.

Why this can never start a run early (SCHED-6): the workflow passes the time left as a duration
(instant minus the task's start time, which the server stamped). The activity begins after the
task started and sleeps at least that long on a monotonic clock, so when it returns the server's
clock has passed the instant, whatever the offset between the worker's and the server's wall
clocks (only their rates are assumed equal). The price of needing no clock agreement: the run
begins a few milliseconds after its instant (the time from the task's start to the activity's).
"""

from __future__ import annotations

import asyncio
import time

from temporalio import activity

from wf_initiation.wire import WAIT_ACTIVITY


async def sleep_at_least(seconds: float) -> float:
    """Sleep at least ``seconds`` of monotonic time; return the seconds actually slept."""
    start = time.monotonic()
    while (slept := time.monotonic() - start) < seconds:
        await asyncio.sleep(seconds - slept)
    return slept


@activity.defn(name=WAIT_ACTIVITY)
async def wait_for_instant(seconds: float) -> float:
    """Hold the activation's task at least ``seconds`` (an anticipated occurrence that starts no run)."""
    return await sleep_at_least(seconds)
