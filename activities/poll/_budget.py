"""Byte budgets of a poll response, so no source can produce one Temporal refuses (docs/limits.md).

A poll response is one Temporal payload (the activity result): over 2 MiB it is refused, and every
later poll from the same cursor would fail the same way. So a connector stops adding items once the
response reaches :data:`MAX_RESPONSE_BYTES` and reports ``more`` (the activation polls again at
once, from the last item's cursor). One item over :data:`MAX_ITEM_BYTES` (the same limit as one
external delivery) can never be returned: it is returned as a stand-in holding only its delivery
id, with a ``problem``, and the activation treats it as an invalid item (quarantined, or held for an
operator, per the deployment's ``invalid_items``), so the cursor is never wedged behind it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from wf_initiation.activities.poll._contract import PollItem, PollResponse, respond

MAX_RESPONSE_BYTES = 1024 * 1024
"""A poll response stops growing at this many bytes (items' payloads and cursors, as JSON)."""

MAX_ITEM_BYTES = 256 * 1024
"""One item (payload and cursor, as JSON) may be at most this big; equal to ``wire.MAX_DELIVERY_BYTES``."""

_ENVELOPE_BYTES = 64  # the item's keys and punctuation around payload and cursor
_MAX_ID_CHARS = 1024


def json_size(value: Any) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON (how the data converter sends it, give or take)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str).encode())


def item_size(payload: dict[str, Any], cursor_after: str) -> int:
    return json_size(payload) + len(cursor_after.encode()) + _ENVELOPE_BYTES


class ResponseBuilder:
    """Collects the items of one response within its count and byte limits.

    Args:
        request_cursor: The request's cursor (the response cursor when no item is added).
        limit: At most this many items.
        max_bytes: The response's byte budget.
        max_item_bytes: The largest item returned whole.
    """

    def __init__(self, request_cursor: str | None, *, limit: int, max_bytes: int = MAX_RESPONSE_BYTES,
                 max_item_bytes: int = MAX_ITEM_BYTES) -> None:
        self._cursor, self._limit = request_cursor, limit
        self._max_bytes, self._max_item = max_bytes, max_item_bytes
        self.items: list[PollItem] = []
        self.bytes = 0

    def add(self, payload: dict[str, Any], cursor_after: str, *, id_field: str, problem: str | None = None) -> bool:
        """Add one item (a stand-in if it is too big); False, adding nothing, when the response is full.

        Args:
            payload: The item's payload.
            cursor_after: The cursor just after it.
            id_field: The payload key of its delivery id (kept in a stand-in).
            problem: Why the item cannot start a run although it was read (e.g. it has no position in
                the source's order): the activation treats it as invalid with this reason (POLL-11).
        """
        if len(self.items) >= self._limit:
            return False
        size = item_size(payload, cursor_after)
        item = PollItem(payload=payload, cursor_after=cursor_after, problem=problem)
        if size > self._max_item:
            item = self._stand_in(payload, cursor_after, id_field, size)
            size = item_size(item.payload, cursor_after)
        if self.items and self.bytes + size > self._max_bytes:
            return False
        self.items.append(item)
        self.bytes += size
        return True

    def _stand_in(self, payload: dict[str, Any], cursor_after: str, id_field: str, size: int) -> PollItem:
        ident = payload.get(id_field)
        if isinstance(ident, str) and len(ident) > _MAX_ID_CHARS:
            ident = "sha256:" + hashlib.sha256(ident.encode()).hexdigest()
        problem = (f"the item is {size:,} bytes as JSON; one poll item may be at most {self._max_item:,} bytes "
                   "(docs/limits.md), so it cannot start a run: it is kept out, and the cursor moves past it "
                   "once it is quarantined")
        return PollItem(payload={id_field: ident}, cursor_after=cursor_after, problem=problem)

    def response(self, *, more: bool, empty_cursor: str | None = None) -> PollResponse:
        """The response; ``more`` when the source has items beyond these (limit or budget cut it).

        Args:
            more: The source has items beyond these.
            empty_cursor: With no item added, a cursor at the same point of the source as the request's
                (an updated ETag, a position carried over); None keeps the request's.
        """
        return respond(self.items, empty_cursor if empty_cursor is not None else self._cursor, more=more)
