"""`rss.item_published` reads real feed documents as feedparser reads them over HTTP.

The documents are feedparser's own test corpus, read from its source distribution as dev.py test
fetches it (tests/support/corpora.py; never stored here): ``SELECTED`` names the documents: RSS 0.9x/1.0/2.0, Atom 0.3/1.0, RDF and CDF documents, encodings declared in the
HTTP ``Content-Type`` only, ``xml:base`` and relative links, documents without items. Each is served
over a real socket with the HTTP headers its ``Header:`` comment names (``Content-Type`` defaults to
``text/xml``, as in feedparser's own tests), and ``feedparser.parse(url)``, fetching the same URL
itself, is the oracle: the connector's items have the same titles, links, summaries and ids.
"""

from __future__ import annotations

import asyncio
import io
import re
from typing import Any

import feedparser
import pytest
from temporalio.exceptions import ApplicationError

from tests.support.corpora import feedparser_tests
from tests.support.pollsources import FeedServer, activity_env
from wf_initiation.activities.poll import POLL_SOURCE_UNAVAILABLE, PollRequest, PollResponse, poll_rss

SELECTED = {  # this test's name for a document -> its path under feedparser's tests/
    "atom-entry_id.xml": "wellformed/atom/entry_id.xml",
    "atom-entry_link_alternate_map_link.xml": "wellformed/atom/entry_link_alternate_map_link.xml",
    "atom-entry_summary_escaped_markup.xml": "wellformed/atom/entry_summary_escaped_markup.xml",
    "atom10-entry_id.xml": "wellformed/atom10/entry_id.xml",
    "atom10-entry_link_alternate_map_link.xml": "wellformed/atom10/entry_link_alternate_map_link.xml",
    "atom10-entry_summary_inline_markup.xml": "wellformed/atom10/entry_summary_inline_markup.xml",
    "atom10-feed_title.xml": "wellformed/atom10/feed_title.xml",
    "atom10-relative_uri.xml": "wellformed/atom10/relative_uri.xml",
    "atom10-relative_uri_inherit.xml": "wellformed/atom10/relative_uri_inherit.xml",
    "base-cdf_item_abstract_xml_base.xml": "wellformed/base/cdf_item_abstract_xml_base.xml",
    "base-entry_summary_xml_base.xml": "wellformed/base/entry_summary_xml_base.xml",
    "base-http_entry_link_base_content_location.xml": "wellformed/base/http_entry_link_base_content_location.xml",
    "base-http_entry_summary_base_content_location.xml": "wellformed/base/http_entry_summary_base_content_location.xml",
    "base-http_item_description_base_docuri.xml": "wellformed/base/http_item_description_base_docuri.xml",
    "base-http_item_link_base_docuri.xml": "wellformed/base/http_item_link_base_docuri.xml",
    "base-http_relative_xml_base.xml": "wellformed/base/http_relative_xml_base.xml",
    "base-rel_uri_with_unicode_character.xml": "wellformed/base/rel_uri_with_unicode_character.xml",
    "cdf-channel_title.xml": "wellformed/cdf/channel_title.xml",
    "cdf-item_abstract_map_summary.xml": "wellformed/cdf/item_abstract_map_summary.xml",
    "cdf-item_href_map_link.xml": "wellformed/cdf/item_href_map_link.xml",
    "cdf-item_title.xml": "wellformed/cdf/item_title.xml",
    "chardet-koi8r.xml": "illformed/chardet/koi8r.xml",
    "encoding-big5.xml": "encoding/big5.xml",
    "encoding-euc-kr-item.xml": "encoding/euc-kr-item.xml",
    "encoding-http_application_rss_xml_charset_overrides_encoding.xml": "encoding/http_application_rss_xml_charset_overrides_encoding.xml",
    "encoding-http_text_xml_charset.xml": "encoding/http_text_xml_charset.xml",
    "encoding-utf-16le-bom.xml": "encoding/utf-16le-bom.xml",
    "rdf-rdf_item_link.xml": "wellformed/rdf/rdf_item_link.xml",
    "rdf-rdf_item_title.xml": "wellformed/rdf/rdf_item_title.xml",
    "rdf-rss090_item_title.xml": "wellformed/rdf/rss090_item_title.xml",
    "rdf-rss_version_10.xml": "wellformed/rdf/rss_version_10.xml",
    "rss-channel_title.xml": "wellformed/rss/channel_title.xml",
    "rss-item_content_encoded.xml": "wellformed/rss/item_content_encoded.xml",
    "rss-item_description_map_summary.xml": "wellformed/rss/item_description_map_summary.xml",
    "rss-item_enclosure_url.xml": "wellformed/rss/item_enclosure_url.xml",
    "rss-item_guid.xml": "wellformed/rss/item_guid.xml",
    "rss-item_guid_isPermaLink_map_link.xml": "wellformed/rss/item_guid_isPermaLink_map_link.xml",
    "rss-item_link.xml": "wellformed/rss/item_link.xml",
    "rss-item_pubDate.xml": "wellformed/rss/item_pubDate.xml",
    "rss-rss_version_090.xml": "wellformed/rss/rss_version_090.xml",
    "rss-rss_version_091_netscape.xml": "wellformed/rss/rss_version_091_netscape.xml",
    "rss-rss_version_091_userland.xml": "wellformed/rss/rss_version_091_userland.xml",
    "rss-rss_version_092.xml": "wellformed/rss/rss_version_092.xml",
    "rss-rss_version_093.xml": "wellformed/rss/rss_version_093.xml",
    "rss-rss_version_094.xml": "wellformed/rss/rss_version_094.xml",
    "rss-rss_version_20.xml": "wellformed/rss/rss_version_20.xml",
}
DERIVED = "windows-1251.xml"  # koi8r.xml re-encoded as windows-1251 with no declaration: only HTTP's charset says so
DOCUMENTS = sorted([*SELECTED, DERIVED])
_HEADER = re.compile(r"^Header:\s+([^:]+):(.*)$", re.MULTILINE)
EXTRA_HEADERS = {  # documents whose charset only the HTTP header gives (the README says why)
    "chardet-koi8r.xml": {"Content-Type": "application/rss+xml; charset=koi8-r"},
    "windows-1251.xml": {"Content-Type": "application/rss+xml; charset=windows-1251"},
}


def document(name: str) -> bytes:
    """A document of the corpus by this test's name (skips the test when the corpus is absent)."""
    if name == DERIVED:
        text = document("chardet-koi8r.xml").decode("koi8-r")
        return re.sub(r"^<!--.*?-->", "<!-- koi8r.xml of feedparser's tests as windows-1251 -->", text, flags=re.S).encode("cp1251")
    return (feedparser_tests() / SELECTED[name]).read_bytes()


def response_headers(name: str, data: bytes) -> dict[str, str]:
    """The headers feedparser's own tests serve the document with (its ``Header:`` lines)."""
    text = data.decode("utf-8", errors="ignore")
    headers = {k.strip(): v.strip() for k, v in _HEADER.findall(text)}
    content_type = headers.pop("Content-type", None) or headers.pop("Content-Type", None) or "text/xml"
    return {"Content-Type": content_type, **headers, **EXTRA_HEADERS.get(name, {})}


async def poll(url: str) -> PollResponse:
    req = PollRequest(connector="rss.item_published", config={"feed": url}, connection={}, cursor=None, limit=500)
    return await activity_env().run(poll_rss, req)


def oracle_items(parsed: Any) -> list[dict[str, Any]]:
    """What feedparser itself gives for each entry, in the connector's payload terms."""
    return [{"title": e.get("title", ""), "url": e.get("link", ""), "summary": e.get("summary", ""),
             "id": e.get("id") or None} for e in parsed.entries]


def our_items(response: PollResponse, oracle: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The connector's payloads in the oracle's terms, in document order (the connector returns
    oldest first: a newest-first document comes reversed), ids kept only where the oracle has one."""
    items = [i.payload for i in response.items]
    if [p["title"] for p in items] != [o["title"] for o in oracle]:
        items = list(reversed(items))
    return [{"title": p["title"], "url": p["url"], "summary": p["summary"], "id": p["id"] if o["id"] else None}
            for p, o in zip(items, oracle, strict=True)]


@pytest.fixture(scope="module")
def corpus_server() -> Any:
    server = FeedServer().start()
    server.serve_documents({f"/{name}": ((data := document(name)), response_headers(name, data)) for name in DOCUMENTS})
    yield server
    server.stop()


def test_the_corpus_is_there_and_covers_every_format():
    assert len(DOCUMENTS) >= 30
    versions = {feedparser.parse(io.BytesIO(document(name))).get("version") for name in DOCUMENTS}
    assert {"rss090", "rss091n", "rss091u", "rss092", "rss093", "rss094", "rss20", "rss10", "atom03", "atom10"
            } <= versions, versions
    cdf = [name for name in DOCUMENTS if document(name).lstrip().split(b"-->")[-1].lstrip().startswith(b"<CHANNEL")]
    assert len(cdf) >= 4, cdf  # feedparser 6.0 names no version for CDF


@pytest.mark.parametrize("name", DOCUMENTS)
async def test_the_connector_reads_each_document_as_feedparser_reads_it_over_http(corpus_server: FeedServer, name):
    url = f"{corpus_server.origin}/{name}"
    parsed = await asyncio.to_thread(feedparser.parse, url)
    assert parsed.get("status") == 200, parsed.get("bozo_exception")
    response = await poll(url)
    oracle = oracle_items(parsed)
    assert len(response.items) == len(oracle)
    assert our_items(response, oracle) == oracle
    assert all(i.payload["id"] for i in response.items), "every item has a delivery id"
    assert len({i.cursor_after for i in response.items}) == len(response.items)


async def test_a_windows_1251_feed_with_only_an_http_charset_has_its_titles_right(corpus_server: FeedServer):
    data = document(DERIVED)
    assert b"encoding=" not in data.split(b"?>")[0]  # no XML declaration names it
    response = await poll(f"{corpus_server.origin}/windows-1251.xml")
    expected = re.findall(r"<item>\s*<title>(.*?)</title>", data.decode("cp1251"))
    assert expected and [i.payload["title"] for i in response.items] == expected
    assert all(re.search("[а-яА-Я]", t) for t in expected)
    assert "Ð" not in response.items[0].payload["summary"] and re.search("[а-я]", response.items[0].payload["summary"])


async def test_relative_links_and_xml_base_resolve_against_the_feed_url(corpus_server: FeedServer):
    origin = corpus_server.origin
    (item,) = (await poll(f"{origin}/base-http_item_link_base_docuri.xml")).items
    assert item.payload["url"] == f"{origin}/relative/uri"
    (item,) = (await poll(f"{origin}/base-http_item_description_base_docuri.xml")).items
    assert item.payload["summary"] == f'<a href="{origin}/relative/uri">click here</a>'
    (entry,) = (await poll(f"{origin}/base-http_entry_summary_base_content_location.xml")).items
    assert entry.payload["summary"] == '<div><a href="http://example.com/relative/uri">click here</a></div>'
    (based,) = (await poll(f"{origin}/base-entry_summary_xml_base.xml")).items
    assert 'href="http://example.com/test/test.html"' in based.payload["summary"]


@pytest.mark.parametrize("name", ["cdf-channel_title.xml", "rss-channel_title.xml", "atom10-feed_title.xml"])
async def test_a_feed_document_without_items_is_an_empty_poll(corpus_server: FeedServer, name):
    response = await poll(f"{corpus_server.origin}/{name}")
    assert response.items == [] and response.more is False


async def test_a_page_that_is_no_feed_still_fails_naming_the_setting(feed_server: FeedServer):
    feed_server.serve("<html><head><title>Sign in</title></head><body>maintenance</body></html>",
                      content_type="text/html; charset=utf-8")
    with pytest.raises(ApplicationError) as caught:
        await poll(feed_server.url)
    assert caught.value.type == POLL_SOURCE_UNAVAILABLE and "the trigger's 'feed' URL" in caught.value.message
