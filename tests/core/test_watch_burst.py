"""How a watch activity groups run endings into one report (activities.runs.wait_for_burst)."""

from __future__ import annotations

import asyncio

from wf_initiation.activities.runs import wait_for_burst


def ending_at(*delays: float) -> list[asyncio.Task[None]]:
    return [asyncio.create_task(asyncio.sleep(d)) for d in delays]


async def test_a_burst_comes_back_in_one_report_and_a_later_ending_in_the_next() -> None:
    # proves: TRIG-14
    # Every ending is reported (the key is released) - a burst just shares one report.
    tasks = ending_at(0.01, 0.03, 0.05, 0.6)
    await wait_for_burst(tasks, max_wait=5, linger=0.05)
    assert [t.done() for t in tasks] == [True, True, True, False]
    for t in tasks:
        t.cancel()


async def test_a_steady_stream_of_endings_is_reported_within_the_linger_cap() -> None:
    # proves: TRIG-14
    tasks = ending_at(*(0.02 * i for i in range(1, 200)))  # one ending every 20 ms for 4 s
    loop = asyncio.get_running_loop()
    began = loop.time()
    await wait_for_burst(tasks, max_wait=5, linger=0.05, max_linger=0.3)
    assert loop.time() - began < 0.02 + 0.3 + 0.1, "the report does not wait for the stream to end"
    assert 10 <= sum(t.done() for t in tasks) < 199
    for t in tasks:
        t.cancel()


async def test_no_ending_within_max_wait_reports_nothing() -> None:
    # proves: TRIG-14
    tasks = ending_at(1.0)
    await wait_for_burst(tasks, max_wait=0.05, linger=0.05)
    assert not tasks[0].done()
    tasks[0].cancel()
