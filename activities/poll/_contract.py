"""The poll contract: what the activation sends a poll activity and what it gets back.

A poll implementation is a Temporal activity ``(PollRequest) -> PollResponse``. It reads the
source from the cursor on, returns at most ``limit`` items (and at most ``MAX_RESPONSE_BYTES``) in
a stable order (or says its order is not stable), each with the cursor position just after it, and
never retries by itself: a failing source raises
``ApplicationError(type=POLL_SOURCE_UNAVAILABLE, non_retryable=True)`` and the activation applies
its own backoff (POLL-2, POLL-10). The request's ``connection`` holds secret *references*
(``env:NAME``, ``file:/path``) that the activity resolves on the worker. See ``docs/poll-contract.md``.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from temporalio.exceptions import ApplicationError

from wf_initiation.wire import POLL_CONFIG_INVALID, POLL_SOURCE_UNAVAILABLE  # the error types live on the wire

ACTIVITY_PREFIX = "wfi.poll."
"""Activity names are ``wfi.poll.<connector name>``, e.g. ``wfi.poll.rss.item_published``."""


def activity_name_for(connector: str) -> str:
    """The activity name of a poll connector, e.g. ``wfi.poll.rss.item_published``.

    Args:
        connector: The manifest name, e.g. ``rss.item_published``.
    """
    return ACTIVITY_PREFIX + connector


class PollRequest(BaseModel):
    """One poll: the binding's configuration, its connection and the cursor to resume from."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    connector: str = Field(description="Manifest name of the connector, e.g. `rss.item_published`.")
    config: dict[str, Any] = Field(
        description="The entry's evaluated configuration (never contains credentials)."
    )
    connection: dict[str, Any] = Field(
        default_factory=dict,
        description="The connection's settings as the deployment writes them (DSN, file locations, headers); "
        "secrets are references (`env:NAME`, `file:/path`) that the activity resolves on the worker, so no "
        "secret value is ever in workflow history. May be empty.",
    )
    cursor: str | None = Field(
        default=None, description="Opaque position to resume from; None starts from the beginning."
    )
    limit: int = Field(default=500, ge=1, le=10_000, description="Maximum number of items returned.")


class PollItem(BaseModel):
    """One candidate event and the cursor position just after it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    payload: dict[str, Any] = Field(description="The event payload; carries the manifest's delivery_id.")
    cursor_after: str = Field(description="Resuming from this cursor returns the items after this one.")
    problem: str | None = Field(
        default=None,
        description="Set when the connector cannot return this item (e.g. it is over the item byte limit): "
        "`payload` then holds only its delivery id, and the activation treats the item as invalid with this "
        "reason (quarantined or held, per the deployment's `invalid_items`, POLL-11).",
    )


class PollResponse(BaseModel):
    """The items of one poll and the cursor to resume from once all of them are disposed."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    items: list[PollItem] = Field(description="Candidate events, in stable order when `stable_order`.")
    cursor: str | None = Field(
        description="Last item's `cursor_after`, or the request's cursor unchanged when there are no items."
    )
    stable_order: bool = Field(description="Does this response promise the source's stable order?")
    more: bool = Field(default=False, description="True when `limit` or the byte budget cut the response: poll again soon.")


def respond(items: list[PollItem], cursor: str | None, *, more: bool) -> PollResponse:
    """Build a stable-order response whose resume cursor follows the last item.

    Args:
        items: The items, in source order.
        cursor: The request's cursor, kept when there are no items.
        more: Whether the limit cut the response.
    """
    resume = items[-1].cursor_after if items else cursor
    return PollResponse(items=items, cursor=resume, stable_order=True, more=more)


def source_unavailable(message: str) -> ApplicationError:
    """The error a poll activity raises when its source fails; the activation backs off."""
    return ApplicationError(message, type=POLL_SOURCE_UNAVAILABLE, non_retryable=True)


def config_invalid(message: str) -> ApplicationError:
    """The error a poll activity raises for a configuration, connection or cursor it cannot use."""
    return ApplicationError(message, type=POLL_CONFIG_INVALID, non_retryable=True)


def decode_cursor(connector: str, cursor: str) -> Any:
    """Parse a JSON cursor, raising PollConfigInvalid that says how to reset it.

    Args:
        connector: Connector name, for the message.
        cursor: The cursor text.
    """
    try:
        return json.loads(cursor)
    except json.JSONDecodeError as exc:
        raise config_invalid(
            f"cursor {cursor[:80]!r} is not a {connector} cursor ({exc.msg}); "
            "set the cursor to a value this connector returned, or clear it to start over"
        ) from None


def encode_cursor(value: Any) -> str:
    """Serialise a cursor value compactly and deterministically."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def require_str(config: dict[str, Any], key: str, connector: str) -> str:
    """The non-empty string ``config[key]``, or PollConfigInvalid naming the key."""
    value = config.get(key)
    if not isinstance(value, str) or not value:
        raise config_invalid(f"{connector}: configuration key {key!r} must be a non-empty string, got {value!r}")
    return value
