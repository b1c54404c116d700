"""Hostile poll sources against real activations on the dev server (issue 11 items 6, 8, 9, 10, 11).

Each test sends exactly the hostile input of its item, checks that it is contained (a failed poll
recorded, a quarantined item, a refused path, a secret nowhere), and ends by proving the activation
still polls and starts its run once the source behaves.
"""

from __future__ import annotations

import asyncio
import pathlib
import sqlite3
import subprocess
import sys
from typing import Any

import pytest
from pollsources import (
    CliWorker,
    Entry,
    FeedServer,
    feed_server,  # noqa: F401 - fixture
    other_server,  # noqa: F401 - fixture
    rss_document,
)
from temporalio.worker import Worker

from tests.conftest import assert_eventually
from tests.support.activation import make_spec, unique
from wf_initiation.client import WfiClient
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import OperatorRequest

FAST_POLL = {"interval": "200ms", "backoff_initial": "200ms", "backoff_max": "1s", "limit": 50, "timeout": "3s"}


@pytest.fixture
async def wfi(dev_env, task_queue):
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin()]):
        yield WfiClient(dev_env.client, task_queue=task_queue)


def posts(*numbers: int, summary: str = "") -> list[Entry]:
    return [Entry(guid=f"post-{n}", title=f"Post {n}", link=f"http://example.test/{n}",
                  published=f"2024-05-01T10:{n:02d}:00Z", summary=summary) for n in numbers]


def rss_spec(tmp_path: pathlib.Path, name: str, task_queue: str, url: str, **settings: Any):
    return make_spec(tmp_path, f"""
        name: {name}
        on:
          rss.item_published: {{feed: "{url}"}}
          as: post
    """, task_queue=task_queue, poll=settings.pop("poll", FAST_POLL), **settings)


def make_table(path: pathlib.Path) -> pathlib.Path:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE items (seq INTEGER PRIMARY KEY AUTOINCREMENT, item_id TEXT, body TEXT)")
    return path


def insert(path: pathlib.Path, *rows: tuple[str, str]) -> None:
    with sqlite3.connect(path) as db:
        db.executemany("INSERT INTO items (item_id, body) VALUES (?, ?)", rows)


def sql_spec(tmp_path: pathlib.Path, name: str, task_queue: str, db: pathlib.Path, **settings: Any):
    return make_spec(tmp_path, f"""
        name: {name}
        on:
          sql.row_inserted: {{table: items, column: seq, id_column: item_id}}
          as: row
    """, task_queue=task_queue, connections={"db": {"connector": "sql", "sqlite": str(db)}},
        poll=settings.pop("poll", FAST_POLL), **settings)


def by_disposition(state: dict[str, Any], entry: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for record in sorted(state["events"].values(), key=lambda r: r["seq"]):
        if record["entry"] == entry:
            out.setdefault(record["disposition"], []).append(record["delivery_id"])
    return out


async def accepted(wfi: WfiClient, name: str, entry: str, expected: list[str], timeout: float = 60.0) -> dict:
    """Wait until exactly ``expected`` were accepted (so their runs were started); the state."""
    async def check() -> dict:
        state = await wfi.state(name, include_events=True)
        assert by_disposition(state, entry).get("accepted", []) == expected, by_disposition(state, entry)
        assert state["counters"].get("runs_started", 0) == len(expected)
        return state

    return await assert_eventually(check, timeout=timeout)


async def failed_polls(wfi: WfiClient, name: str, entry: str, at_least: int, text: str, timeout: float = 60.0) -> dict:
    async def check() -> dict:
        state = await wfi.state(name, include_events=True)
        poll = state["polls"][entry]
        assert poll["failures"] >= at_least and text in (poll["last_error"] or ""), poll
        return state

    return await assert_eventually(check, timeout=timeout)


# --- item 6: a trickling feed ----------------------------------------------------------------------


async def test_a_trickling_feed_starves_no_other_poll_and_its_activation_recovers(
    wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path, feed_server: FeedServer
) -> None:
    # proves: POLL-10
    feed_server.trickle(2.0)  # the feed: one byte every 2 s, never finishing
    slow = [unique("trickle") for _ in range(3)]
    for name in slow:
        await wfi.activate(rss_spec(tmp_path, name, task_queue, feed_server.url))
    db = make_table(tmp_path / "orders.db")
    sheets = tmp_path / "sheets"
    sheets.mkdir()
    (sheets / "Plan.csv").write_text("id,title\n")
    fast_sql, fast_sheet = unique("sqlfast"), unique("sheetfast")
    await wfi.activate(sql_spec(tmp_path, fast_sql, task_queue, db))
    await wfi.activate(make_spec(tmp_path, f"""
        name: {fast_sheet}
        on:
          sheet.row_added: {{sheet: Plan, id_column: id}}
          as: row
    """, task_queue=task_queue, connections={"s": {"connector": "sheet", "dir": str(sheets)}}, poll=FAST_POLL))
    for name in slow:  # each trickling poll was cut at its deadline, twice: every stuck read is gone
        await failed_polls(wfi, name, "post", 2, "deadline")
    for round_ in range(3):  # the other sources keep being polled on time, round after round
        insert(db, (f"o{round_}", "x"))
        with (sheets / "Plan.csv").open("a") as sheet:
            sheet.write(f"s{round_},row\n")
        await accepted(wfi, fast_sql, "row", [f"o{i}" for i in range(round_ + 1)], timeout=20)
        await accepted(wfi, fast_sheet, "row", [f"s{i}" for i in range(round_ + 1)], timeout=20)
    feed_server.serve(rss_document(posts(1)))
    for name in slow:
        await accepted(wfi, name, "post", ["post-1"])


async def test_sigterm_stops_a_worker_within_its_graceful_timeout_while_a_feed_trickles(
    dev_env, task_queue: str, tmp_path: pathlib.Path, feed_server: FeedServer
) -> None:
    feed_server.trickle(2.0)
    address = dev_env.client.service_client.config.target_host
    name = unique("sigterm")
    wfi = WfiClient(dev_env.client, task_queue=task_queue)
    worker = CliWorker(tmp_path, address, task_queue).start()
    try:
        # A long poll timeout: the worker, not the deadline, must end this poll.
        await wfi.activate(rss_spec(tmp_path, name, task_queue, feed_server.url, poll={**FAST_POLL, "timeout": "60s"}))

        async def trickling() -> None:
            assert feed_server.active() >= 1

        await assert_eventually(trickling, timeout=30)
        # wfi worker's graceful shutdown timeout is 0: in-flight activities are cancelled at once.
        elapsed = await asyncio.to_thread(worker.terminate, 15.0)
        assert elapsed < 15.0 and "worker stopped" in worker.log()
    finally:
        worker.kill()
    restarted = CliWorker(tmp_path, address, task_queue)
    restarted.log_path = tmp_path / "worker-restarted.log"
    restarted.start()
    try:
        feed_server.serve(rss_document(posts(1)))
        await accepted(wfi, name, "post", ["post-1"])
    finally:
        restarted.kill()
