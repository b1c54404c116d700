"""The `http_json.item_added` poll activity: items of a JSON API listing, page by page, from a cursor.

The trigger's configuration says what to read (``url``, ``method``, ``body``, the paths of the items,
their ids and the next page, the mode); the deployment's connection says how to authenticate
(``bearer_token``, ``username`` and ``password``, or ``headers``, each secret a reference resolved on
the worker), where those credentials may go (``origins``) and how long a poll may take (``timeout``).
See ``_source`` for the modes and cursors, ``_walk`` for a poll's pages, ``_http`` for one request.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import httpx
from temporalio import activity

from wf_initiation.activities.poll._contract import PollRequest, PollResponse, activity_name_for, config_invalid, source_unavailable
from wf_initiation.activities.poll._http import check_origin as shared_check_origin
from wf_initiation.activities.poll._runtime import LIMITS, deadline_bound, run_poll
from wf_initiation.activities.poll.http_json._http import Page, check_http_url, fetch_page
from wf_initiation.activities.poll.http_json._source import CONNECTOR, JsonSource, Request, parse_position, parse_source
from wf_initiation.activities.poll.http_json._walk import walk
from wf_initiation.core.connections import ResolvedConnection, describe_url, origin_of

DEFAULT_TIMEOUT_S = 30.0


@activity.defn(name=activity_name_for(CONNECTOR))
async def poll_http_json(req: PollRequest) -> PollResponse:
    """Return the listing's items after the cursor, in the source's order (or by watermark).

    Raises:
        ApplicationError: ``PollSourceUnavailable`` when a page cannot be fetched or read in time, the
            source rate-limits (its ``Retry-After`` as ``next_retry_delay``) or answers an error;
            ``PollConfigInvalid`` for a bad configuration, connection or cursor.
    """
    return await run_poll(req, _poll, cap=lambda conn: timeout_of(conn.settings))


async def _poll(req: PollRequest, connection: ResolvedConnection, deadline: float) -> PollResponse:
    source = parse_source(req.config)
    check_http_url(source.url, "the trigger's 'url'")
    check_origin(source.url, connection)
    position = parse_position(req.cursor, source)
    headers = headers_of(connection.settings)
    home = origin_of(source.url) or source.url
    bound = deadline_bound(deadline, timeout_of(connection.settings))

    async def fetch(request: Request, if_none_match: str | None) -> Page:
        if origin_of(request.url) != home:
            raise config_invalid(
                f"{CONNECTOR}: the response names a next page at another origin ({describe_url(request.url)[:200]}); "
                f"the connection's credentials go only to {home}: fix the trigger's 'next' path or 'url'"
            )
        return await fetch_page(client, request, headers, if_none_match=if_none_match, bound=bound)

    async def parse(body: bytes) -> Any:
        return await LIMITS.run_blocking(home, lambda: parse_json(body, source))

    with LIMITS.poll(home, CONNECTOR):
        async with httpx.AsyncClient(follow_redirects=False, timeout=httpx.Timeout(deadline)) as client:
            return await walk(source, position, req.cursor, limit=req.limit, fetch=fetch, parse=parse)


def parse_json(body: bytes, source: JsonSource) -> Any:
    """A page's JSON (blocking: run it on a source thread); PollSourceUnavailable when it is none.

    Numbers JSON cannot carry (``NaN``, ``Infinity``, ``1e999``, which Python's parser accepts) are
    kept as their text, as ``sql.row_inserted`` keeps non-finite floats: a data converter would
    otherwise turn them into ``null`` without a word.
    """
    try:
        return json.loads(body, parse_constant=str, parse_float=_finite_or_text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past the parser's depth
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        raise source_unavailable(
            f"{CONNECTOR}: {describe_url(source.url)} answered something that is not JSON ({reason}); check the "
            "trigger's 'url', polling retries with backoff"
        ) from None


def _finite_or_text(text: str) -> float | str:
    value = float(text)
    return value if math.isfinite(value) else text


def check_origin(url: str, connection: ResolvedConnection) -> None:
    """PollConfigInvalid unless the URL is at one of the connection's ``origins`` (activities/poll/_http.py)."""
    shared_check_origin(url, connection, connector=CONNECTOR, thing="URL")


def timeout_of(connection: dict[str, Any]) -> float:
    """The connection's ``timeout``: seconds the whole poll may take (default 30)."""
    timeout = connection.get("timeout", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise config_invalid(f"{CONNECTOR}: connection 'timeout' must be a positive number of seconds")
    return float(timeout)


def headers_of(connection: dict[str, Any]) -> dict[str, str]:
    """The headers every request carries: the connection's ``headers`` and its credentials
    (``bearer_token``, or ``username`` with ``password``), references already resolved."""
    headers = connection.get("headers", {})
    if not isinstance(headers, dict):
        raise config_invalid(f"{CONNECTOR}: connection 'headers' must be a mapping of header name to value")
    out = {str(k): str(v) for k, v in headers.items()}
    token, user, password = connection.get("bearer_token"), connection.get("username"), connection.get("password")
    if token is not None and user is not None:
        raise config_invalid(f"{CONNECTOR}: the connection gives both 'bearer_token' and 'username': keep one")
    if token is not None:
        out["Authorization"] = f"Bearer {token}"
    elif user is not None or password is not None:
        if not isinstance(user, str) or not isinstance(password, str):
            raise config_invalid(
                f"{CONNECTOR}: basic authentication needs both 'username' and 'password' (password: env:NAME) on the "
                "connection")
        out["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return out
