"""`rss.item_published`: new items of an RSS 2.0 or Atom feed fetched over HTTP.

Cursor design (see docs/poll-contract.md): a feed is a sliding window, not a log, so the cursor
remembers which items of the window were already emitted, as short digests of their delivery ids
with their publication instants (``seen``), and a ``floor``: the newest publication instant among
emitted items that have since left the window. An item is new when its digest is not in ``seen``
and it is not dated at or before ``floor``. So an item that re-appears, in the window or after
leaving it, is not emitted again, and the cursor stays as small as the window.
"""

from __future__ import annotations

import asyncio
import calendar
import hashlib
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import feedparser
from temporalio import activity

from wf_initiation.activities.poll._contract import (
    PollItem,
    PollRequest,
    PollResponse,
    config_invalid,
    decode_cursor,
    encode_cursor,
    require_str,
    respond,
    source_unavailable,
)

CONNECTOR = "rss.item_published"
DEFAULT_TIMEOUT_S = 30.0
MAX_FEED_BYTES = 20 * 1024 * 1024
# Each item carries its own cursor, whose size grows with the window: keep one response's cursors
# well under Temporal's 2 MiB payload limit, and cut the response (more=True) instead.
MAX_RESPONSE_CURSOR_BYTES = 512 * 1024
_DIGEST_CHARS = 16


@dataclass(frozen=True)
class FeedEntry:
    """One feed item, normalised: its delivery id, publication instant and payload."""

    id: str
    epoch: int | None
    payload: dict[str, Any]

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.id.encode()).hexdigest()[:_DIGEST_CHARS]


@dataclass(frozen=True)
class RssCursor:
    """Emitted digests still in the window, and the newest instant of emitted items that left it."""

    seen: tuple[tuple[str, int | None], ...] = ()
    floor: int | None = None

    def encode(self) -> str:
        return encode_cursor({"v": 1, "seen": [list(s) for s in self.seen], "floor": self.floor})


@activity.defn(name="wfi.poll.rss.item_published")
async def poll_rss(req: PollRequest) -> PollResponse:
    """Fetch the feed and return its items not yet emitted, oldest first.

    Raises:
        ApplicationError: ``PollSourceUnavailable`` when the feed cannot be fetched or parsed;
            ``PollConfigInvalid`` for a bad feed URL, connection or cursor.
    """
    url = _feed_url(req.config)
    cursor = parse_cursor(req.cursor)
    body = await asyncio.to_thread(fetch, url, req.connection)
    entries = parse_feed(body, url)
    return select_new(entries, cursor, req.cursor, limit=req.limit)


def _feed_url(config: dict[str, Any]) -> str:
    url = require_str(config, "feed", CONNECTOR)
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise config_invalid(f"{CONNECTOR}: feed {url!r} must be an http:// or https:// URL")
    return url


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


def fetch(url: str, connection: dict[str, Any]) -> bytes:
    """GET the feed (blocking; run it in a thread). Connection may give `headers` and `timeout`."""
    headers = {"User-Agent": "wf-initiation/rss", **_headers(connection)}
    timeout = _timeout(connection)
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read(MAX_FEED_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise source_unavailable(
            f"feed {url} answered HTTP {exc.code} {exc.reason}; check the feed URL and the "
            "connection's credentials, polling retries with backoff"
        ) from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise source_unavailable(
            f"feed {url} could not be fetched ({reason}); check that the host is reachable, "
            "polling retries with backoff"
        ) from None
    if len(body) > MAX_FEED_BYTES:
        raise source_unavailable(
            f"feed {url} is larger than {MAX_FEED_BYTES} bytes; point the trigger at a smaller feed"
        )
    return body


def _timeout(connection: dict[str, Any]) -> float:
    timeout = connection.get("timeout", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise config_invalid(f"{CONNECTOR}: connection 'timeout' must be a positive number of seconds")
    return float(timeout)


def _headers(connection: dict[str, Any]) -> dict[str, str]:
    headers = connection.get("headers", {})
    if not isinstance(headers, dict):
        raise config_invalid(f"{CONNECTOR}: connection 'headers' must be a mapping of header name to value")
    return {str(k): str(v) for k, v in headers.items()}


def parse_feed(body: bytes, url: str) -> list[FeedEntry]:
    """Parse RSS 2.0 or Atom into entries, oldest first (document order reversed if newest first)."""
    parsed = feedparser.parse(body)
    if not parsed.get("version") and not parsed.entries:
        problem = parsed.get("bozo_exception", "no RSS or Atom document")
        raise source_unavailable(f"feed {url} is not an RSS or Atom feed ({problem}); check the feed URL")
    entries = [to_entry(raw, url) for raw in parsed.entries]
    return list(reversed(entries)) if _newest_first(entries) else entries


def _newest_first(entries: list[FeedEntry]) -> bool:
    dated = [e.epoch for e in entries if e.epoch is not None]
    return len(dated) >= 2 and dated[0] > dated[-1]


def to_entry(raw: Any, feed_url: str) -> FeedEntry:
    """Normalise one feedparser entry; the id is guid/id, else a digest of link+title+published."""
    title = str(raw.get("title", ""))
    link = str(raw.get("link", ""))
    parsed_time = raw.get("published_parsed") or raw.get("updated_parsed")
    epoch = None if parsed_time is None else calendar.timegm(parsed_time)
    published = None if epoch is None else _iso(epoch)
    ident = str(raw.get("id") or "") or fallback_id(link, title, published)
    payload = {
        "id": ident,
        "title": title,
        "summary": str(raw.get("summary", "")),
        "url": link,
        "published": published,
        "feed": feed_url,
    }
    return FeedEntry(id=ident, epoch=epoch, payload=payload)


def fallback_id(link: str, title: str, published: str | None) -> str:
    """Delivery id of an item without guid/id: ``sha256:`` + digest of link, title, published."""
    material = "\n".join((link, title, published or ""))
    return "sha256:" + hashlib.sha256(material.encode()).hexdigest()


def _iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def select_new(
    entries: list[FeedEntry], cursor: RssCursor, request_cursor: str | None, *, limit: int
) -> PollResponse:
    """The entries not yet emitted according to ``cursor``, each with its resume cursor.

    Pure: the same entries and cursor give the same response.
    """
    window = {e.digest for e in entries}
    seen = [(d, t) for d, t in cursor.seen if d in window]
    floor = _max(cursor.floor, *(t for d, t in cursor.seen if d not in window))
    emitted = {d for d, _ in seen}
    items: list[PollItem] = []
    budget = MAX_RESPONSE_CURSOR_BYTES
    for entry in entries:
        if entry.digest in emitted or _at_or_before(entry.epoch, floor):
            continue
        if len(items) >= limit or budget <= 0:
            return respond(items, request_cursor, more=True)
        emitted.add(entry.digest)
        seen.append((entry.digest, entry.epoch))
        after = RssCursor(seen=tuple(seen), floor=floor).encode()
        budget -= len(after)
        items.append(PollItem(payload=entry.payload, cursor_after=after))
    return respond(items, request_cursor, more=False)


def _at_or_before(epoch: int | None, floor: int | None) -> bool:
    # "At": the newest departed item itself is the likeliest to re-appear (a feed whose length
    # wobbles by one). The price: a never-seen item dated in the same second as, or before, an
    # item that already left the window is taken for a re-appearance (see docs/poll-contract.md).
    return epoch is not None and floor is not None and epoch <= floor


def _max(*epochs: int | None) -> int | None:
    present = [e for e in epochs if e is not None]
    return max(present) if present else None
