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
from datetime import timedelta
from typing import Any

from temporalio.exceptions import ApplicationError

# The contract's names and models live on the wire; re-exported here for connectors.
from wf_initiation.wire import POLL_ACTIVITY_PREFIX as ACTIVITY_PREFIX
from wf_initiation.wire import POLL_CONFIG_INVALID, POLL_SOURCE_UNAVAILABLE, PollItem, PollRequest, PollResponse
from wf_initiation.wire import poll_activity_name as activity_name_for

__all__ = [
    "ACTIVITY_PREFIX", "POLL_CONFIG_INVALID", "POLL_SOURCE_UNAVAILABLE", "PollItem", "PollRequest", "PollResponse",
    "activity_name_for", "config_invalid", "decode_cursor", "encode_cursor", "require_str", "respond",
    "source_unavailable",
]

def respond(items: list[PollItem], cursor: str | None, *, more: bool) -> PollResponse:
    """Build a stable-order response whose resume cursor follows the last item.

    Args:
        items: The items, in source order.
        cursor: The request's cursor, kept when there are no items.
        more: Whether the limit cut the response.
    """
    resume = items[-1].cursor_after if items else cursor
    return PollResponse(items=items, cursor=resume, stable_order=True, more=more)


def source_unavailable(message: str, *, retry_after: timedelta | None = None) -> ApplicationError:
    """The error a poll activity raises when its source fails; the activation backs off.

    Args:
        message: What failed and what fixes it (never a credential).
        retry_after: The source asked to be left alone this long (HTTP ``Retry-After``): the
            activation's next poll waits at least that (carried as the error's ``next_retry_delay``).
    """
    return ApplicationError(message, type=POLL_SOURCE_UNAVAILABLE, non_retryable=True, next_retry_delay=retry_after)


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
    except ValueError as exc:  # JSONDecodeError, or a number past int()'s 4,300 digits
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "a number too long to read"
        raise config_invalid(
            f"cursor {cursor[:80]!r} is not a {connector} cursor ({reason}); "
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
