"""No feed item is dropped silently (issue 31 item 3), pure: feed parsing, the RSS cursor, the engine.

Items without guid, link or title get ids derived from what they carry; an id reused within one
document is returned again (its own cursor entry), and the engine disposes the second item as any
redelivery: ``duplicate`` for an equal payload, a recorded ``conflict`` for another.
"""

from __future__ import annotations

import json
import pathlib

import pytest
from temporalio.exceptions import ApplicationError

from tests.support.engine import drive
from tests.support.polled import T0, row, spec_for
from wf_initiation.activities.poll import POLL_SOURCE_UNAVAILABLE
from wf_initiation.activities.poll.rss import RssCursor, parse_cursor, parse_feed, select_new
from wf_initiation.core.engine import Disposition, Engine, PollItemIn, PollResultIn, StartRun, initial_state

URL = "http://feeds.example.test/blog/feed.xml"


def rss(items: str, version: str = "2.0") -> bytes:
    return (f'<?xml version="1.0"?><rss version="{version}"><channel><title>t</title>'
            f"<link>http://example.test/</link><description>d</description>{items}</channel></rss>").encode()


def described(*texts: str) -> bytes:
    return rss("".join(f"<item><description>{t}</description></item>" for t in texts), version="0.92")


def test_description_only_items_get_distinct_ids_derived_from_their_content():
    # proves: EXT-4
    entries = parse_feed(described("first", "second", "third"), URL)
    ids = [e.id for e in entries]
    assert len(set(ids)) == 3 and all(i.startswith("sha256:content:") for i in ids)
    assert [e.id for e in parse_feed(described("first", "second", "third"), URL)] == ids, "stable across fetches"
    response = select_new(entries, RssCursor(), None, limit=10)
    assert [i.payload["summary"] for i in response.items] == ["first", "second", "third"]


def test_an_item_with_a_link_or_title_keeps_its_earlier_fallback_id():
    (entry,) = parse_feed(rss("<item><title>Only a title</title><description>x</description></item>"), URL)
    assert entry.id.startswith("sha256:") and not entry.id.startswith("sha256:content:")


def test_identical_description_only_items_share_an_id_and_both_are_returned():
    entries = parse_feed(described("same", "same"), URL)
    assert entries[0].id == entries[1].id and entries[0].digest != entries[1].digest
    assert len(select_new(entries, RssCursor(), None, limit=10).items) == 2


def test_an_id_reused_within_one_document_is_returned_once_for_each_item_and_then_never_again():
    twice = rss("<item><guid>urn:a</guid><title>A</title></item><item><guid>urn:a</guid><title>A, edited</title></item>"
                "<item><guid>urn:b</guid><title>B</title></item>")
    entries = parse_feed(twice, URL)
    first = select_new(entries, RssCursor(), None, limit=10)
    assert [(i.payload["id"], i.payload["title"]) for i in first.items] == [
        ("urn:a", "A"), ("urn:a", "A, edited"), ("urn:b", "B")]
    for k, item in enumerate(first.items):  # resuming after any item returns exactly the ones after it
        after = select_new(entries, parse_cursor(item.cursor_after), item.cursor_after, limit=10)
        assert [i.payload["title"] for i in after.items] == [i.payload["title"] for i in first.items[k + 1:]]
    cut = select_new(entries, RssCursor(), None, limit=1)
    rest = select_new(entries, parse_cursor(cut.cursor), cut.cursor, limit=10)
    assert [i.payload["title"] for i in rest.items] == ["A, edited", "B"], "a page boundary between them loses none"


def poll_response(*payloads: dict) -> PollResultIn:
    items = [PollItemIn(payload=p, cursor_after=json.dumps(n + 1)) for n, p in enumerate(payloads)]
    return PollResultIn(items=items, cursor=items[-1].cursor_after)


def test_two_items_of_one_response_with_one_id_are_a_duplicate_or_a_recorded_conflict(tmp_path: pathlib.Path):
    # proves: EXT-3, EXT-4, POLL-11
    spec = spec_for(tmp_path)
    engine = drive(Engine(spec, initial_state(spec, T0)))
    (call,) = engine.polls_due(T0)
    a, a_edited, b = row(1, "a"), {**row(2, "a"), "table": "items"}, row(3, "b")
    a_edited["row"] = {**a_edited["row"], "kind": "edited"}
    engine.poll_succeeded(call.entry, call.seq, call.version, poll_response(a, dict(a), a_edited, b), T0)
    starts = [c for c in engine.take_commands() if isinstance(c, StartRun)]
    assert [s.input.bindings["row"]["row_id"] for s in starts] == ["a", "b"]
    counters = engine.state.counters
    assert counters.get("duplicates") == 1 and counters.get("conflicts") == 1
    (conflict,) = [e for e in engine.state.errors if e.kind == "conflict"]
    assert conflict.delivery_id == "a" and "first payload stands" in conflict.message
    assert engine.state.polls["row"].cursor == "4", "the cursor moved past every disposed item"
    assert {r.disposition for r in engine.state.events.values()} == {Disposition.ACCEPTED}


def test_feed_bytes_are_never_opened_as_a_file_name(tmp_path: pathlib.Path):
    secret = tmp_path / "feed.xml"
    secret.write_bytes(described("from a local file"))
    with pytest.raises(ApplicationError) as caught:
        parse_feed(str(secret).encode(), URL)
    assert caught.value.type == POLL_SOURCE_UNAVAILABLE and "from a local file" not in caught.value.message


@pytest.mark.parametrize("document", [
    b"<CHANNEL><TITLE>x</TITLE></CHANNEL>",
    b'<?xml version="1.0"?>\n<!-- a comment -->\n<!DOCTYPE rss>\n<rss version="2.0"><channel></channel></rss>',
    b'<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"></rdf:RDF>',
    b'<feed xmlns="http://www.w3.org/2005/Atom"><title>t</title></feed>',
])
def test_a_feed_document_without_items_is_an_empty_list(document: bytes):
    assert parse_feed(document, URL) == []


@pytest.mark.parametrize("document", [b"", b"   ", b"<html><body>maintenance</body></html>", b"<orders/>", b"not xml"])
def test_a_document_that_is_no_feed_fails_naming_the_feed_setting(document: bytes):
    with pytest.raises(ApplicationError) as caught:
        parse_feed(document, URL)
    assert caught.value.type == POLL_SOURCE_UNAVAILABLE and "the trigger's 'feed' URL" in caught.value.message


def test_the_http_charset_and_the_feed_url_decide_as_feedparser_over_http_does():
    body = rss("<item><title>Привет</title><link>/posts/1.html</link>"
               "<description>&lt;a href='../a.html'&gt;x&lt;/a&gt;</description></item>").decode().encode("cp1251")
    (entry,) = parse_feed(body, URL, {"Content-Type": "application/rss+xml; charset=windows-1251"})
    assert entry.payload["title"] == "Привет"
    assert entry.payload["url"] == "http://feeds.example.test/posts/1.html"
    assert entry.payload["summary"] == '<a href="http://feeds.example.test/a.html">x</a>'
    (moved,) = parse_feed(body, URL, {"Content-Type": "text/xml; charset=windows-1251", "Content-Location": "/x/"})
    assert moved.payload["url"] == "http://feeds.example.test/posts/1.html" and moved.payload["title"] == "Привет"


def test_an_edited_copy_added_beside_its_original_is_emitted_for_the_activation_to_find_a_conflict():
    def item(title: str, day: int) -> str:
        return f"<item><guid>urn:p</guid><title>{title}</title><pubDate>{day:02d} May 2024 10:00:00 GMT</pubDate></item>"

    older = "<item><guid>urn:o</guid><title>O</title><pubDate>01 May 2024 10:00:00 GMT</pubDate></item>"
    first = select_new(parse_feed(rss(item("Post", 2) + older), URL), RssCursor(), None, limit=10)
    assert [i.payload["title"] for i in first.items] == ["O", "Post"]
    newest_first = parse_feed(rss(item("Post, edited", 3) + item("Post", 2) + older), URL)
    again = select_new(newest_first, parse_cursor(first.cursor), first.cursor, limit=10)
    assert [(i.payload["id"], i.payload["title"]) for i in again.items] == [("urn:p", "Post, edited")]
