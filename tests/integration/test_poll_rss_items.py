"""No feed item is dropped silently (issue 31 item 3): a real activation polls a feed served over HTTP.

Items without guid, link or title (RSS 0.92 allows an item of only a description) are distinct
events; two items of one document sharing a delivery id are disposed as any redelivery:
``duplicate`` when the payloads are equal, a recorded ``conflict`` when they differ. Each test ends
by proving the activation still polls and starts a run for a normal new item.
"""

from __future__ import annotations

import pathlib
from typing import Any

from tests.support.activation import make_spec, unique
from tests.support.pollsources import Entry, FeedServer, rss_document
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient

FAST_POLL = {"interval": "200ms", "backoff_initial": "200ms", "backoff_max": "1s", "limit": 50}


def rss092(*descriptions: str, extra: str = "") -> str:
    """An RSS 0.92 document whose items carry only a description (valid in 0.92)."""
    items = "".join(f"<item><description>{d}</description></item>" for d in descriptions)
    return (f'<?xml version="1.0"?><rss version="0.92"><channel><title>t</title><link>http://example.test/</link>'
            f"<description>d</description>{extra}{items}</channel></rss>")


async def activate_feed(wfi: WfiClient, tmp_path: pathlib.Path, task_queue: str, server: FeedServer) -> tuple[str, str]:
    name = unique("rssitems")
    spec = make_spec(tmp_path, f"""
        name: {name}
        on:
          rss.item_published: {{feed: "{server.url}"}}
          as: post
    """, task_queue=task_queue, poll=FAST_POLL)
    await wfi.activate(spec)
    return name, spec.activation_id


async def run_ids(client: Any, activation_id: str) -> set[str]:
    query = f'WfiActivation = "{activation_id}" AND WorkflowType = "wfi.EchoRun"'
    return {w.id async for w in client.list_workflows(query)}


def dispositions(state: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in state["events"].values():
        counts[record["disposition"]] = counts.get(record["disposition"], 0) + 1
    return counts


async def still_polls_and_starts_a_run(wfi: WfiClient, dev_env: Any, name: str, activation_id: str,
                                       server: FeedServer, document: str, runs_before: int) -> None:
    server.serve(document)

    async def one_more_run() -> None:
        ids = await run_ids(dev_env.client, activation_id)
        assert len(ids) == runs_before + 1 and f"{activation_id}/post/urn:normal" in ids

    await assert_eventually(one_more_run)


NORMAL = Entry(guid="urn:normal", title="Normal", link="http://example.test/normal", published="2024-06-01T00:00:00Z")


async def test_three_description_only_items_start_three_runs(wfi, dev_env, task_queue, tmp_path, feed_server):
    # proves: EXT-4, POLL-11
    feed_server.serve(rss092("first", "second", "third"))
    name, activation_id = await activate_feed(wfi, tmp_path, task_queue, feed_server)

    async def three_runs() -> dict[str, Any]:
        assert len(await run_ids(dev_env.client, activation_id)) == 3
        state = await wfi.state(name, include_events=True)
        assert dispositions(state) == {"accepted": 3}
        return state

    state = await assert_eventually(three_runs)
    assert all(r["delivery_id"].startswith("sha256:content:") for r in state["events"].values())
    await still_polls_and_starts_a_run(wfi, dev_env, name, activation_id, feed_server,
                                       rss092("first", "second", "third", extra=_item(NORMAL)), 3)


async def test_two_items_of_one_response_with_one_id_are_a_duplicate_or_a_recorded_conflict(
    wfi, dev_env, task_queue, tmp_path, feed_server
):
    # proves: EXT-3, EXT-4, POLL-11
    same = Entry(guid="urn:twice", title="Twice", link="http://example.test/twice", published="2024-05-01T00:00:00Z")
    edited = Entry(guid="urn:edited", title="Edited", link="http://example.test/e", published="2024-05-02T00:00:00Z")
    edited_again = Entry(guid="urn:edited", title="Edited, other text", link="http://example.test/e",
                         published="2024-05-02T00:00:00Z")
    feed_server.serve(rss_document([edited_again, edited, same, same]))
    name, activation_id = await activate_feed(wfi, tmp_path, task_queue, feed_server)

    async def disposed() -> dict[str, Any]:
        state = await wfi.state(name, include_events=True)
        assert state["counters"].get("duplicates") == 1 and state["counters"].get("conflicts") == 1
        return state

    state = await assert_eventually(disposed)
    assert state["error_counts"].get("conflict") == 1
    assert any(e["kind"] == "conflict" and "urn:edited" in e["message"] for e in state["errors"])
    assert await run_ids(dev_env.client, activation_id) == {f"{activation_id}/post/urn:twice",
                                                             f"{activation_id}/post/urn:edited"}
    await still_polls_and_starts_a_run(wfi, dev_env, name, activation_id, feed_server,
                                       rss_document([NORMAL, edited_again, edited, same, same]), 2)
    state = await wfi.state(name)
    assert state["counters"].get("conflicts") == 1, "a later poll of the same document disposes nothing again"


def _item(e: Entry) -> str:
    return (f"<item><guid>{e.guid}</guid><title>{e.title}</title><link>{e.link}</link>"
            f"<pubDate>Sat, 01 Jun 2024 00:00:00 GMT</pubDate></item>")


async def test_an_empty_cdf_channel_polls_empty_and_a_windows_1251_item_runs_with_its_title_and_absolute_url(
    wfi, dev_env, task_queue, tmp_path, feed_server
):
    # A CDF channel without items (feedparser's tests/wellformed/cdf/channel_title.xml): an empty poll.
    feed_server.serve("<CHANNEL>\n  <TITLE>Example feed</TITLE>\n</CHANNEL>", content_type="text/xml")
    name, activation_id = await activate_feed(wfi, tmp_path, task_queue, feed_server)

    async def polled_empty_twice() -> None:
        poll = (await wfi.state(name))["polls"]["post"]
        assert poll["failures"] == 0 and poll["last_success_at"] and poll["last_error"] is None, poll
        assert len(feed_server.received_headers()) >= 2

    await assert_eventually(polled_empty_twice)
    document = ('<rss version="2.0"><channel><title>Лента</title><item><guid>urn:ru:1</guid>'
                "<title>Как пережить новогоднюю ночь</title><link>/posts/1.html</link></item></channel></rss>")
    feed_server.serve(document.encode("cp1251"), content_type="application/rss+xml; charset=windows-1251")
    run_key = f"{activation_id}/post/urn:ru:1"

    async def ran() -> None:
        assert run_key in await run_ids(dev_env.client, activation_id)

    await assert_eventually(ran)
    result = await dev_env.client.get_workflow_handle(run_key).result()
    payload = result["input"]["bindings"]["post"]
    assert payload["title"] == "Как пережить новогоднюю ночь"
    assert payload["url"] == f"{feed_server.origin}/posts/1.html"
