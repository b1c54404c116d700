"""A feed served from the conformance kit's own process, for cases that need a source which misbehaves.

The deployment's worker must reach ``127.0.0.1`` of the machine the kit runs on, which holds for a
local deployment (as reading the kit's scratch directory does for the sheet cases).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from xml.sax.saxutils import escape


def rss_document(guids: list[str]) -> str:
    """An RSS 2.0 document listing one item per guid, oldest first, an hour apart."""
    start = datetime(2024, 5, 1, tzinfo=UTC)
    items = "".join(
        f"<item><title>{escape(g)}</title><link>http://example.test/{escape(g)}</link>"
        f'<guid isPermaLink="false">{escape(g)}</guid><pubDate>{format_datetime(start + timedelta(hours=i))}</pubDate></item>'
        for i, g in enumerate(guids))
    return ('<?xml version="1.0" encoding="UTF-8"?><rss version="2.0"><channel><title>kit</title>'
            f"<link>http://example.test/</link><description>d</description>{items}</channel></rss>")


class FeedServer:
    """An HTTP server on 127.0.0.1 (a port of its own) answering every GET with one document, or,
    after :meth:`trickle`, with headers and then one byte every ``every`` seconds, never finishing."""

    def __init__(self) -> None:
        self.document = rss_document([])
        self.trickle_every: float | None = None
        self._stop = threading.Event()
        feed = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                every, body = feed.trickle_every, feed.document.encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/rss+xml")
                self.send_header("Content-Length", str(len(body) + (1 << 20) if every else len(body)))
                self.end_headers()
                if every is None:
                    self.wfile.write(body)
                    return
                try:
                    for byte in body * 1000:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        if feed._stop.wait(every) or feed.trickle_every is None:
                            return
                except OSError:  # the poll gave up and closed the connection: what it should do
                    return

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="kit-feed")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/feed.xml"

    def trickle(self, every: float) -> None:
        self.trickle_every = every

    def serve(self, document: str) -> None:
        self.document, self.trickle_every = document, None

    def __enter__(self) -> FeedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
