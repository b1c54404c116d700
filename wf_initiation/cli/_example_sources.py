"""The poll sources of an example deployment, this copy's own, made ready by ``wfi up`` (examples/README.md).

A deployment file with a ``sources/`` folder beside it (the repository's examples/) is an example:
every ``wfi`` command that loads it (:func:`localize`, through ``cli._common.load``) reads it as
this copy's own, so two clones (or two users) on one machine never share a file or a port:

- a ``sqlite`` or ``dir`` connection setting that is a relative path (``.wfi/sources/orders.db``) is
  taken relative to the deployment's folder (``examples/.wfi/sources/orders.db``);
- a feed URL of the overlays on 127.0.0.1 with port 0 (``http://127.0.0.1:0/feed.xml``) gets this
  copy's feed port: a free one picked on first use and kept in ``.wfi/sources/feed-port``.

Before its Workfiles are activated, ``wfi up`` (:func:`prepare_example_sources`) then creates each
SQLite file a ``sql`` connection names that does not exist yet from the script of the same name in
``sources/``, gives each ``sheet`` connection's folder the CSV files of ``sources/sheets/`` it does
not have, and serves the ``.xml`` files of ``sources/`` on 127.0.0.1 at the feed port until the
process exits (a port another program took meanwhile is replaced by a free one, kept from then on).

Nothing that exists is overwritten, so rows and items added to the live sources stay. A deployment
without ``sources/`` is left alone.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import pathlib
import shutil
import socket
import sqlite3
import tempfile
import threading
import urllib.parse
from functools import partial
from typing import Any

from wf_initiation.core.deployment import Deployment, parse_deployment

SOURCES = "sources"
LIVE = pathlib.Path(".wfi") / "sources"  # under the deployment's folder: the live sources of this copy
PORT_FILE = "feed-port"
FEED_HOST = "127.0.0.1"
PATH_SETTINGS = ("sqlite", "dir")  # the sql connector's file, the sheet connector's folder


def is_example(deployment_file: pathlib.Path) -> bool:
    return (deployment_file.resolve().parent / SOURCES).is_dir()


def localize(deployment_file: pathlib.Path, deployment: Deployment, *, port: int | None = None) -> Deployment:
    """The example deployment as this copy's own (module docstring); any other deployment unchanged.

    ``port``: the feed port to use (and keep), instead of the kept one."""
    if not is_example(deployment_file):
        return deployment
    folder = deployment_file.resolve().parent
    data = deployment.model_dump(mode="json", exclude={"base_dir"}, exclude_unset=True)
    changed = False
    for connection in data.get("connections", {}).values():
        for key in PATH_SETTINGS:
            value = connection.get(key)
            if isinstance(value, str) and value and not os.path.isabs(value) and ":" not in value:
                connection[key], changed = str(folder / value), True
    feeds = [(overlay, url) for overlay, url in _feed_urls(data) if url.port == 0]
    if feeds:
        chosen = feed_port(folder, port)
        for overlay, url in feeds:
            overlay["feed"] = urllib.parse.urlunsplit(url._replace(netloc=f"{FEED_HOST}:{chosen}"))
        changed = True
    return parse_deployment(data, base_dir=deployment.base_dir) if changed else deployment


def feed_port(folder: pathlib.Path, port: int | None = None) -> int:
    """This copy's feed port: ``port`` (then kept), else the kept one, else a free one (then kept)."""
    kept = folder / LIVE / PORT_FILE
    if port is None:
        with contextlib.suppress(OSError, ValueError):
            return int(kept.read_text().strip())
        port = _free_port()
    with contextlib.suppress(OSError):  # a read-only copy: the port holds for this process only
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(f"{port}\n")
    return port


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((FEED_HOST, 0))
        return int(probe.getsockname()[1])


def prepare_example_sources(deployment_file: pathlib.Path, deployment: Deployment) -> Deployment:
    """Prepare the sources and serve the feeds until the process exits; print what was done and
    return the deployment to use (another feed port when the kept one was taken)."""
    folder = deployment_file.resolve().parent / SOURCES
    if not folder.is_dir():
        return deployment
    done = [*_databases(folder, deployment), *_sheets(folder, deployment)]
    for port in _feed_ports(deployment):
        try:
            _serve(folder, port)
        except OSError as exc:
            if not _kept_port(deployment_file, port):
                done.append(f"not serving the example feeds on port {port} ({exc.strerror}): their polls fail until it is free")
                continue
            taken, port = port, _free_port()
            deployment = localize(deployment_file, _unlocalized(deployment, taken), port=port)
            _serve(folder, port)
            done.append(f"the kept feed port {taken} is taken ({exc.strerror}): this copy's feed port is now {port}")
        done.append(f"serving the feeds of {folder} at http://{FEED_HOST}:{port}/")
    for line in done:
        print(f"example sources: {line}", flush=True)
    return deployment


def _kept_port(deployment_file: pathlib.Path, port: int) -> bool:
    """Whether ``port`` is this copy's picked feed port (not one the deployment file names itself)."""
    kept = deployment_file.resolve().parent / LIVE / PORT_FILE
    with contextlib.suppress(OSError, ValueError):
        return int(kept.read_text().strip()) == port
    return False


def _unlocalized(deployment: Deployment, port: int) -> Deployment:
    """The deployment with its feed URLs at ``port`` back at port 0, to be given another port."""
    data = deployment.model_dump(mode="json", exclude={"base_dir"}, exclude_unset=True)
    for overlay, url in _feed_urls(data):
        if url.port == port:
            overlay["feed"] = urllib.parse.urlunsplit(url._replace(netloc=f"{FEED_HOST}:0"))
    return parse_deployment(data, base_dir=deployment.base_dir)


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


def _feed_urls(data: dict[str, Any]) -> list[tuple[dict[str, Any], urllib.parse.SplitResult]]:
    """(overlay, URL) of every overlay's feed URL over http on 127.0.0.1, in order of appearance."""
    found = []
    for section in (data.get("workflows") or {}).values():
        for overlay in ((section or {}).get("overlay") or {}).values():
            feed = overlay.get("feed") if isinstance(overlay, dict) else None
            url = urllib.parse.urlsplit(feed) if isinstance(feed, str) else None
            if url is not None and url.scheme == "http" and url.hostname == FEED_HOST:
                found.append((overlay, url))
    return found


def _feed_ports(deployment: Deployment) -> list[int]:
    """Ports of the overlays' feed URLs on 127.0.0.1, in order of appearance."""
    data = {"workflows": deployment.workflows}
    return list(dict.fromkeys(url.port for _, url in _feed_urls(data) if url.port))


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

