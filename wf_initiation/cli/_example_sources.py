"""The poll sources of an example deployment, made ready by ``wfi up`` (examples/README.md).

A deployment file with a ``sources/`` folder beside it (the repository's examples/) gets, before
its Workfiles are activated:

- each SQLite file a ``sql`` connection names that does not exist yet, created from the script of
  the same name in ``sources/`` (``/tmp/wfi-examples/orders.db`` from ``sources/orders.sql``);
- each ``sheet`` connection's folder, given the CSV files of ``sources/sheets/`` it does not have;
- the ``.xml`` files of ``sources/`` served over HTTP on 127.0.0.1 until the process exits, on every
  port that a feed URL of the deployment's overlays names on 127.0.0.1
  (``http://127.0.0.1:8781/feed.xml``).

Nothing that exists is overwritten, so rows and items added to the live sources stay. A deployment
without ``sources/`` is left alone.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import pathlib
import shutil
import sqlite3
import tempfile
import threading
import urllib.parse
from functools import partial
from typing import Any

from wf_initiation.core.deployment import Deployment

SOURCES = "sources"
FEED_HOST = "127.0.0.1"


def prepare_example_sources(deployment_file: pathlib.Path, deployment: Deployment) -> list[str]:
    """Prepare the sources and serve the feeds until the process exits; print and return what was done."""
    folder = deployment_file.resolve().parent / SOURCES
    if not folder.is_dir():
        return []
    done = [*_databases(folder, deployment), *_sheets(folder, deployment)]
    for port in _feed_ports(deployment):
        try:
            _serve(folder, port)
            done.append(f"serving the feeds of {folder} at http://{FEED_HOST}:{port}/")
        except OSError as exc:
            done.append(f"not serving the example feeds on port {port} ({exc.strerror}): their polls fail until it is free")
    for line in done:
        print(f"example sources: {line}", flush=True)
    return done


def _databases(folder: pathlib.Path, deployment: Deployment) -> list[str]:
    done = []
    for connection in deployment.connections_for("sql").values():
        target = connection.settings().get("sqlite")
        if not isinstance(target, str) or not os.path.isabs(target) or os.path.exists(target):
            continue
        script = folder / f"{pathlib.Path(target).stem}.sql"
        if script.is_file():
            _create_database(pathlib.Path(target), script)
            done.append(f"created {target} from {script}")
    return done


def _create_database(target: pathlib.Path, script: pathlib.Path) -> None:
    """Build the database beside ``target`` and move it in place: a poll never reads half of it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, building = tempfile.mkstemp(dir=target.parent, suffix=".building")
    os.close(fd)
    try:
        with contextlib.closing(sqlite3.connect(building)) as db:
            db.executescript(script.read_text(encoding="utf-8"))
        os.replace(building, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(building)


def _sheets(folder: pathlib.Path, deployment: Deployment) -> list[str]:
    done = []
    templates = sorted((folder / "sheets").glob("*.csv"))
    for connection in deployment.connections_for("sheet").values():
        target = connection.settings().get("dir")
        if not isinstance(target, str) or not os.path.isabs(target):
            continue
        missing = [t for t in templates if not (pathlib.Path(target) / t.name).exists()]
        for template in missing:
            pathlib.Path(target).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(template, pathlib.Path(target) / template.name)
        if missing:
            done.append(f"copied {', '.join(repr(t.name) for t in missing)} to {target}")
    return done


def _feed_ports(deployment: Deployment) -> list[int]:
    """Ports of the overlays' feed URLs on 127.0.0.1, in order of appearance."""
    ports: dict[int, None] = {}
    for section in deployment.workflows.values():
        for overlay in (section.get("overlay") or {}).values():
            feed = overlay.get("feed") if isinstance(overlay, dict) else None
            url = urllib.parse.urlsplit(feed) if isinstance(feed, str) else None
            if url is not None and url.scheme == "http" and url.hostname == FEED_HOST and url.port:
                ports[url.port] = None
    return list(ports)


class _FeedHandler(http.server.SimpleHTTPRequestHandler):
    """The folder's ``.xml`` files and nothing else (the folder also holds the SQL scripts)."""

    extensions_map = {".xml": "application/rss+xml"}

    def send_head(self) -> Any:
        path = pathlib.PurePosixPath(urllib.parse.urlsplit(self.path).path)
        if path.suffix != ".xml" or len(path.parts) != 2:
            self.send_error(404, "only the example feeds are served here")
            return None
        return super().send_head()

    def log_message(self, format: str, *args: Any) -> None:  # the pollers' requests are no news
        return


def _serve(folder: pathlib.Path, port: int) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer((FEED_HOST, port), partial(_FeedHandler, directory=str(folder)))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name=f"example-feeds-{port}", daemon=True).start()
    return server

