"""The `rss.item_published` poll activity: fetch the feed, return the items not yet emitted."""

from __future__ import annotations

import urllib.parse
from typing import Any

from temporalio import activity

from wf_initiation.activities.poll._contract import PollRequest, PollResponse, activity_name_for, config_invalid, require_str
from wf_initiation.activities.poll._http import check_origin as shared_check_origin
from wf_initiation.activities.poll._runtime import LIMITS, deadline_bound, run_poll
from wf_initiation.activities.poll.rss._feed import CONNECTOR, parse_cursor, parse_feed, select_new
from wf_initiation.activities.poll.rss._http import check_http_url, fetch, origin
from wf_initiation.core.connections import ResolvedConnection

DEFAULT_TIMEOUT_S = 30.0


@activity.defn(name=activity_name_for(CONNECTOR))
async def poll_rss(req: PollRequest) -> PollResponse:
    """Fetch the feed and return its items not yet emitted, oldest first.

    Raises:
        ApplicationError: ``PollSourceUnavailable`` when the feed cannot be fetched or parsed in time;
            ``PollConfigInvalid`` for a bad feed URL, connection or cursor.
    """
    return await run_poll(req, _poll, cap=lambda conn: timeout_of(conn.settings))


async def _poll(req: PollRequest, connection: ResolvedConnection, deadline: float) -> PollResponse:
    url = feed_url(req.config)
    check_origin(url, connection)
    cursor = parse_cursor(req.cursor)
    headers = headers_of(connection.settings)
    source = origin(url)
    bound = deadline_bound(deadline, timeout_of(connection.settings))
    with LIMITS.poll(source, CONNECTOR):
        fetched = await fetch(url, headers, read_timeout=deadline, bound=bound)
        entries = await LIMITS.run_blocking(source, lambda: parse_feed(fetched.body, fetched.url, fetched.headers))
    return select_new(entries, cursor, req.cursor, limit=req.limit)


def feed_url(config: dict[str, Any]) -> str:
    """The configured feed URL; PollConfigInvalid unless it is http(s)."""
    url = require_str(config, "feed", CONNECTOR)
    check_http_url(url, "feed")
    if "@" in urllib.parse.urlsplit(url).netloc:
        raise config_invalid(
            f"{CONNECTOR}: the feed URL carries credentials (user:password@); a Workfile never holds credentials: "
            "put them in the connection, e.g. headers: {Authorization: \"env:FEED_AUTH\"}"
        )
    return url


def check_origin(url: str, connection: ResolvedConnection) -> None:
    """PollConfigInvalid unless the feed is at one of the connection's ``origins`` (activities/poll/_http.py)."""
    shared_check_origin(url, connection, connector=CONNECTOR, thing="feed")


def timeout_of(connection: dict[str, Any]) -> float:
    """The connection's ``timeout``: seconds the whole fetch may take (default 30)."""
    timeout = connection.get("timeout", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise config_invalid(f"{CONNECTOR}: connection 'timeout' must be a positive number of seconds")
    return float(timeout)


def headers_of(connection: dict[str, Any]) -> dict[str, str]:
    """The connection's ``headers`` (already resolved: references replaced by their values)."""
    headers = connection.get("headers", {})
    if not isinstance(headers, dict):
        raise config_invalid(f"{CONNECTOR}: connection 'headers' must be a mapping of header name to value")
    return {str(k): str(v) for k, v in headers.items()}
