"""Connector limits against real local sources (issue 11 items 6, 9, 10, 11): deadlines, sources that
trickle, redirects, paths that leave a sheet directory, and responses too big for one payload.

Each limit is tested at the limit and one past it. What the activation does with the same hostile
sources (still polling, still starting runs) is in test_poll_hostile.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sqlite3
import threading
import time

import pytest
from temporalio.exceptions import ApplicationError

from tests.support.pollsources import Entry, FeedServer, activity_env, rss_document
from tests.support.waits import assert_eventually
from wf_initiation.activities.poll import (
    POLL_CONFIG_INVALID,
    POLL_SOURCE_UNAVAILABLE,
    PollRequest,
    PollResponse,
    poll_rss,
    poll_sheet,
    poll_sql,
)
from wf_initiation.activities.poll._budget import MAX_ITEM_BYTES, MAX_RESPONSE_BYTES, ResponseBuilder, item_size
from wf_initiation.activities.poll._runtime import LIMITS, POLLS_PER_SOURCE
from wf_initiation.activities.poll.rss._http import MAX_FEED_BYTES, MAX_REDIRECTS, origin
from wf_initiation.activities.poll.sheet.activity import MAX_SHEET_BYTES

RSS, SQL, SHEET = "rss.item_published", "sql.row_inserted", "sheet.row_added"


async def run(activity_fn, connector: str, config: dict, connection: dict | None = None, cursor: str | None = None,
              *, start_to_close: float = 30.0, limit: int = 500) -> PollResponse:
    req = PollRequest(connector=connector, config=config, connection=connection or {}, cursor=cursor, limit=limit)
    return await activity_env(start_to_close).run(activity_fn, req)


async def failure(activity_fn, connector: str, config: dict, connection: dict | None = None, **kw) -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        await run(activity_fn, connector, config, connection, **kw)
    assert caught.value.non_retryable and caught.value.__cause__ is None
    return caught.value


def posts(n: int, *, summary: str = "") -> list[Entry]:
    return [Entry(guid=f"post-{i}", title=f"Post {i}", link=f"http://example.test/{i}",
                  published=f"2024-05-01T10:{i:02d}:00Z", summary=summary) for i in range(1, n + 1)]


# --- item 6: a poll has a total deadline, enforced inside the connector ---------------------------


async def test_a_trickling_feed_fails_at_the_poll_deadline_and_leaves_no_thread_behind(feed_server: FeedServer):
    feed_server.trickle(0.2)  # bytes keep coming, so no per-read timeout ever fires
    started = time.monotonic()
    error = await failure(poll_rss, RSS, {"feed": feed_server.url}, start_to_close=3.0)
    elapsed = time.monotonic() - started
    # The deadline is start-to-close less a margin (10%): 2.7 s, well before Temporal's own timeout.
    assert error.type == POLL_SOURCE_UNAVAILABLE and "deadline of 2.7s" in error.message
    assert 2.5 < elapsed < 3.0, elapsed

    async def connection_closed() -> None:  # the client hung up: the server's next byte hit a closed socket
        assert feed_server.active() == 0

    await assert_eventually(connection_closed, timeout=5)
    assert not [t for t in threading.enumerate() if t.name.startswith("wfi-poll")]  # the fetch is async


async def test_a_feed_answering_just_within_the_deadline_is_read_and_one_just_past_it_is_not(feed_server: FeedServer):
    feed_server.serve(rss_document(posts(1)), delay=1.5)
    assert [i.payload["id"] for i in (await run(poll_rss, RSS, {"feed": feed_server.url}, start_to_close=3.0)).items] == ["post-1"]
    feed_server.serve(rss_document(posts(1)), delay=3.5)
    error = await failure(poll_rss, RSS, {"feed": feed_server.url}, start_to_close=3.0)
    assert "deadline" in error.message


async def test_the_connection_timeout_caps_the_deadline(feed_server: FeedServer):
    feed_server.trickle(0.2)
    started = time.monotonic()
    error = await failure(poll_rss, RSS, {"feed": feed_server.url}, {"timeout": 1})
    assert "deadline of 1.0s" in error.message and time.monotonic() - started < 2.5


async def test_more_than_the_allowed_polls_of_one_source_at_once_are_refused_at_once(feed_server: FeedServer):
    feed_server.trickle(0.2)
    config = {"feed": feed_server.url}
    held = [asyncio.create_task(run(poll_rss, RSS, config, start_to_close=10.0)) for _ in range(POLLS_PER_SOURCE)]

    async def all_in_flight() -> None:
        assert feed_server.active() == POLLS_PER_SOURCE

    await assert_eventually(all_in_flight, timeout=20)
    started = time.monotonic()
    error = await failure(poll_rss, RSS, config, start_to_close=10.0)  # one past the limit
    assert error.type == POLL_SOURCE_UNAVAILABLE and f"at most {POLLS_PER_SOURCE}" in error.message
    assert time.monotonic() - started < 1.0  # refused at once: its activity slot is free again
    for task in held:
        task.cancel()
    await asyncio.gather(*held, return_exceptions=True)
    assert LIMITS.busy(origin(feed_server.url)) == (0, 0)  # cancelled polls gave their slots back


async def test_a_stuck_blocking_read_holds_only_its_own_sources_threads(tmp_path: pathlib.Path):
    """A FIFO behind a sheet name would block a reader forever: it is refused, never waited on."""
    fifo = tmp_path / "Stuck.csv"
    os.mkfifo(fifo)
    error = await failure(poll_sheet, SHEET, {"sheet": "Stuck"}, {"dir": str(tmp_path)}, start_to_close=3.0)
    assert error.type == POLL_CONFIG_INVALID and "not a regular file" in error.message


async def test_blocking_work_of_one_source_waits_for_its_threads_and_others_do_not():
    release = threading.Event()
    slow = [asyncio.create_task(LIMITS.run_blocking("stuck-source", lambda: release.wait(30))) for _ in range(3)]

    async def two_threads_busy() -> None:
        assert LIMITS.busy("stuck-source")[1] == 2  # the third waits for one of the source's two threads

    await assert_eventually(two_threads_busy, timeout=5)
    assert await asyncio.wait_for(LIMITS.run_blocking("other-source", lambda: "free"), timeout=5) == "free"
    release.set()
    assert await asyncio.wait_for(asyncio.gather(*slow), timeout=10) == [True, True, True]


# --- item 9: redirects --------------------------------------------------------------------------


async def test_a_cross_origin_redirect_is_followed_without_the_connections_credentials(
    feed_server: FeedServer, other_server: FeedServer
):
    other_server.serve(rss_document(posts(2)))
    feed_server.redirect(other_server.url)
    connection = {"headers": {"Authorization": "Bearer s3cret-token", "Accept": "application/rss+xml"}}
    response = await run(poll_rss, RSS, {"feed": feed_server.url}, connection)
    assert [i.payload["id"] for i in response.items] == ["post-1", "post-2"]
    assert feed_server.received_headers()[-1]["Authorization"] == "Bearer s3cret-token"
    assert "Authorization" not in other_server.received_headers()[-1]
    assert other_server.received_headers()[-1].get("Accept") != "application/rss+xml"  # no connection header at all


async def test_a_same_origin_redirect_keeps_the_credentials(feed_server: FeedServer):
    feed_server.serve(rss_document(posts(1)))
    feed_server.redirect(feed_server.origin + "/moved.xml")
    response = await run(poll_rss, RSS, {"feed": feed_server.url}, {"headers": {"Authorization": "Bearer same-origin"}})
    assert [i.payload["id"] for i in response.items] == ["post-1"]
    assert [h.get("Authorization") for h in feed_server.received_headers()] == ["Bearer same-origin"] * 2


@pytest.mark.parametrize("target", ["file:///etc/passwd", "ftp://127.0.0.1/feed.xml", "data:text/xml,<rss/>",
                                    "gopher://127.0.0.1/"])
async def test_a_redirect_to_a_non_http_url_is_refused(feed_server: FeedServer, target: str):
    feed_server.redirect(target)
    error = await failure(poll_rss, RSS, {"feed": feed_server.url})
    assert error.type == POLL_CONFIG_INVALID and "only http:// and https://" in error.message


@pytest.mark.parametrize("feed", ["file:///etc/passwd", "ftp://example.test/feed", "data:,x", "http:///nohost"])
async def test_a_feed_url_that_is_not_http_is_refused_before_any_request(feed: str):
    error = await failure(poll_rss, RSS, {"feed": feed})
    assert error.type == POLL_CONFIG_INVALID


async def test_at_most_five_redirects_are_followed(feed_server: FeedServer):
    chain = [FeedServer().start() for _ in range(MAX_REDIRECTS + 1)]
    try:
        for here, there in zip(chain, chain[1:]):
            here.redirect(there.url)
        chain[-1].serve(rss_document(posts(1)))
        ok = await run(poll_rss, RSS, {"feed": chain[0].url})  # exactly MAX_REDIRECTS hops
        assert [i.payload["id"] for i in ok.items] == ["post-1"]
        feed_server.redirect(chain[0].url)  # one more hop: past the limit
        error = await failure(poll_rss, RSS, {"feed": feed_server.url})
        assert error.type == POLL_SOURCE_UNAVAILABLE and f"more than {MAX_REDIRECTS} times" in error.message
    finally:
        for server in chain:
            server.stop()


async def test_a_feed_body_at_the_byte_limit_is_read_and_one_byte_more_is_refused(feed_server: FeedServer):
    document = rss_document(posts(1)).encode()
    padded = document.replace(b"<channel>", b"<channel>" + b" " * (MAX_FEED_BYTES - len(document)), 1)
    assert len(padded) == MAX_FEED_BYTES
    feed_server.serve(padded)
    assert len((await run(poll_rss, RSS, {"feed": feed_server.url})).items) == 1
    feed_server.serve(padded + b" ")
    error = await failure(poll_rss, RSS, {"feed": feed_server.url})
    assert error.type == POLL_SOURCE_UNAVAILABLE and f"larger than {MAX_FEED_BYTES:,} bytes" in error.message


# --- item 10: a sheet never leaves its connection's directory ----------------------------------


@pytest.fixture
def sheets(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "sheets"
    root.mkdir()
    (root / "Calendar.csv").write_text("id,title\n1,ok\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "private.csv").write_text("secret,value\nPRIVATE-ROW,1\n")
    return root


@pytest.mark.parametrize("sheet", ["../outside/private", "/etc/passwd", "..", ".", "a/../../outside/private",
                                   "..\\outside\\private", "nul\x00byte"])
async def test_a_sheet_name_that_is_a_path_is_refused_at_poll_time(sheets: pathlib.Path, sheet: str):
    error = await failure(poll_sheet, SHEET, {"sheet": sheet}, {"dir": str(sheets)})
    assert error.type == POLL_CONFIG_INVALID and "not a plain name" in error.message
    assert "PRIVATE-ROW" not in error.message


async def test_a_symlink_pointing_out_of_the_directory_is_refused(sheets: pathlib.Path):
    (sheets / "Leak.csv").symlink_to(sheets.parent / "outside" / "private.csv")
    error = await failure(poll_sheet, SHEET, {"sheet": "Leak"}, {"dir": str(sheets)})
    assert error.type == POLL_CONFIG_INVALID and "outside the connection's directory" in error.message
    (sheets / "Inner.csv").symlink_to(sheets / "Calendar.csv")  # a link that stays inside is fine
    response = await run(poll_sheet, SHEET, {"sheet": "Inner"}, {"dir": str(sheets)})
    assert [i.payload["title"] for i in response.items] == ["ok"]


async def test_a_sheet_name_that_is_a_path_is_invalid_at_validation():
    from wf_initiation.core import load_workfile

    for sheet in ("../../outside/private", "/etc/passwd", ".."):
        result = load_workfile(f"name: w\non:\n  sheet.row_added: {{sheet: {json.dumps(sheet)}}}\n")
        assert result.status == "invalid", sheet
    assert load_workfile("name: w\non:\n  sheet.row_added: {sheet: Content Calendar}\n").status == "valid"


async def test_a_sheet_file_at_the_byte_limit_is_read_and_one_byte_more_is_refused(tmp_path: pathlib.Path):
    head = "id,title\n1,first\n"
    path = tmp_path / "Big.csv"
    filler = ("#" * 1023 + "\n") * ((MAX_SHEET_BYTES - len(head)) // 1024)
    path.write_text(head + filler + "#" * (MAX_SHEET_BYTES - len(head) - len(filler) - 1) + "\n")
    assert path.stat().st_size == MAX_SHEET_BYTES
    response = await run(poll_sheet, SHEET, {"sheet": "Big"}, {"dir": str(tmp_path)}, limit=1)
    assert response.items[0].payload["title"] == "first"
    with path.open("a") as file:
        file.write("\n")
    error = await failure(poll_sheet, SHEET, {"sheet": "Big"}, {"dir": str(tmp_path)})
    assert error.type == POLL_SOURCE_UNAVAILABLE and f"larger than {MAX_SHEET_BYTES:,} bytes" in error.message


# --- item 11: responses are cut by bytes; an item too big is a stand-in, never a wedged cursor ------


def test_an_item_at_the_item_limit_is_returned_whole_and_one_byte_more_is_a_stand_in():
    def payload_of_size(size: int) -> dict:
        base = {"row_id": "r1", "pad": ""}
        base["pad"] = "x" * (size - item_size(base, "1"))
        assert item_size(base, "1") == size
        return base

    at, past = ResponseBuilder(None, limit=10), ResponseBuilder(None, limit=10)
    assert at.add(payload_of_size(MAX_ITEM_BYTES), "1", id_field="row_id")
    assert past.add(payload_of_size(MAX_ITEM_BYTES + 1), "1", id_field="row_id")
    assert at.items[0].problem is None and len(at.items[0].payload["pad"]) > 0
    (stand_in,) = past.items
    assert stand_in.payload == {"row_id": "r1"} and stand_in.cursor_after == "1"
    assert f"{MAX_ITEM_BYTES + 1:,} bytes" in stand_in.problem and f"at most {MAX_ITEM_BYTES:,}" in stand_in.problem


def test_a_response_stops_at_its_byte_budget_and_always_holds_at_least_one_item():
    size = item_size({"id": "i0", "pad": "x" * 200}, "c1")
    builder = ResponseBuilder("c0", limit=100, max_bytes=4 * size)
    added = [builder.add({"id": f"i{n}", "pad": "x" * 200}, f"c{n + 1}", id_field="id") for n in range(10)]
    assert added[:4] == [True] * 4 and not added[4]  # the fifth would pass the budget by one item
    response = builder.response(more=True)
    assert response.more and response.cursor == "c4" and builder.bytes == 4 * size
    tiny = ResponseBuilder(None, limit=5, max_bytes=10)
    assert tiny.add({"id": "big", "pad": "x" * 500}, "c", id_field="id")  # progress even over budget


@pytest.fixture
def wide_table(tmp_path: pathlib.Path) -> pathlib.Path:
    """600 rows of 12 KB each (7 MB): the reproduction of issue 11 item 11."""
    path = tmp_path / "wide.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE items (seq INTEGER PRIMARY KEY, body TEXT)")
        db.executemany("INSERT INTO items (seq, body) VALUES (?, ?)", [(n, "b" * 12_000) for n in range(1, 601)])
    return path


async def test_six_hundred_rows_of_twelve_kilobytes_come_in_responses_under_the_budget(wide_table: pathlib.Path):
    config, connection = {"table": "items", "column": "seq"}, {"sqlite": str(wide_table)}
    seen, cursor, pages = [], None, 0
    while True:
        response = await run(poll_sql, SQL, config, connection, cursor)
        size = sum(item_size(i.payload, i.cursor_after) for i in response.items)
        assert size <= MAX_RESPONSE_BYTES and len(response.model_dump_json()) < 2 * 1024 * 1024
        seen += [i.payload["row_id"] for i in response.items]
        cursor, pages = response.cursor, pages + 1
        if not response.more:
            break
    assert seen == [str(n) for n in range(1, 601)] and pages >= 7


async def test_a_row_over_the_item_limit_is_a_stand_in_and_the_rows_after_it_still_come(tmp_path: pathlib.Path):
    path = tmp_path / "big.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE items (seq INTEGER PRIMARY KEY, body TEXT)")
        db.executemany("INSERT INTO items VALUES (?, ?)", [(1, "small"), (2, "B" * (MAX_ITEM_BYTES + 10)), (3, "after")])
    response = await run(poll_sql, SQL, {"table": "items", "column": "seq"}, {"sqlite": str(path)})
    assert [(i.payload["row_id"], i.problem is None) for i in response.items] == [("1", True), ("2", False), ("3", True)]
    assert response.items[1].payload == {"row_id": "2"} and response.cursor == "3"


async def test_a_feed_of_six_items_of_500_kilobytes_returns_six_stand_ins_and_moves_on(feed_server: FeedServer):
    feed_server.serve(rss_document(posts(6, summary="s" * 500_000)))
    response = await run(poll_rss, RSS, {"feed": feed_server.url})
    assert [i.payload for i in response.items] == [{"id": f"post-{n}"} for n in range(1, 7)]
    assert all(i.problem and "cannot start a run" in i.problem for i in response.items)
    assert len(response.model_dump_json()) < MAX_RESPONSE_BYTES and not response.more
    feed_server.serve(rss_document(posts(7, summary="s" * 500_000)[:6] + posts(7)[6:]))
    after = await run(poll_rss, RSS, {"feed": feed_server.url}, cursor=response.cursor)
    assert [(i.payload["id"], i.problem) for i in after.items] == [("post-7", None)]


def test_only_the_newest_items_of_a_very_long_feed_count():
    from wf_initiation.activities.poll.rss._feed import MAX_FEED_ENTRIES, parse_feed

    at = parse_feed(rss_document(posts_many(MAX_FEED_ENTRIES)).encode(), "http://x.test/feed")
    past = parse_feed(rss_document(posts_many(MAX_FEED_ENTRIES + 1)).encode(), "http://x.test/feed")
    assert len(at) == len(past) == MAX_FEED_ENTRIES
    assert at[0].id == "p-0" and past[0].id == "p-1" and past[-1].id == f"p-{MAX_FEED_ENTRIES}"


def posts_many(n: int) -> list[Entry]:
    """n items an hour apart, newest first (as most feeds list them)."""
    from datetime import datetime, timedelta

    start = datetime(2010, 1, 1)
    return [Entry(guid=f"p-{i}", title="t", link=f"http://e.test/{i}",
                  published=(start + timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%SZ")) for i in range(n)][::-1]


def test_the_item_limit_is_the_delivery_limit():
    from wf_initiation.wire import MAX_DELIVERY_BYTES

    assert MAX_ITEM_BYTES == MAX_DELIVERY_BYTES


def test_a_secret_file_at_the_limit_is_read_and_one_byte_more_or_a_fifo_is_refused(tmp_path: pathlib.Path):
    from wf_initiation.activities.poll._runtime import read_secret_file
    from wf_initiation.core.connections import MAX_SECRET_FILE_BYTES

    secret = tmp_path / "secret"
    secret.write_text("s" * MAX_SECRET_FILE_BYTES)
    assert len(read_secret_file(str(secret))) == MAX_SECRET_FILE_BYTES
    secret.write_text("s" * (MAX_SECRET_FILE_BYTES + 1))
    with pytest.raises(ValueError, match="larger than 64 KiB"):
        read_secret_file(str(secret))
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ValueError, match="not a regular file"):
        read_secret_file(str(tmp_path / "fifo"))


async def test_a_feed_url_with_credentials_in_it_is_refused_at_validation_and_poll_time():
    from wf_initiation.core import load_workfile

    url = "https://reader:hunter2@blog.test/feed.xml"
    assert load_workfile(f'name: w\non:\n  rss.item_published: {{feed: "{url}"}}\n').status == "invalid"
    error = await failure(poll_rss, RSS, {"feed": url})
    assert error.type == POLL_CONFIG_INVALID and "carries credentials" in error.message and "hunter2" not in error.message
