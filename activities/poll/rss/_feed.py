"""Feed documents and the RSS cursor (no I/O): parse a fetched feed, pick the items not yet emitted.

Cursor design (see docs/poll-contract.md): a feed is a sliding window, not a log, so the cursor
remembers which items of the window were already emitted, as short digests of their delivery ids
(and, for an id that several items of a document carry, of its occurrence) with their publication instants (``seen``), and a ``floor``: the newest publication instant among
emitted items that have since left the window. An item is new when its digest is not in ``seen``
and it is not dated at or before ``floor``. So an item that re-appears, in the window or after
leaving it, is not emitted again, and the cursor stays as small as the window.
"""

from __future__ import annotations

import calendar
import hashlib
import io
import json
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import feedparser

from wf_initiation.activities.poll._budget import MAX_RESPONSE_BYTES, ResponseBuilder
from wf_initiation.activities.poll._contract import PollResponse, config_invalid, decode_cursor, encode_cursor, source_unavailable

CONNECTOR = "rss.item_published"
MAX_FEED_ENTRIES = 2000
"""Only the newest this-many items of a feed are considered (keeps every cursor under ~70 KB)."""
_DIGEST_CHARS = 16


@dataclass(frozen=True)
class FeedEntry:
    """One feed item, normalised: its delivery id, publication instant and payload."""

    id: str
    epoch: int | None
    payload: dict[str, Any]
    occurrence: int = 0
    """How many older items of the document carry the same id (0 for the first)."""

    @property
    def digest(self) -> str:
        """The cursor's name for this item: its id's digest; a later item reusing the id (the
        ``occurrence``-th) has a digest of its own, so it is emitted once too, and disposed by the
        activation as any redelivery (``duplicate``, or a recorded ``conflict``)."""
        material = self.id if self.occurrence == 0 else f"{self.id}\n#{self.occurrence}"
        return hashlib.sha256(material.encode()).hexdigest()[:_DIGEST_CHARS]


@dataclass(frozen=True)
class RssCursor:
    """Emitted digests still in the window, and the newest instant of emitted items that left it."""

    seen: tuple[tuple[str, int | None], ...] = ()
    floor: int | None = None

    def encode(self) -> str:
        return encode_cursor({"v": 1, "seen": [list(s) for s in self.seen], "floor": self.floor})


def parse_cursor(cursor: str | None) -> RssCursor:
    """Decode an RSS cursor; None is the empty cursor (every item in the feed is new)."""
    if cursor is None:
        return RssCursor()
    value = decode_cursor(CONNECTOR, cursor)
    try:
        if not isinstance(value, dict) or value["v"] != 1:
            raise ValueError(value)
        seen = tuple((str(d), None if t is None else int(t)) for d, t in value["seen"])
        floor = value["floor"]
        return RssCursor(seen=seen, floor=None if floor is None else int(floor))
    except (KeyError, TypeError, ValueError):
        raise config_invalid(
            f"cursor {cursor[:80]!r} is not an {CONNECTOR} cursor; clear it to re-read the whole feed"
        ) from None


def parse_feed(body: bytes, url: str, headers: Mapping[str, str] | None = None) -> list[FeedEntry]:
    """Parse a feed document into entries, oldest first (document order reversed if newest first).

    Read as feedparser reads it over HTTP: ``headers`` are the response's (their ``Content-Type``
    charset decides the encoding, as RFC 3023 says), and relative URLs and ``xml:base`` resolve
    against ``url``, the URL the document was fetched from (after redirects), or the response's
    ``Content-Location`` resolved against it. A feed document without items is an empty list. Only
    the newest :data:`MAX_FEED_ENTRIES` are kept.
    """
    response_headers = {str(k).lower(): str(v) for k, v in (headers or {}).items()}
    location = response_headers.get("content-location")
    response_headers["content-location"] = urllib.parse.urljoin(url, location) if location else url
    parsed = _parse(body, response_headers)
    if not parsed.get("version") and not parsed.entries and "content-type" in response_headers:
        # The charset the server claims (or RFC 3023's us-ascii for text/xml without one) made the
        # document unreadable: let its byte order mark and XML declaration decide instead.
        fallback = _parse(body, {k: v for k, v in response_headers.items() if k != "content-type"})
        parsed = fallback if fallback.get("version") or fallback.entries else parsed
    empty = not parsed.entries and _root_element(body, parsed.get("encoding")) in _FEED_ROOTS
    if not parsed.get("version") and not parsed.entries and not empty:
        problem = parsed.get("bozo_exception") or ("an empty body" if not body.strip() else "no feed element")
        raise source_unavailable(
            f"feed {url} is not an RSS, Atom, RDF or CDF feed ({problem}); check the trigger's 'feed' URL"
        )
    entries = [to_entry(raw, url) for raw in parsed.entries]
    ordered = list(reversed(entries)) if _newest_first(entries) else entries
    return _numbered(ordered)[-MAX_FEED_ENTRIES:]


def _parse(body: bytes, response_headers: dict[str, str]) -> Any:
    # A stream, never the bytes: feedparser opens a bytes argument as a file name when it can.
    return feedparser.parse(io.BytesIO(body), response_headers=response_headers)


_FEED_ROOTS = frozenset({"rss", "feed", "rdf", "channel"})
"""Root elements of a feed document (local names, lower case): RSS, Atom, RDF (``rdf:RDF``), CDF."""
_ROOT = re.compile(r"\s*<\s*(?:[A-Za-z_][\w.-]*:)?([A-Za-z_][\w.-]*)")
_PROLOG = re.compile(r"\s*(?:<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^>\[]*(?:\[.*?\])?\s*>)", re.S | re.I)


def _root_element(body: bytes, encoding: str | None) -> str | None:
    """The local name of the document's root element, lower case (feedparser names no version for
    a CDF channel without items: this tells it from an HTML page)."""
    try:
        text = body[:16384].decode(encoding or "utf-8", errors="ignore").lstrip("\ufeff")
    except LookupError:
        text = body[:16384].decode("utf-8", errors="ignore")
    position = 0
    while (prolog := _PROLOG.match(text, position)) is not None and prolog.end() > position:
        position = prolog.end()
    root = _ROOT.match(text, position)
    return root.group(1).lower() if root else None


def _numbered(entries: list[FeedEntry]) -> list[FeedEntry]:
    """The entries with their ``occurrence`` among items of the same id, oldest first: an edited copy
    added to a feed that keeps the original is the later one, emitted (and found a ``conflict``)."""
    counts: dict[str, int] = {}
    numbered = []
    for entry in entries:
        n = counts.get(entry.id, 0)
        counts[entry.id] = n + 1
        numbered.append(entry if n == 0 else FeedEntry(id=entry.id, epoch=entry.epoch, payload=entry.payload, occurrence=n))
    return numbered


def _newest_first(entries: list[FeedEntry]) -> bool:
    dated = [e.epoch for e in entries if e.epoch is not None]
    return len(dated) >= 2 and dated[0] > dated[-1]


def to_entry(raw: Any, feed_url: str) -> FeedEntry:
    """Normalise one feedparser entry; the id is guid/id, else derived (see :func:`fallback_id`)."""
    title = str(raw.get("title", ""))
    link = str(raw.get("link", ""))
    parsed_time = raw.get("published_parsed") or raw.get("updated_parsed")
    epoch = None if parsed_time is None else calendar.timegm(parsed_time)
    published = None if epoch is None else _iso(epoch)
    summary = str(raw.get("summary", ""))
    ident = str(raw.get("id") or "") or (
        fallback_id(link, title, published) if link or title else content_id(raw, summary, published)
    )
    payload = {
        "id": ident,
        "title": title,
        "summary": summary,
        "url": link,
        "published": published,
        "feed": feed_url,
    }
    return FeedEntry(id=ident, epoch=epoch, payload=payload)


def fallback_id(link: str, title: str, published: str | None) -> str:
    """Delivery id of an item without guid/id: ``sha256:`` + digest of link, title, published."""
    material = "\n".join((link, title, published or ""))
    return "sha256:" + hashlib.sha256(material.encode()).hexdigest()


def content_id(raw: Any, summary: str, published: str | None) -> str:
    """Delivery id of an item with no guid/id, link or title (an RSS 0.92 item may carry only a
    description): ``sha256:content:`` + digest of what it does carry (description, content,
    enclosures, publication instant), so distinct items are distinct events."""
    material = {
        "summary": summary,
        "content": [str(c.get("value", "")) for c in raw.get("content", ()) or ()],
        "enclosures": [str(e.get("href", "")) for e in raw.get("enclosures", ()) or ()],
        "published": published,
    }
    text = json.dumps(material, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "sha256:content:" + hashlib.sha256(text.encode()).hexdigest()


def _iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def select_new(
    entries: list[FeedEntry], cursor: RssCursor, request_cursor: str | None, *, limit: int,
    max_bytes: int = MAX_RESPONSE_BYTES,
) -> PollResponse:
    """The entries not yet emitted according to ``cursor``, each with its resume cursor.

    Pure: the same entries and cursor give the same response. Stops at ``limit`` items or
    ``max_bytes`` (payloads and cursors) and then says ``more``.
    """
    window = {e.digest for e in entries}
    seen = [(d, t) for d, t in cursor.seen if d in window]
    floor = _max(cursor.floor, *(t for d, t in cursor.seen if d not in window))
    emitted = {d for d, _ in seen}
    builder = ResponseBuilder(request_cursor, limit=limit, max_bytes=max_bytes)
    for entry in entries:
        if entry.digest in emitted or _at_or_before(entry.epoch, floor):
            continue
        after = RssCursor(seen=(*seen, (entry.digest, entry.epoch)), floor=floor).encode()
        if not builder.add(entry.payload, after, id_field="id"):
            return builder.response(more=True)
        emitted.add(entry.digest)
        seen.append((entry.digest, entry.epoch))
    return builder.response(more=False)


def _at_or_before(epoch: int | None, floor: int | None) -> bool:
    # "At": the newest departed item itself is the likeliest to re-appear (a feed whose length
    # wobbles by one). The price: a never-seen item dated in the same second as, or before, an
    # item that already left the window is taken for a re-appearance (see docs/poll-contract.md).
    return epoch is not None and floor is not None and epoch <= floor


def _max(*epochs: int | None) -> int | None:
    present = [e for e in epochs if e is not None]
    return max(present) if present else None
