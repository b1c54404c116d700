"""What the HTTP poll connectors (``rss``, ``http_json``) share: quiet fetches, URL and origin checks.

- httpx logs every request at INFO on its ``httpx`` logger; inside :func:`quiet_httpx` those records
  are dropped (one filter on that logger, acting only on the connectors' own requests: a worker's
  other httpx calls log as before). Each connector logs its own DEBUG line per fetch instead.
- A URL a connector fetches is an absolute ``http``/``https`` URL (:func:`check_http_url`).
- A connection's credentials go only to the origins it names (:func:`check_origin`), and a
  connection that carries secrets must name them.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from wf_initiation.activities.poll._contract import config_invalid
from wf_initiation.core.connections import ResolvedConnection, describe_url, origin_of

_FETCHING: ContextVar[bool] = ContextVar("wfi_poll_fetching", default=False)


class _QuietFetches(logging.Filter):
    """Drops httpx's per-request records below WARNING emitted inside :func:`quiet_httpx`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not _FETCHING.get()


@contextmanager
def quiet_httpx() -> Iterator[None]:
    """httpx's per-request INFO lines are dropped for the requests made inside this block."""
    logger = logging.getLogger("httpx")
    if not any(isinstance(f, _QuietFetches) for f in logger.filters):
        logger.addFilter(_QuietFetches())
    token = _FETCHING.set(True)
    try:
        yield
    finally:
        _FETCHING.reset(token)


def check_http_url(url: str, what: str, *, connector: str) -> urllib.parse.SplitResult:
    """The parts of ``url``; PollConfigInvalid naming ``what`` unless it is an absolute http(s) URL."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise config_invalid(f"{connector}: {what} {describe_url(url)!r} is not a valid URL") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise config_invalid(
            f"{connector}: {what} {describe_url(url)!r}: only http:// and https:// URLs are fetched "
            "(file:, ftp:, data: and other schemes are refused)"
        )
    return parts


def check_origin(url: str, connection: ResolvedConnection, *, connector: str, thing: str) -> None:
    """PollConfigInvalid unless ``url`` (the trigger's ``thing``: its feed, its URL) is at one of the
    connection's ``origins`` (when it names any, and always when it carries secrets): its credentials
    are never sent anywhere else."""
    origins = connection.settings.get("origins")
    if origins is None and not connection.secrets:
        return
    allowed = {origin_of(o) for o in origins} if isinstance(origins, list) else set()
    if origin_of(url) in allowed - {None}:
        return
    parts = urllib.parse.urlsplit(url)
    shown = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
    if origins is None:
        raise config_invalid(
            f"{connector}: the connection carries secrets but names no 'origins' they may be sent to; add "
            f"origins: [\"{shown}\"] to the connection in the deployment if this {thing} may have them"
        )
    raise config_invalid(
        f"{connector}: the {thing}'s origin {shown} is not one of the connection's origins "
        f"({', '.join(map(str, origins))}): its credentials go only there; point the trigger at a {thing} there, use "
        "another connection, or add the origin to the connection in the deployment"
    )
