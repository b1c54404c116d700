"""One poll of `http_json.item_added`: the pages it fetches and the items and cursors they give.

Every item comes back with the cursor just after it (POLL-8), in a stable order (POLL-6): the
source's order in ``page_token`` mode, increasing watermark in ``watermark`` mode. A poll fetches
at most ``max_pages`` pages; when that, ``limit`` or the response's byte budget cuts it, it says
``more`` and the activation polls again at once from the last item's cursor. A page that fails
after the first keeps what the pages before it gave where that is safe (page tokens, and an
ascending watermark listing): the next poll starts there and meets the failure again, backing off.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.exceptions import ApplicationError

from wf_initiation.activities.poll._budget import ResponseBuilder
from wf_initiation.activities.poll._contract import POLL_SOURCE_UNAVAILABLE, PollResponse, source_unavailable
from wf_initiation.activities.poll.http_json._http import Page
from wf_initiation.activities.poll.http_json._source import (
    CONNECTOR,
    MAX_POSITIONLESS,
    JsonSource,
    Position,
    Request,
    at_path,
    found,
    item_digest,
    item_entry,
    request_for,
    watermark_of,
)
from wf_initiation.core.limits import is_utf8_text

Fetch = Callable[[Request, str | None], Awaitable[Page]]
"""Sends one request (with ``If-None-Match`` when an ETag is given) and returns its page."""
Parse = Callable[[bytes], Awaitable[Any]]
"""Parses a page's JSON (on a source thread)."""
MAX_TOKEN_CHARS = 8 * 1024
"""A next-page token or URL; it rides in every item's cursor of the page before it."""


async def walk(source: JsonSource, position: Position, request_cursor: str | None, *, limit: int,
               fetch: Fetch, parse: Parse) -> PollResponse:
    """The poll's response from ``position`` on."""
    builder = ResponseBuilder(request_cursor, limit=limit)
    if source.mode == "page_token":
        return await _page_tokens(source, position, builder, fetch, parse)
    return await _watermark(source, position, builder, fetch, parse)


async def _page_tokens(source: JsonSource, pos: Position, builder: ResponseBuilder, fetch: Fetch,
                       parse: Parse) -> PollResponse:
    token, skip = pos.token, pos.skip
    for pages in range(1, source.max_pages + 1):
        request = request_for(source, pos, token)
        try:
            page = await fetch(request, pos.etag if pages == 1 else None)
        except ApplicationError as exc:
            if builder.items and exc.type == POLL_SOURCE_UNAVAILABLE:
                return builder.response(more=True)  # the earlier pages' items stand; the next poll starts here
            raise
        if page.not_modified:
            return builder.response(more=False)
        items, nxt = await _read(source, page, parse, token)
        for j in range(skip, len(items)):
            if j < len(items) - 1:
                after = Position(pos.mode, token=token, skip=j + 1)
            elif nxt is not None:
                after = Position(pos.mode, token=nxt)
            else:  # the end of the listing: this request, read to its end, is the next poll's first
                after = Position(pos.mode, token=token, skip=len(items), etag=page.etag)
            payload, problem = item_entry(source, items[j])
            if not builder.add(payload, after.encode(), id_field="item_id", problem=problem):
                return builder.response(more=True)
        if nxt is None:
            end = Position(pos.mode, token=token, skip=max(skip, len(items)), etag=page.etag)
            return builder.response(more=False, empty_cursor=end.encode())
        token, skip = nxt, 0
    return builder.response(more=True, empty_cursor=Position(pos.mode, token=token).encode())


async def _watermark(source: JsonSource, pos: Position, builder: ResponseBuilder, fetch: Fetch,
                     parse: Parse) -> PollResponse:
    sorter = _Sorter(source, pos)
    token: str | None = None
    complete, failure, pages, etag = False, None, 0, None
    while pages < source.max_pages:
        request = request_for(source, pos, token)
        try:
            page = await fetch(request, pos.etag if pages == 0 else None)
        except ApplicationError as exc:
            if pages == 0 or exc.type != POLL_SOURCE_UNAVAILABLE:
                raise
            failure = exc
            break
        pages += 1
        if page.not_modified:
            return builder.response(more=False)
        etag = page.etag if pages == 1 else None
        items, nxt = await _read(source, page, parse, token)
        reached_seen = sorter.take(items)
        if nxt is None or (source.descending and reached_seen):
            complete = True
            break
        token = nxt
    if not complete:
        _check_cut(source, sorter, failure)
    entries = sorter.entries()
    same_request = source.watermark_param is None or sorter.mark == pos.w
    keep_etag = complete and pages == 1 and etag is not None and same_request
    for k, (payload, after, problem) in enumerate(entries):
        if keep_etag and k == len(entries) - 1:
            after = Position(after.mode, w=after.w, positionless=after.positionless, etag=etag)
        if not builder.add(payload, after.encode(), id_field="item_id", problem=problem):
            return builder.response(more=True)
    empty = Position(pos.mode, w=pos.w, positionless=pos.positionless, etag=etag) if keep_etag else None
    return builder.response(more=not complete, empty_cursor=empty.encode() if empty else None)


def _check_cut(source: JsonSource, sorter: _Sorter, failure: ApplicationError | None) -> None:
    """A listing read only in part: its items are returned only when no unread page can hold an older
    new item (ascending order) and something new was read; otherwise the poll fails, naming the fix."""
    if source.descending:
        if failure is not None:
            raise failure
        raise source_unavailable(
            f"{CONNECTOR}: the source lists newest first and more than max_pages ({source.max_pages}) pages hold "
            "items newer than the cursor: the oldest of them cannot be reached in one poll; raise 'max_pages', "
            "send the watermark to the source ('watermark_param'), or set the cursor past the backlog "
            "(wfi operate set_cursor)"
        )
    if sorter.empty():
        if failure is not None:
            raise failure
        raise source_unavailable(
            f"{CONNECTOR}: max_pages ({source.max_pages}) pages were read and none holds an item newer than the "
            "cursor, so the listing's end is out of reach: send the watermark to the source ('watermark_param') "
            "so that it lists only newer items, or raise 'max_pages'"
        )


class _Sorter:
    """The items of a watermark poll: new ones in increasing watermark, and those without a usable
    watermark (returned once each, as invalid items, and remembered by digest)."""

    def __init__(self, source: JsonSource, pos: Position) -> None:
        self.source, self.pos = source, pos
        self.kind: type | None = None if pos.w is None else (str if isinstance(pos.w, str) else float)
        self.new: list[tuple[Any, Any]] = []
        self.bad: list[tuple[Any, str]] = []
        self.mark: Any = pos.w
        self._known = set(pos.positionless)

    def take(self, items: list[Any]) -> bool:
        """Sort one page's items; True when one of them was seen already (at or before the cursor)."""
        reached = False
        for item in items:
            w = watermark_of(item, self.source.watermark or "")
            kind = None if w is None else (str if isinstance(w, str) else float)
            if w is None or (self.kind is not None and kind is not self.kind):
                self._positionless(item, w)
                continue
            self.kind = kind
            if self.pos.w is None or w > self.pos.w:
                self.new.append((w, item))
            else:
                reached = True
        return reached

    def _positionless(self, item: Any, w: Any) -> None:
        digest = item_digest(item)
        if digest in self._known:
            return
        self._known.add(digest)
        found_text = "nothing" if w is None else f"{json.dumps(w)[:40]}, text where the cursor holds a number" \
            if isinstance(w, str) else f"{w!r}, a number where the cursor holds text"
        self.bad.append((item, f"the item has no usable watermark at {self.source.watermark!r} (found {found_text}), "
                               "so it has no place in the source's order: it is returned once, as an invalid item"))

    def empty(self) -> bool:
        return not self.new and not self.bad

    def entries(self) -> list[tuple[dict[str, Any], Position, str | None]]:
        """(payload, cursor after it, problem) of every item to return, in order."""
        out: list[tuple[dict[str, Any], Position, str | None]] = []
        remembered = list(self.pos.positionless)
        for item, problem in self.bad:
            remembered = [*remembered, item_digest(item)][-MAX_POSITIONLESS:]
            payload, unfit = item_entry(self.source, item)
            out.append((payload, Position("watermark", w=self.pos.w, positionless=tuple(remembered)), unfit or problem))
        for w, item in sorted(self.new, key=lambda pair: pair[0]):
            self.mark = w
            payload, unfit = item_entry(self.source, item)
            out.append((payload, Position("watermark", w=w, positionless=tuple(remembered)), unfit))
        return out


async def _read(source: JsonSource, page: Page, parse: Parse, token: str | None) -> tuple[list[Any], str | None]:
    """The page's items and the token of the next page (None at the end)."""
    document = await parse(page.body) if page.body else None
    if document is None:
        return [], None
    items = at_path(document, source.items)
    if not found(items):
        items = []
    if not isinstance(items, list):
        raise source_unavailable(
            f"{CONNECTOR}: the response holds {type(items).__name__} at 'items' ({source.items or 'the document'}), "
            "not a list; fix the trigger's 'items' path, polling retries with backoff"
        )
    return items, _next(source, document, token)


def _next(source: JsonSource, document: Any, token: str | None) -> str | None:
    if source.next is None:
        return None
    value = at_path(document, source.next)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not found(value) or value in ("", token):
        return None
    if not isinstance(value, str) or not is_utf8_text(value) or len(value) > MAX_TOKEN_CHARS:
        raise source_unavailable(
            f"{CONNECTOR}: the response holds {_kind(value)} at 'next' ({source.next}), not a page token or URL "
            f"(text of at most {MAX_TOKEN_CHARS:,} characters); fix the trigger's 'next' path, polling retries with backoff"
        )
    return value


def _kind(value: Any) -> str:
    if not isinstance(value, str):
        return type(value).__name__
    return "text that is not valid Unicode" if not is_utf8_text(value) else f"text of {len(value):,} characters"


__all__ = ["Fetch", "Parse", "walk"]
