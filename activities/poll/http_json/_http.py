"""One page of `http_json.item_added` over HTTP: async (no thread to get stuck), bounded in time and
bytes, its failures named by the setting that fixes them.

- Only ``http`` and ``https``; redirects are not followed (a ``3xx`` other than ``304`` fails the
  poll naming the URL to configure instead), so credentials never leave the configured origin.
- At most :data:`MAX_PAGE_BYTES` of body, counted after content decoding (a compression bomb stops
  there).
- ``429 Too Many Requests`` and ``503 Service Unavailable`` with ``Retry-After`` (seconds or an
  HTTP date) fail the poll with that delay as the error's ``next_retry_delay``: the activation's next
  poll waits at least that long (docs/poll-contract.md).
- ``304 Not Modified`` answers a request sent with ``If-None-Match``: the page has not changed.
- Logging: httpx's INFO line per request is dropped for these requests only (as the rss connector
  does), and one DEBUG line per page is logged on ``wf_initiation.poll.http_json``.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

import httpx

from wf_initiation.activities.poll._contract import config_invalid, source_unavailable
from wf_initiation.activities.poll._http import check_http_url as shared_check_http_url
from wf_initiation.activities.poll._http import quiet_httpx
from wf_initiation.activities.poll.http_json._source import CONNECTOR, Request
from wf_initiation.core.connections import describe_url

MAX_PAGE_BYTES = 10 * 1024 * 1024
"""One response body, after content decoding."""
USER_AGENT = "wf-initiation/http_json"
LOG = logging.getLogger("wf_initiation.poll.http_json")
_REDIRECTS = {301, 302, 303, 307, 308}
_RATE_LIMITED = {429, 503}


@dataclass(frozen=True)
class Page:
    """What one request answered: ``not_modified`` (304), or a body (empty for 204) and its ETag."""

    body: bytes
    etag: str | None
    not_modified: bool = False


def check_http_url(url: str, what: str) -> None:
    """Raise PollConfigInvalid unless ``url`` is an absolute http(s) URL without credentials."""
    if "@" in shared_check_http_url(url, what, connector=CONNECTOR).netloc:
        raise config_invalid(
            f"{CONNECTOR}: {what} carries credentials (user:password@); a Workfile never holds credentials: put them "
            "in the connection (bearer_token, username and password, or headers, as references)"
        )


async def fetch_page(client: httpx.AsyncClient, request: Request, headers: dict[str, str], *,
                     if_none_match: str | None, bound: str) -> Page:
    """Send ``request``; the page it answered, or the error that fails the poll.

    Args:
        client: The poll's client (its timeout bounds each connect and read).
        request: Method, URL and JSON body.
        headers: The connection's headers, credentials included (the URL was checked against the
            connection's origins).
        if_none_match: An ETag the source gave for this very request.
        bound: What bounds the poll's time, named when it expires.
    """
    shown, started = describe_url(request.url), time.monotonic()
    sent = {"User-Agent": USER_AGENT, "Accept": "application/json", **headers}
    if if_none_match is not None:
        sent["If-None-Match"] = if_none_match
    try:
        with quiet_httpx():
            async with client.stream(request.method, request.url, headers=sent, json=request.body) as response:
                page = await _page(response, shown, if_none_match is not None)
    except httpx.TimeoutException as exc:
        raise source_unavailable(
            f"{CONNECTOR}: {request.method} {shown} timed out ({type(exc).__name__}) within {bound}: the source is too "
            "slow or stalled; raise it if the source is only slow, polling retries with backoff"
        ) from None
    except httpx.HTTPError as exc:
        raise source_unavailable(
            f"{CONNECTOR}: {request.method} {shown} failed ({type(exc).__name__}: {exc or 'no detail'}); check that "
            "the host of the trigger's 'url' is reachable, polling retries with backoff"
        ) from None
    LOG.debug("%s %s: %d bytes in %.2fs", request.method, shown, len(page.body), time.monotonic() - started)
    return page


async def _page(response: httpx.Response, shown: str, conditional: bool) -> Page:
    status = response.status_code
    etag = response.headers.get("etag")
    if status == 304 and conditional:
        return Page(body=b"", etag=etag, not_modified=True)
    if status == 204:
        return Page(body=b"", etag=etag)
    if 200 <= status < 300:
        return Page(body=await _read_body(response, shown), etag=etag)
    raise _status_error(response, shown)


def _status_error(response: httpx.Response, shown: str) -> Exception:
    status, reason = response.status_code, response.reason_phrase
    head = f"{CONNECTOR}: {shown} answered HTTP {status} {reason}"
    if status in _REDIRECTS:
        target = response.headers.get("location", "")
        return config_invalid(
            f"{head} (a redirect to {describe_url(urllib.parse.urljoin(shown, target))[:200]!r}); redirects are not "
            "followed, so credentials never leave the configured origin: point the trigger's 'url' at the final URL"
        )
    if status in _RATE_LIMITED:
        wait = retry_after(response.headers.get("retry-after"), datetime.now(UTC))
        asked = f" and asked to wait {wait.total_seconds():g} s (Retry-After)" if wait is not None else ""
        return source_unavailable(
            f"{head}{asked}; the source is rate-limiting or unavailable, polling waits at least that long and retries "
            "with backoff", retry_after=wait)
    if status in (401, 403):
        return source_unavailable(
            f"{head}; check the connection's credentials (bearer_token, username and password, or headers), polling "
            "retries with backoff")
    if status in (404, 410):
        return source_unavailable(f"{head}; check the trigger's 'url', polling retries with backoff")
    if status == 304:
        return source_unavailable(f"{head} to a request without If-None-Match; polling retries with backoff")
    return source_unavailable(f"{head}; polling retries with backoff")


def retry_after(value: str | None, now: datetime) -> timedelta | None:
    """A ``Retry-After`` header as a delay: delta-seconds or an HTTP date (from ``now``); None when
    absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return timedelta(seconds=int(text[:9]))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(when - now, timedelta(0))


async def _read_body(response: httpx.Response, shown: str) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > MAX_PAGE_BYTES:
            raise source_unavailable(
                f"{CONNECTOR}: {shown} answered more than {MAX_PAGE_BYTES:,} bytes; ask the source for smaller pages "
                "(a page-size parameter in the trigger's 'url' or 'body')"
            )
    return bytes(body)
