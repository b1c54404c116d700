"""A poll source that keeps failing is one short line in the worker's log, not one long line per attempt."""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
import sqlite3
import sys
from typing import Any

from temporalio.exceptions import ApplicationError

from tests.support.activation import make_spec, unique
from tests.support.pollsources import CliWorker
from tests.support.waits import assert_eventually
from wf_initiation._poll_log import REMIND_AFTER, PollFailuresOncePerSource
from wf_initiation.client import WfiClient
from wf_initiation.wire import POLL_SOURCE_UNAVAILABLE, poll_activity_name, workflow_id_for

FAST_POLL = {"interval": "200ms", "backoff_initial": "200ms", "backoff_max": "500ms", "limit": 50, "timeout": "3s"}


def sql_spec(tmp_path: pathlib.Path, name: str, task_queue: str, db: pathlib.Path) -> Any:
    return make_spec(tmp_path, f"""
        name: {name}
        on:
          sql.row_inserted: {{table: items, column: seq, id_column: item_id}}
          as: row
    """, task_queue=task_queue, connections={"db": {"connector": "sql", "sqlite": str(db)}}, poll=FAST_POLL)


async def failures(wfi: WfiClient, name: str, at_least: int) -> None:
    async def enough() -> None:
        poll = (await wfi.state(name))["polls"]["row"]
        assert poll["failures"] >= at_least, poll

    await assert_eventually(enough, timeout=60)


async def test_each_failing_source_is_one_short_line_however_often_its_poll_is_retried(
    dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    address = dev_env.client.service_client.config.target_host
    wfi = WfiClient(dev_env.client, task_queue=task_queue)
    names = [unique("down-a"), unique("down-b")]
    missing = {name: tmp_path / f"{name}.db" for name in names}
    worker = CliWorker(tmp_path, address, task_queue).start()
    try:
        for name in names:
            await wfi.activate(sql_spec(tmp_path, name, task_queue, missing[name]))
        for name in names:
            await failures(wfi, name, 5)
        # The source comes back: the activation polls it and the new row starts its run. Built
        # beside it and moved into place at once: a poll between the file's creation and its table
        # would fail differently ("no such table"), which is news and gets a line of its own.
        ready = missing[names[0]].with_suffix(".ready")
        with sqlite3.connect(ready) as db:
            db.execute("CREATE TABLE items (seq INTEGER PRIMARY KEY AUTOINCREMENT, item_id TEXT)")
            db.execute("INSERT INTO items (item_id) VALUES ('order-1')")
        db.close()
        os.replace(ready, missing[names[0]])

        async def accepted() -> None:
            event = await wfi.delivery(names[0], "row", "order-1")
            assert event is not None and event["disposition"] == "accepted", event

        await assert_eventually(accepted, timeout=60)
    finally:
        await asyncio.to_thread(worker.terminate, 30.0)
    log = worker.log()
    assert "Completing activity as failed" not in log, log[-3000:]
    for name in names:
        lines = [line for line in log.splitlines() if f"poll of {name} " in line]
        assert len(lines) == 1, lines
        assert len(lines[0]) < 400 and "could not be read" in lines[0] and str(missing[name]) in lines[0], lines


def record(workflow: str, message: str) -> logging.LogRecord:
    """A record as the SDK's activity logger makes it for a poll that failed with ``message``."""
    error = ApplicationError(message, type=POLL_SOURCE_UNAVAILABLE, non_retryable=True)
    try:
        raise error
    except ApplicationError:
        made = logging.LogRecord("temporalio.activity", logging.WARNING, __file__, 1, "Completing activity as failed ({})",
                                 None, sys.exc_info())
    made.temporal_activity = {"activity_type": poll_activity_name("sql.row_inserted"), "workflow_id": workflow_id_for(workflow)}
    return made


def test_a_source_still_failing_after_the_reminder_period_is_logged_again_with_its_count() -> None:
    now = [0.0]
    polls = PollFailuresOncePerSource(clock=lambda: now[0])
    kept = [polls.filter(record("orders", "down")) for _ in range(3)]
    other = polls.filter(record("orders", "another failure"))
    now[0] = REMIND_AFTER + 60
    reminder = record("orders", "down")
    assert (kept, other, polls.filter(reminder)) == ([True, False, False], True, True)
    assert reminder.getMessage() == "poll of orders (sql.row_inserted) failed (still failing: 3 failed polls in 16 min): down"
    assert reminder.exc_info is None
