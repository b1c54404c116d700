"""What `http_json.item_added` reads and where it resumes (no I/O): the trigger's configuration,
dotted paths into a JSON document, the cursor, and the request a position asks for.

**Paths.** ``items``, ``id``, ``next`` and ``watermark`` are dotted paths: ``data.items`` is the
key ``items`` of the key ``data``; a part made of digits indexes a list (``results.0.id``); the
empty path is the document itself. A key holding a dot cannot be named.

**Modes** (the ``mode`` key), each with its cursor (JSON, ``"v": 1``):

- ``page_token`` (default): the source pages with a token or a next-page URL found at ``next`` in
  each response. The cursor is ``{"mode": "page_token", "token": T, "skip": n}``: resuming asks for
  the page of token ``T`` (``null``: the first page) and skips its first ``n`` items. The last item
  of a page that names a next page resumes at that page (``skip`` 0). The source must keep its pages
  stable (cursor-based pagination, or a log whose last page grows): an offset-paged list whose items
  shift would shift the skipped items too.
- ``watermark``: every item carries a strictly increasing value at ``watermark`` (a number, or text
  such as an ISO 8601 instant, compared as text). The cursor is ``{"mode": "watermark", "w": W}``:
  items whose value is not greater than ``W`` were seen; the others are returned in increasing
  value, whatever the source's order. ``watermark_param`` sends ``W`` to the source (``?since=W``)
  so that it lists only newer items; ``order: descending`` says the source lists newest first, so
  paging stops at the first page reaching a seen item.

An ``etag`` rides along in a cursor whose next poll repeats the very request that answered it, read
to its end: that poll sends ``If-None-Match`` and a ``304 Not Modified`` is an empty poll.
"""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from dataclasses import dataclass
from typing import Any, Literal

from wf_initiation.activities.poll._contract import config_invalid, decode_cursor, encode_cursor, require_str
from wf_initiation.core.limits import MAX_PAYLOAD_DEPTH, is_utf8_text, json_problem

CONNECTOR = "http_json.item_added"
MAX_PAGES = 20
"""Pages one poll may fetch (the configuration's ``max_pages`` is at most this)."""
DEFAULT_PAGES = 5
MAX_POSITIONLESS = 100
"""Digests of items without a usable watermark a cursor remembers (returned once each)."""
_MISSING = object()


@dataclass(frozen=True)
class JsonSource:
    """The trigger's configuration, checked."""

    url: str
    method: Literal["GET", "POST"] = "GET"
    body: dict[str, Any] | None = None
    items: str = ""
    id: str = "id"
    mode: Literal["page_token", "watermark"] = "page_token"
    next: str | None = None
    token_param: str | None = None
    watermark: str | None = None
    watermark_param: str | None = None
    descending: bool = False
    max_pages: int = DEFAULT_PAGES


@dataclass(frozen=True)
class Request:
    """One HTTP request of a poll: method, URL and JSON body (POST)."""

    method: str
    url: str
    body: dict[str, Any] | None = None


@dataclass(frozen=True)
class Position:
    """Where a poll resumes: a page token and how many of its items were passed, or a watermark."""

    mode: str
    token: str | None = None
    skip: int = 0
    w: Any = None
    etag: str | None = None
    positionless: tuple[str, ...] = ()

    def encode(self) -> str:
        value: dict[str, Any] = {"v": 1, "mode": self.mode}
        if self.mode == "page_token":
            value.update(token=self.token, skip=self.skip)
        else:
            value["w"] = self.w
            if self.positionless:
                value["positionless"] = list(self.positionless)
        if self.etag is not None:
            value["etag"] = self.etag
        return encode_cursor(value)


def parse_source(config: dict[str, Any]) -> JsonSource:
    """The configuration as a :class:`JsonSource`; PollConfigInvalid naming the key that is wrong
    (the manifest's schema checked it at activation; this guards a spec written by hand)."""
    url = require_str(config, "url", CONNECTOR)
    method = config.get("method", "GET")
    body = config.get("body")
    if method not in ("GET", "POST"):
        raise _bad("method", "GET or POST", method)
    if body is not None and (method != "POST" or not isinstance(body, dict)):
        raise _bad("body", "a JSON object, with method: POST", body)
    mode = config.get("mode", "page_token")
    if mode not in ("page_token", "watermark"):
        raise _bad("mode", "page_token or watermark", mode)
    watermark = _path(config, "watermark")
    if mode == "watermark" and not watermark:
        raise config_invalid(f"{CONNECTOR}: mode watermark needs 'watermark', the path of each item's increasing value")
    max_pages = config.get("max_pages", DEFAULT_PAGES)
    if not isinstance(max_pages, int) or isinstance(max_pages, bool) or not 1 <= max_pages <= MAX_PAGES:
        raise _bad("max_pages", f"an integer from 1 to {MAX_PAGES}", max_pages)
    order = config.get("order", "ascending")
    if order not in ("ascending", "descending"):
        raise _bad("order", "ascending or descending", order)
    return JsonSource(
        url=url, method=method, body=body, items=_path(config, "items") or "", id=_path(config, "id") or "id",
        mode=mode, next=_path(config, "next"), token_param=_name(config, "token_param"), watermark=watermark,
        watermark_param=_name(config, "watermark_param"), descending=order == "descending", max_pages=max_pages,
    )


def _path(config: dict[str, Any], key: str) -> str | None:
    value = config.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad(key, "a dotted path such as data.items", value)
    return value


def _name(config: dict[str, Any], key: str) -> str | None:
    value = config.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise _bad(key, "a parameter name", value)
    return value


def _bad(key: str, expected: str, got: Any) -> Exception:
    return config_invalid(f"{CONNECTOR}: configuration key {key!r} must be {expected}, got {str(got)[:80]!r}")


def at_path(document: Any, path: str) -> Any:
    """The value at a dotted ``path`` (see the module docstring), or ``_MISSING``."""
    value = document
    for part in path.split(".") if path else ():
        if isinstance(value, dict):
            value = value.get(part, _MISSING)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
        if value is _MISSING:
            return _MISSING
    return value


def found(value: Any) -> bool:
    return value is not _MISSING and value is not None


def delivery_id(item: Any, path: str) -> str:
    """The item's delivery id as text: a string, or an integer written out; empty when there is none
    (the payload then fails validation and the item is quarantined or held, POLL-11)."""
    value = at_path(item, path)
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return ""


def payload_of(source: JsonSource, item: Any) -> dict[str, Any]:
    """An item's payload: ``{item_id, source, item}`` (the manifest's payload schema)."""
    return {"item_id": delivery_id(item, source.id), "source": source.url, "item": item}


def item_entry(source: JsonSource, item: Any) -> tuple[dict[str, Any], str | None]:
    """The item's payload, and why it cannot start a run when the activation could not even carry it
    (nested past the payload depth, a lone surrogate, an integer too long): then a stand-in without
    the item, which the activation quarantines or holds with that reason (POLL-11)."""
    payload = payload_of(source, item)
    problem = json_problem(item, max_depth=MAX_PAYLOAD_DEPTH - 1)  # the payload holds the item one level down
    if problem is None:
        return payload, None
    ident = payload["item_id"] if is_utf8_text(payload["item_id"]) else ""
    return {"item_id": ident, "source": source.url, "item": None}, f"the item cannot be carried: {problem}"


def watermark_of(item: Any, path: str) -> int | float | str | None:
    """The item's watermark: a finite number or non-empty text; None when it has none usable."""
    value = at_path(item, path)
    if isinstance(value, bool) or value is _MISSING:
        return None
    if isinstance(value, int | float) and json_problem(value) is None:
        return value
    return value if isinstance(value, str) and value and is_utf8_text(value) else None


def item_digest(item: Any) -> str:
    """Short digest of an item's JSON, for the items without a usable watermark a cursor remembers."""
    text = json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def parse_position(cursor: str | None, source: JsonSource) -> Position:
    """The cursor as a :class:`Position` (None: the first page, nothing seen); PollConfigInvalid for a
    cursor of another connector or mode."""
    if cursor is None:
        return Position(mode=source.mode)
    value = decode_cursor(CONNECTOR, cursor)
    try:
        if not isinstance(value, dict) or value.get("v") != 1 or value.get("mode") != source.mode:
            raise ValueError
        etag = value.get("etag")
        if etag is not None and not isinstance(etag, str):
            raise ValueError
        if source.mode == "page_token":
            token, skip = value.get("token"), value.get("skip", 0)
            if (token is not None and not isinstance(token, str)) or not isinstance(skip, int) or isinstance(skip, bool) \
                    or skip < 0:
                raise ValueError
            return Position(mode=source.mode, token=token, skip=skip, etag=etag)
        w = value.get("w")
        if w is not None and watermark_of({"w": w}, "w") is None:
            raise ValueError
        positionless = value.get("positionless", [])
        if not isinstance(positionless, list) or not all(isinstance(d, str) for d in positionless):
            raise ValueError
        return Position(mode=source.mode, w=w, etag=etag, positionless=tuple(positionless[-MAX_POSITIONLESS:]))
    except ValueError:
        raise config_invalid(
            f"cursor {cursor[:80]!r} is not an {CONNECTOR} cursor of mode {source.mode}; clear it to read from "
            "the start, or set one this connector returned"
        ) from None


def request_for(source: JsonSource, position: Position, page_token: str | None) -> Request:
    """The request for one page: the configured URL (with the watermark, in watermark mode) or the
    page named by ``page_token`` (a next-page URL, or a token sent as ``token_param``)."""
    if page_token is not None and is_url(page_token):
        return Request(source.method, urllib.parse.urljoin(source.url, page_token), source.body)
    extra: dict[str, Any] = {}
    if page_token is not None:
        if source.token_param is None:
            raise config_invalid(
                f"{CONNECTOR}: the response names the next page by a token ({page_token[:40]!r}), but the trigger has "
                "no 'token_param' to send it in: set token_param to the query parameter (GET) or body key (POST) "
                "the source takes it in"
            )
        extra[source.token_param] = page_token
    if source.mode == "watermark" and source.watermark_param and position.w is not None:
        extra[source.watermark_param] = position.w
    if source.method == "POST":
        return Request("POST", source.url, {**(source.body or {}), **extra})
    return Request("GET", with_params(source.url, extra))


def with_params(url: str, params: dict[str, Any]) -> str:
    """``url`` with each parameter set (replacing one of the same name), in the given order."""
    if not params:
        return url
    parts = urllib.parse.urlsplit(url)
    kept = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) if k not in params]
    added = [(k, v if isinstance(v, str) else json.dumps(v)) for k, v in params.items()]
    return parts._replace(query=urllib.parse.urlencode(kept + added)).geturl()


def is_url(token: str) -> bool:
    """A next-page value that is a URL (absolute, or a path or query of the source's own)."""
    return token.startswith(("http://", "https://", "/", "?"))
