"""Fetching a feed over HTTP: async (no thread to get stuck), bounded in time, bytes and redirects.

- Only ``http`` and ``https``, for the feed and for every redirect (``file:``, ``ftp:``, ``data:``...
  are refused).
- At most :data:`MAX_REDIRECTS` redirects.
- The connection's headers (credentials such as ``Authorization``) go only to the feed's own
  origin (scheme, host and port): a redirect to another origin is followed without them.
- At most :data:`MAX_FEED_BYTES` of body, counted after content decoding (a gzip bomb stops there).
- The total time is bounded by the caller's deadline (the poll's ``asyncio.timeout``); the per-read
  timeout below only makes a dead connection fail sooner. Either expiring is reported as a
  timeout of the fetch, naming the setting that bounds it (:func:`fetch`'s ``bound``).
- Logging: httpx's per-request INFO lines are dropped inside :func:`fetch` (``activities/poll/_http.py``),
  and the fetch logs one DEBUG line on ``wf_initiation.poll.rss``.
  A failing fetch fails the poll, which the worker logs once per source (``wf_initiation._poll_log``).
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from dataclasses import dataclass

import httpx

from wf_initiation.activities.poll._contract import config_invalid, source_unavailable
from wf_initiation.activities.poll._http import check_http_url as shared_check_http_url
from wf_initiation.activities.poll._http import quiet_httpx
from wf_initiation.core.connections import describe_url

MAX_FEED_BYTES = 10 * 1024 * 1024
MAX_REDIRECTS = 5
USER_AGENT = "wf-initiation/rss"
_REDIRECTS = {301, 302, 303, 307, 308}
_SCHEMES = ("http", "https")
LOG = logging.getLogger("wf_initiation.poll.rss")


@dataclass(frozen=True)
class Fetched:
    """A fetched feed: the URL it came from (after redirects), its response headers and body."""

    url: str
    headers: dict[str, str]
    body: bytes


def origin(url: str) -> str:
    """``scheme://host:port`` of a URL (the unit credentials are scoped to)."""
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


def check_http_url(url: str, what: str) -> None:
    """Raise PollConfigInvalid unless ``url`` is an absolute http(s) URL."""
    shared_check_http_url(url, what, connector="rss.item_published")


async def fetch(url: str, headers: dict[str, str], *, read_timeout: float, bound: str) -> Fetched:
    """GET ``url`` following at most MAX_REDIRECTS redirects; the body, at most MAX_FEED_BYTES.

    Args:
        url: The feed URL (already checked by :func:`check_http_url`).
        headers: The connection's headers, sent only to the feed's origin.
        read_timeout: Seconds one connect or read may take.
        bound: What bounds the fetch's time (the setting that fixes it), named when it expires.
    """
    home, started = origin(url), time.monotonic()
    timeout = httpx.Timeout(read_timeout)
    with quiet_httpx():
        async with httpx.AsyncClient(follow_redirects=False, timeout=timeout) as client:
            for _ in range(MAX_REDIRECTS + 1):
                sent = {"User-Agent": USER_AGENT, **(headers if origin(url) == home else {})}
                next_url, fetched = await _get(client, url, sent, bound)
                if fetched is not None:
                    LOG.debug("fetched feed %s: %d bytes in %.2fs", describe_url(url), len(fetched.body),
                              time.monotonic() - started)
                    return fetched
                url = next_url
    raise source_unavailable(
        f"feed {describe_url(url)} redirected more than {MAX_REDIRECTS} times; point the trigger's 'feed' at the "
        "final URL"
    )


async def _get(client: httpx.AsyncClient, url: str, headers: dict[str, str], bound: str) -> tuple[str, Fetched | None]:
    """One request: (the redirect target, None) or (``url``, what was fetched)."""
    shown = describe_url(url)
    try:
        async with client.stream("GET", url, headers=headers) as response:
            if response.status_code in _REDIRECTS:
                return _redirect_target(url, response), None
            if response.status_code >= 400:
                raise source_unavailable(
                    f"feed {shown} answered HTTP {response.status_code} {response.reason_phrase}; check the trigger's "
                    "'feed' URL and the connection's credentials ('headers'), polling retries with backoff"
                )
            body = await _read_body(response, shown)
            return url, Fetched(url=url, headers=dict(response.headers.items()), body=body)
    except httpx.InvalidURL:  # httpx parses a redirect's Location before handing the response over
        raise config_invalid(
            f"rss.item_published: feed {shown} redirected to a URL that is not a valid http:// or https:// URL; "
            "only http:// and https:// URLs are fetched (file:, ftp:, data: and other schemes are refused)"
        ) from None
    except httpx.TimeoutException as exc:
        raise source_unavailable(
            f"fetching feed {shown} timed out ({type(exc).__name__}) within {bound}: the feed is too slow or "
            "stalled; raise it if the feed is only slow, polling retries with backoff"
        ) from None
    except httpx.HTTPError as exc:
        raise source_unavailable(
            f"feed {shown} could not be fetched ({type(exc).__name__}: {exc or 'no detail'}); check that the host "
            "of the trigger's 'feed' URL is reachable, polling retries with backoff"
        ) from None


def _redirect_target(url: str, response: httpx.Response) -> str:
    location = response.headers.get("location")
    if not location:
        raise source_unavailable(
            f"feed {describe_url(url)} answered HTTP {response.status_code} without a Location; check the trigger's "
            "'feed' URL"
        )
    target = urllib.parse.urljoin(url, location)
    check_http_url(target, f"feed {describe_url(url)} redirected to")
    return target


async def _read_body(response: httpx.Response, shown: str) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > MAX_FEED_BYTES:
            raise source_unavailable(
                f"feed {shown} is larger than {MAX_FEED_BYTES:,} bytes; point the trigger's 'feed' at a smaller feed"
            )
    return bytes(body)
