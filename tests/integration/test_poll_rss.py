"""`rss.item_published` against a real feed served over HTTP on 127.0.0.1 (no mocks)."""

from __future__ import annotations

import logging
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from temporalio.exceptions import ApplicationError

from tests.support.pollsources import (
    Entry,
    FeedServer,
    activity_env,
    assert_manifest_names_activity,
    assert_payloads_conform,
    atom_document,
    rss_document,
)
from wf_initiation.activities.poll import POLL_CONFIG_INVALID, POLL_SOURCE_UNAVAILABLE, PollRequest, PollResponse, poll_rss
from wf_initiation.activities.poll.rss import FeedEntry, fallback_id, parse_cursor, select_new

CONNECTOR = "rss.item_published"


def entry(n: int, *, guid: bool = True) -> Entry:
    """Item n of an imaginary stream, published n hours after a fixed instant."""
    return Entry(
        guid=f"urn:item:{n}" if guid else None,
        title=f"Item {n}",
        link=f"http://example.test/items/{n}",
        published=f"2024-05-{1 + n // 24:02d}T{n % 24:02d}:00:00Z",
        summary=f"summary {n}",
    )


def newest_first(*ns: int) -> list[Entry]:
    return [entry(n) for n in sorted(ns, reverse=True)]


async def poll(server: FeedServer, cursor: str | None = None, *, limit: int = 500, **connection) -> PollResponse:
    req = PollRequest(connector=CONNECTOR, config={"feed": server.url}, connection=connection, cursor=cursor, limit=limit)
    return await activity_env().run(poll_rss, req)


def ids(response: PollResponse) -> list[str]:
    return [item.payload["id"] for item in response.items]


async def poll_error(server: FeedServer, cursor: str | None = None, **connection) -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        await poll(server, cursor, **connection)
    return caught.value


async def test_items_of_a_newest_first_rss_feed_come_oldest_first_in_the_same_order_every_time(feed_server):
    # proves: POLL-6
    feed_server.serve(rss_document(newest_first(1, 2, 3)))
    first, again = await poll(feed_server), await poll(feed_server)
    assert ids(first) == ["urn:item:1", "urn:item:2", "urn:item:3"]
    assert ids(again) == ids(first) and first.stable_order
    assert first.items[0].payload == {
        "id": "urn:item:1",
        "title": "Item 1",
        "summary": "summary 1",
        "url": "http://example.test/items/1",
        "published": "2024-05-01T01:00:00Z",
        "feed": feed_server.url,
    }
    assert_payloads_conform(CONNECTOR, [i.payload for i in first.items])


async def test_new_items_are_emitted_and_items_that_reappear_are_not(feed_server):
    feed_server.serve(rss_document(newest_first(1, 2, 3)))
    first = await poll(feed_server)
    feed_server.serve(rss_document(newest_first(2, 3, 4, 5)))  # 1 left the window
    second = await poll(feed_server, first.cursor)
    feed_server.serve(rss_document(newest_first(1, 3, 5, 6)))  # 1 re-appears after leaving it
    third = await poll(feed_server, second.cursor)
    feed_server.serve(rss_document(newest_first(1, 3, 5, 6)))  # nothing new
    fourth = await poll(feed_server, third.cursor)
    assert ids(second) == ["urn:item:4", "urn:item:5"]
    assert ids(third) == ["urn:item:6"]
    assert ids(fourth) == [] and fourth.cursor == third.cursor and not fourth.more


async def test_resuming_from_the_cursor_after_any_item_returns_exactly_the_items_after_it(feed_server):
    feed_server.serve(rss_document(newest_first(*range(1, 9))))
    full = await poll(feed_server)
    assert full.cursor == full.items[-1].cursor_after
    for k, item in enumerate(full.items):
        resumed = await poll(feed_server, item.cursor_after)
        assert ids(resumed) == ids(full)[k + 1 :]


async def test_an_item_without_guid_gets_a_digest_id_that_is_stable_across_fetches(feed_server):
    anonymous = entry(7, guid=False)
    feed_server.serve(rss_document([anonymous, entry(6)]))
    first = await poll(feed_server)
    expected = fallback_id(anonymous.link, anonymous.title, anonymous.published)
    assert ids(first) == ["urn:item:6", expected] and expected.startswith("sha256:")
    feed_server.serve(rss_document([entry(8), anonymous, entry(6)]))
    assert ids(await poll(feed_server, first.cursor)) == ["urn:item:8"]
    assert ids(await poll(feed_server)) == ["urn:item:6", expected, "urn:item:8"]


async def test_atom_entries_use_their_id_and_come_oldest_first(feed_server):
    # proves: POLL-6
    atom = "application/atom+xml"
    feed_server.serve(atom_document(newest_first(3, 4) + [entry(2, guid=False)]), content_type=atom)
    first = await poll(feed_server)
    assert ids(first)[1:] == ["urn:item:3", "urn:item:4"] and ids(first)[0].startswith("sha256:")
    assert first.items[1].payload["url"] == "http://example.test/items/3"
    assert first.items[1].payload["published"] == "2024-05-01T03:00:00Z"
    feed_server.serve(atom_document(newest_first(3, 4, 5)), content_type=atom)
    assert ids(await poll(feed_server, first.cursor)) == ["urn:item:5"]
    assert_payloads_conform(CONNECTOR, [i.payload for i in first.items])


async def test_limit_pages_through_new_items_and_says_there_is_more(feed_server):
    feed_server.serve(rss_document(newest_first(*range(1, 8))))
    pages, cursor = [], None
    for _ in range(4):
        page = await poll(feed_server, cursor, limit=3)
        pages.append((ids(page), page.more))
        cursor = page.cursor
    assert pages == [
        (["urn:item:1", "urn:item:2", "urn:item:3"], True),
        (["urn:item:4", "urn:item:5", "urn:item:6"], True),
        (["urn:item:7"], False),
        ([], False),
    ]


async def test_http_500_raises_source_unavailable_and_the_same_cursor_resumes_after_recovery(feed_server):
    feed_server.serve(rss_document(newest_first(1, 2)))
    first = await poll(feed_server)
    feed_server.fail(500)
    error = await poll_error(feed_server, first.cursor)
    assert error.type == POLL_SOURCE_UNAVAILABLE and error.non_retryable
    assert feed_server.url in error.message and "HTTP 500" in error.message
    feed_server.serve(rss_document(newest_first(1, 2, 3)))
    assert ids(await poll(feed_server, first.cursor)) == ["urn:item:3"]


async def test_an_unreachable_host_raises_source_unavailable(feed_server):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the poll: nothing listens there
    req = PollRequest(connector=CONNECTOR, config={"feed": f"http://127.0.0.1:{port}/feed"}, connection={"timeout": 5})
    with pytest.raises(ApplicationError) as caught:
        await activity_env().run(poll_rss, req)
    assert caught.value.type == POLL_SOURCE_UNAVAILABLE and f"127.0.0.1:{port}" in caught.value.message


async def test_a_document_that_is_not_a_feed_raises_source_unavailable(feed_server):
    feed_server.serve("<html><body>maintenance</body></html>", content_type="text/html")
    error = await poll_error(feed_server)
    assert error.type == POLL_SOURCE_UNAVAILABLE and "not an RSS, Atom, RDF or CDF feed" in error.message and "'feed'" in error.message


async def test_connection_headers_are_sent_with_the_request(feed_server):
    feed_server.serve(rss_document(newest_first(1)))
    await poll(feed_server, headers={"Authorization": "Bearer s3cret"})
    assert feed_server.received_headers()[-1]["Authorization"] == "Bearer s3cret"


@pytest.mark.parametrize("feed", ["ftp://example.test/feed", "", "not a url"])
async def test_a_feed_that_is_not_an_http_url_is_an_invalid_configuration(feed):
    req = PollRequest(connector=CONNECTOR, config={"feed": feed}, connection={})
    with pytest.raises(ApplicationError) as caught:
        await activity_env().run(poll_rss, req)
    assert caught.value.type == POLL_CONFIG_INVALID and caught.value.non_retryable


@pytest.mark.parametrize("connection", [{"timeout": "soon"}, {"timeout": 0}, {"headers": ["Authorization: x"]}])
async def test_a_connection_with_a_bad_timeout_or_headers_is_invalid(feed_server, connection):
    feed_server.serve(rss_document(newest_first(1)))
    error = await poll_error(feed_server, **connection)
    assert error.type == POLL_CONFIG_INVALID and "connection" in error.message


@pytest.mark.parametrize("cursor", ["{", "42", '{"v": 2, "seen": []}', '{"v": 1, "seen": [1]}'])
async def test_a_cursor_this_connector_did_not_write_is_an_invalid_configuration(feed_server, cursor):
    feed_server.serve(rss_document(newest_first(1)))
    error = await poll_error(feed_server, cursor)
    assert error.type == POLL_CONFIG_INVALID and "clear it" in error.message


def test_the_manifest_names_this_activity():
    assert_manifest_names_activity(CONNECTOR, poll_rss)


# --- The cursor design, on the pure selection, over arbitrary sliding windows ---------------------


def stream_entry(n: int) -> FeedEntry:
    return FeedEntry(id=f"urn:item:{n}", epoch=1_700_000_000 + 60 * n, payload={"id": f"urn:item:{n}"})


@st.composite
def window_histories(draw: st.DrawFn) -> list[tuple[int, int]]:
    """Windows [start, end] of a date-ordered feed: the newest end never goes back, the window
    may shrink or grow at its old end (items leave and re-appear), and no item is ever skipped
    over before it was shown (start <= previous end + 1)."""
    first_end = draw(st.integers(0, 6))
    windows = [(draw(st.integers(0, first_end)), first_end)]
    for _ in range(draw(st.integers(0, 8))):
        end = windows[-1][1] + draw(st.integers(0, 5))
        start = draw(st.integers(windows[0][0], min(end, windows[-1][1] + 1)))
        windows.append((start, end))
    return windows


@settings(max_examples=300, deadline=None)
@given(windows=window_histories(), limit=st.integers(1, 4), taken=st.data())
def test_over_any_sliding_windows_every_item_is_emitted_once_in_order_even_after_partial_progress(
    windows, limit, taken
):
    cursor, emitted = None, []
    for start, end in windows:
        entries = [stream_entry(n) for n in range(start, end + 1)]
        while True:  # drain this document; a crash may leave any prefix of a response disposed
            response = select_new(entries, parse_cursor(cursor), cursor, limit=limit)
            if not response.items:
                break
            k = taken.draw(st.integers(1, len(response.items)))
            emitted.extend(int(i.payload["id"].rsplit(":", 1)[1]) for i in response.items[:k])
            cursor = response.items[k - 1].cursor_after
        assert emitted == list(range(windows[0][0], end + 1))


# --- The contract module ------------------------------------------------------------------------


def test_the_public_surface_of_activities_poll_is_pinned():
    from wf_initiation import activities

    assert sorted(activities.poll.__all__) == [
        "MAX_ITEM_BYTES",
        "MAX_RESPONSE_BYTES",
        "POLL_ACTIVITIES",
        "POLL_CONFIG_INVALID",
        "POLL_SOURCE_UNAVAILABLE",
        "PollItem",
        "PollRequest",
        "PollResponse",
        "ResponseBuilder",
        "activity_name_for",
        "poll_activities",
        "poll_http_json",
        "poll_imap",
        "poll_rss",
        "poll_sheet",
        "poll_sql",
        "run_poll",
    ]
    for name in activities.poll.__all__:
        assert getattr(activities.poll, name) is not None, name
    assert activities.poll.POLL_ACTIVITIES == [activities.poll.poll_http_json, activities.poll.poll_imap, poll_rss,
                                               activities.poll.poll_sheet, activities.poll.poll_sql]
    assert activities.poll.activity_name_for("sql.row_inserted") == "wfi.poll.sql.row_inserted"


async def test_requests_and_responses_survive_the_pydantic_data_converter(feed_server):
    from temporalio.contrib.pydantic import pydantic_data_converter

    feed_server.serve(rss_document(newest_first(1, 2)))
    request = PollRequest(connector=CONNECTOR, config={"feed": feed_server.url}, connection={}, cursor=None)
    response = await poll(feed_server)
    converter = pydantic_data_converter.payload_converter
    for value in (request, response):
        (decoded,) = converter.from_payloads(converter.to_payloads([value]), [type(value)])
        assert decoded == value


# --- What a fetch says when it is slow, and what it logs (issue 31 item 4) ---------------------


async def test_the_connections_timeout_expiring_is_a_fetch_timeout_naming_that_setting(feed_server):
    feed_server.serve(rss_document(newest_first(1)), delay=4.0)  # no byte at all: httpx's read timeout fires
    error = await poll_error(feed_server, timeout=1)
    assert error.type == POLL_SOURCE_UNAVAILABLE and "the connection's 'timeout'" in error.message
    assert "poll.timeout" not in error.message and "deadline of 1.0s" in error.message
    feed_server.trickle(0.2)  # bytes keep coming: the poll's own deadline fires, capped by the same setting
    error = await poll_error(feed_server, timeout=1)
    assert "the connection's 'timeout'" in error.message and "poll.timeout" not in error.message


async def test_the_poll_timeout_expiring_names_the_deployments_poll_timeout(feed_server):
    feed_server.trickle(0.2)
    req = PollRequest(connector=CONNECTOR, config={"feed": feed_server.url}, connection={}, cursor=None)
    with pytest.raises(ApplicationError) as caught:
        await activity_env(2.0).run(poll_rss, req)  # start-to-close 2 s, the connection's timeout 30 s
    assert "poll.timeout" in caught.value.message and "'timeout'" not in caught.value.message


async def test_a_fetch_logs_one_debug_line_and_no_httpx_info_while_other_httpx_calls_still_log(feed_server, caplog):
    import httpx

    feed_server.serve(rss_document(newest_first(1, 2)))
    with caplog.at_level(logging.DEBUG):
        await poll(feed_server)
        await poll(feed_server)
    ours = [r for r in caplog.records if r.name == "wf_initiation.poll.rss"]
    assert [r.levelno for r in ours] == [logging.DEBUG, logging.DEBUG] and "fetched feed" in ours[0].getMessage()
    assert not [r for r in caplog.records if r.name.startswith("httpx") and r.levelno >= logging.INFO]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="httpx"):
        async with httpx.AsyncClient() as client:  # the worker's own httpx calls: untouched
            await client.get(feed_server.url)
    assert [r for r in caplog.records if r.name == "httpx" and r.levelno == logging.INFO]


async def test_a_failing_fetch_logs_no_line_of_its_own_besides_the_error_it_raises(feed_server, caplog):
    feed_server.fail(503)
    with caplog.at_level(logging.DEBUG):
        error = await poll_error(feed_server)
    assert "503" in error.message
    assert not [r for r in caplog.records if r.name.startswith(("httpx", "wf_initiation.poll.rss"))
                and r.levelno >= logging.INFO]
