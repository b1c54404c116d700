"""Polling initiation end to end: a real activation on the dev server polls real sources.

Sources are real: a SQLite file the test writes to, a CSV sheet on disk, and an HTTP feed served on
a local socket whose responses the test can hold back (a poll "in flight"). Runs are ``wfi.EchoRun``.
"""

from __future__ import annotations

import asyncio
import pathlib
import sqlite3
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support.activation import make_spec, unique
from tests.support.pollsources import Entry, activity_env, rss_document
from tests.support.waits import assert_eventually
from wf_initiation.activities.poll import PollRequest, poll_rss
from wf_initiation.client import WfiClient
from wf_initiation.wire import OperatorRequest

FAST_POLL = {"interval": "200ms", "backoff_initial": "200ms", "backoff_max": "1s", "limit": 50}


# --- sources ---------------------------------------------------------------------------------


class Table:
    """A SQLite table ``items`` with an autoincrement ``seq`` and an ``item_id`` identity."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE items (seq INTEGER PRIMARY KEY AUTOINCREMENT, item_id TEXT, kind TEXT, grp TEXT)")

    def insert(self, *rows: tuple[str | None, str, str | None]) -> None:
        with sqlite3.connect(self.path) as db:
            db.executemany("INSERT INTO items (item_id, kind, grp) VALUES (?, ?, ?)", rows)


SQL_WORKFILE = """
name: {name}
on:
  sql.row_inserted: {{table: items, column: seq, id_column: item_id}}
  as: row
{extra}
"""


def sql_spec(tmp_path: pathlib.Path, name: str, task_queue: str, db: pathlib.Path, extra: str = "", **settings: Any):
    return make_spec(tmp_path, SQL_WORKFILE.format(name=name, extra=extra), task_queue=task_queue,
                     connections={"db": {"connector": "sql", "sqlite": str(db)}},
                     poll=settings.pop("poll", FAST_POLL), **settings)


class GatedFeed:
    """An HTTP feed whose responses wait while the gate is closed: a poll stays in flight."""

    def __init__(self) -> None:
        self.body = b""
        self.open = threading.Event()
        self.open.set()
        self.arrived = threading.Event()
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                gate.arrived.set()
                gate.open.wait(timeout=25)
                self.send_response(200)
                self.send_header("Content-Type", "application/rss+xml")
                self.send_header("Content-Length", str(len(gate.body)))
                self.end_headers()
                self.wfile.write(gate.body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/feed.xml"

    def stop(self) -> None:
        self.open.set()
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def gated_feed() -> Iterator[GatedFeed]:
    feed = GatedFeed()
    yield feed
    feed.stop()


def entries(n: int) -> list[Entry]:
    return [Entry(guid=f"post-{i}", title=f"Post {i}", link=f"http://example.test/{i}",
                  published=f"2024-05-01T10:{i:02d}:00Z") for i in range(1, n + 1)]


# --- helpers ---------------------------------------------------------------------------------


def ids_by_disposition(state: dict[str, Any], entry: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for record in sorted(state["events"].values(), key=lambda r: r["seq"]):
        if record["entry"] == entry:
            out.setdefault(record["disposition"], []).append(record["delivery_id"])
    return out


async def run_ids(client, activation_id: str) -> list[str]:
    query = f'WfiActivation = "{activation_id}" AND WorkflowType = "wfi.EchoRun"'
    return [w.id async for w in client.list_workflows(query)]


async def operate(wfi: WfiClient, name: str, action: str, **kw: Any):
    result = await wfi.operate(name, OperatorRequest(action=action, **kw))
    assert result.ok, result.message
    return result


# --- tests -----------------------------------------------------------------------------------


async def test_rows_of_a_table_start_one_run_each_in_source_order(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: POLL-1, POLL-5, POLL-6, POLL-8
    table = Table(tmp_path / "src.db")
    table.insert(*[(f"r{i}", "plain", "g") for i in range(7)])
    name = unique("sqlpoll")
    spec = sql_spec(tmp_path, name, task_queue, table.path, poll={**FAST_POLL, "limit": 3})
    await wfi.activate(spec)

    async def all_accepted() -> dict[str, Any]:
        state = await wfi.state(name, include_events=True)
        assert ids_by_disposition(state, "row").get("accepted") == [f"r{i}" for i in range(7)]
        return state

    state = await assert_eventually(all_accepted)
    assert state["polls"]["row"]["cursor"] == "7"
    table.insert(("r7", "plain", "g"), ("r1", "plain", "g"))  # a re-sent identity with another row: a conflict

    async def later_rows() -> None:
        state = await wfi.state(name, include_events=True)
        assert ids_by_disposition(state, "row").get("accepted", [])[-1] == "r7"
        assert state["error_counts"].get("conflict") == 1 and state["polls"]["row"]["cursor"] == "9"

    await assert_eventually(later_rows)

    async def runs() -> None:
        assert sorted(await run_ids(dev_env.client, spec.activation_id)) == sorted(
            f"{spec.activation_id}/row/r{i}" for i in range(8))

    await assert_eventually(runs)


async def test_a_cursor_set_while_a_poll_is_in_flight_is_not_overwritten(
    wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path, gated_feed: GatedFeed
) -> None:
    # proves: POLL-4, POLL-3
    gated_feed.body = rss_document(entries(5)).encode()
    first = await activity_env().run(poll_rss, PollRequest(
        connector="rss.item_published", config={"feed": gated_feed.url}, cursor=None))
    after_third = first.items[2].cursor_after
    gated_feed.open.clear()
    gated_feed.arrived.clear()
    name = unique("rssgate")
    spec = make_spec(tmp_path, f"""
        name: {name}
        on:
          rss.item_published: {{feed: "{gated_feed.url}"}}
          as: post
    """, task_queue=task_queue, poll=FAST_POLL)
    await wfi.activate(spec)
    assert await asyncio.to_thread(gated_feed.arrived.wait, 20), "the first poll never reached the feed"
    await operate(wfi, name, "set_cursor", entry="post", cursor=after_third, note="skip three posts")
    gated_feed.open.set()  # the in-flight poll now returns all five posts

    async def new_cursor_applied() -> dict[str, Any]:
        state = await wfi.state(name, include_events=True)
        assert state["counters"].get("polls_discarded") == 1
        assert ids_by_disposition(state, "post").get("accepted") == ["post-4", "post-5"]
        return state

    state = await assert_eventually(new_cursor_applied)
    assert "post-1" not in str(state["events"]), "the in-flight result was discarded, not disposed"
    (change,) = state["polls"]["post"]["cursor_changes"]
    assert (change["old"], change["new"], change["note"], change["by"]) == (None, after_third, "skip three posts", "operator")
    assert any(a["action"] == "set_cursor" for a in state["operator_log"])


async def test_an_http_500_backs_off_starts_nothing_and_recovers_every_item(
    wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: POLL-10, POLL-2
    failing = FailingFeed()
    try:
        name = unique("rss500")
        spec = make_spec(tmp_path, f"""
            name: {name}
            on:
              rss.item_published: {{feed: "{failing.url}"}}
              as: post
        """, task_queue=task_queue, poll=FAST_POLL)
        await wfi.activate(spec)

        async def failing_with_backoff() -> dict[str, Any]:
            state = await wfi.state(name, include_events=True)
            poll = state["polls"]["post"]
            assert poll["failures"] >= 4 and "500" in (poll["last_error"] or ""), poll
            return state

        state = await assert_eventually(failing_with_backoff)
        assert state["counters"].get("runs_started", 0) == 0 and state["polls"]["post"]["cursor"] is None
        assert failing.gaps_grow(), f"no exponential backoff between requests: {failing.times}"
        failing.body = rss_document(entries(4)).encode()

        async def recovered() -> None:
            state = await wfi.state(name, include_events=True)
            assert ids_by_disposition(state, "post").get("accepted") == [f"post-{i}" for i in range(1, 5)]
            assert state["polls"]["post"]["failures"] == 0

        await assert_eventually(recovered)
    finally:
        failing.stop()


class FailingFeed:
    """Answers 500 while ``body`` is empty, then the body; records when each request came."""

    def __init__(self) -> None:
        import time

        self.body = b""
        self.times: list[float] = []
        feed = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                feed.times.append(time.monotonic())
                body = feed.body
                self.send_response(200 if body else 500)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Content-Type", "application/rss+xml")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/feed.xml"

    def gaps_grow(self) -> bool:
        """Backoff 200ms, 400ms, 800ms, 1s (FAST_POLL): each gap between two requests is at least the
        backoff after the failures before it. Lower bounds only: a loaded machine adds to every gap
        (a poll's activity and task dispatch), never takes away, so only a missing or shorter backoff
        fails this (a fixed 200ms one fails by the third gap)."""
        gaps = [b - a for a, b in zip(self.times, self.times[1:])]
        backoffs = [min(0.2 * 2**k, 1.0) for k in range(len(gaps))]
        return len(gaps) >= 3 and all(gap >= backoff * 0.98 for gap, backoff in zip(gaps, backoffs))

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


async def test_an_unreachable_database_backs_off_starts_nothing_and_recovers_every_row(
    wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: POLL-10, POLL-2
    table = Table(tmp_path / "src.db")
    table.insert(("a", "plain", "g"), ("b", "plain", "g"))
    name = unique("sqldown")
    spec = sql_spec(tmp_path, name, task_queue, table.path)
    await wfi.activate(spec)

    async def first_rows() -> None:
        assert ids_by_disposition(await wfi.state(name, include_events=True), "row").get("accepted") == ["a", "b"]

    await assert_eventually(first_rows)
    hidden = tmp_path / "elsewhere.db"
    table.path.rename(hidden)
    table.path = hidden
    table.insert(("c", "plain", "g"), ("d", "plain", "g"))  # rows written while the database is unreachable

    async def failing() -> dict[str, Any]:
        state = await wfi.state(name, include_events=True)
        poll = state["polls"]["row"]
        assert poll["failures"] >= 2 and "could not be read" in (poll["last_error"] or ""), poll
        return state

    state = await assert_eventually(failing)
    assert state["polls"]["row"]["cursor"] == "2" and state["counters"]["runs_started"] == 2
    hidden.rename(tmp_path / "src.db")

    async def recovered() -> None:
        state = await wfi.state(name, include_events=True)
        assert ids_by_disposition(state, "row").get("accepted") == ["a", "b", "c", "d"]
        assert state["polls"]["row"]["failures"] == 0 and state["polls"]["row"]["cursor"] == "4"

    await assert_eventually(recovered)


@pytest.mark.parametrize("policy", ["quarantine", "hold"])
async def test_invalid_rows_are_held_or_quarantined_as_configured(
    wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path, policy: str
) -> None:
    # proves: POLL-11
    table = Table(tmp_path / "src.db")
    table.insert(("a", "plain", "g"), (None, "plain", "g"), ("c", "plain", "g"))
    name = unique(f"inv-{policy}")
    await wfi.activate(sql_spec(tmp_path, name, task_queue, table.path, invalid_items=policy))
    if policy == "quarantine":
        async def quarantined() -> None:
            state = await wfi.state(name, include_events=True)
            seen = ids_by_disposition(state, "row")
            assert seen.get("accepted") == ["a", "c"] and len(seen.get("quarantined", [])) == 1, seen
            assert state["polls"]["row"]["cursor"] == "3" and state["summary"]["status"] == "active"

        await assert_eventually(quarantined)
        assert (await wfi.state(name, include_events=True))["error_counts"].get("quarantined") == 1
    else:
        async def held() -> None:
            state = await wfi.state(name, include_events=True)
            assert ids_by_disposition(state, "row").get("accepted") == ["a"]
            poll = state["polls"]["row"]
            assert poll["cursor"] == "1" and poll["held"] is not None and state["summary"]["status"] == "needs_operator"

        await assert_eventually(held)
        await operate(wfi, name, "release_held", entry="row", choice="quarantine", note="empty id")

        async def released() -> None:
            state = await wfi.state(name, include_events=True)
            seen = ids_by_disposition(state, "row")
            assert seen.get("accepted") == ["a", "c"] and len(seen.get("quarantined", [])) == 1, seen
            assert state["polls"]["row"]["held"] is None and state["polls"]["row"]["cursor"] == "3"

        await assert_eventually(released)


async def test_suppressed_and_key_faulted_rows_are_retained_and_let_the_cursor_advance(
    wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: POLL-12, BATCH-7
    table = Table(tmp_path / "src.db")
    table.insert(("a", "plain", "g1"), ("b", "skip", "g1"), ("c", "plain", None), ("d", "plain", "g2"))
    name = unique("guards")
    extra = "  when: \"{{ row.row.kind != 'skip' }}\"\n  queue_by: \"{{ row.row.grp }}\""
    await wfi.activate(sql_spec(tmp_path, name, task_queue, table.path, extra=extra, invalid_items="hold"))

    async def advanced() -> None:
        state = await wfi.state(name, include_events=True)
        seen = ids_by_disposition(state, "row")
        assert seen.get("suppressed") == ["b"] and seen.get("key_fault") == ["c"], seen
        assert set(seen.get("accepted", [])) | set(seen.get("queued", [])) == {"a", "d"}
        assert state["polls"]["row"]["cursor"] == "4" and state["polls"]["row"]["held"] is None
        assert state["events"]["row\x1fc"]["released_at"] is not None, "the fault consumed and retains the identity"

    await assert_eventually(advanced)


async def test_overlap_skip_lets_the_cursor_advance_past_skipped_rows(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: POLL-12, EXT-13
    sheet = tmp_path / "tasks.csv"
    sheet.write_text("task,hold\nfirst,yes\nsecond,\nthird,\n")
    name = unique("skip")
    spec = make_spec(tmp_path, f"""
        name: {name}
        on:
          sheet.row_added: {{sheet: tasks, id_column: task}}
          as: task
    """, task_queue=task_queue, connections={"sheets": {"connector": "sheet", "dir": str(tmp_path)}},
        poll=FAST_POLL, overlap="skip", invalid_items="hold")
    await wfi.activate(spec)

    async def skipped() -> None:
        state = await wfi.state(name, include_events=True)
        seen = ids_by_disposition(state, "task")
        assert seen.get("accepted") == ["first"] and seen.get("skipped") == ["second", "third"], seen
        assert state["polls"]["task"]["cursor"] == "3"

    await assert_eventually(skipped)
    await dev_env.client.get_workflow_handle(f"{spec.activation_id}/task/first").signal("release")


async def test_polling_continues_across_continue_as_new(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: POLL-9, POLL-8
    table = Table(tmp_path / "src.db")
    name = unique("polls-can")
    spec = sql_spec(tmp_path, name, task_queue, table.path, max_history_events=200, poll={**FAST_POLL, "interval": "50ms"})
    await wfi.activate(spec)
    handle = dev_env.client.get_workflow_handle(f"wfi-activation:{name}")
    first_run = (await handle.describe()).run_id

    async def continued() -> None:
        assert (await handle.describe()).run_id != first_run

    await assert_eventually(continued, timeout=60)
    table.insert(*[(f"late-{i}", "plain", "g") for i in range(5)])

    async def polled_after() -> None:
        seen = ids_by_disposition(await wfi.state(name, include_events=True), "row")
        assert seen.get("accepted") == [f"late-{i}" for i in range(5)], seen

    await assert_eventually(polled_after)
