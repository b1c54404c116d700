"""Real sources for poll tests: a local HTTP feed server and a throwaway PostgreSQL server.

Its fixtures (``feed_server``, ``other_server``, ``postgres_server``, ``postgres_dsn``) are a pytest
plugin registered by tests/conftest.py: a test names them as arguments; the helpers are imported
(``from tests.support.pollsources import FeedServer, rss_document``). Nothing here mocks a source:
the feed is served over a real socket, PostgreSQL is a real server started with
``initdb``/``pg_ctl`` in a temporary directory.
"""

from __future__ import annotations

import contextlib
import glob
import html
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from temporalio.testing import ActivityEnvironment


@dataclass
class FeedContent:
    """What the server answers: status, content type and body (or a redirect, or a trickle); and the
    headers it received."""

    status: int = 200
    content_type: str = "application/rss+xml"
    body: bytes = b""
    redirect: str | None = None  # answer 302 with this Location
    trickle: float | None = None  # send one byte every this-many seconds, never finishing
    delay: float = 0.0  # wait this long before answering
    received_headers: list[dict[str, str]] = field(default_factory=list)
    received_paths: list[str] = field(default_factory=list)  # path and query of each request
    documents: dict[str, tuple[bytes, dict[str, str]]] = field(default_factory=dict)  # path -> body, headers
    active: int = 0  # requests being answered now
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)


class FeedServer:
    """An HTTP server on 127.0.0.1 whose single document the test replaces between polls."""

    def __init__(self) -> None:
        self.content = FeedContent()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self.content))
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def origin(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def url(self) -> str:
        return f"{self.origin}/feed.xml"

    def serve(self, body: str | bytes, *, content_type: str = "application/rss+xml", delay: float = 0.0) -> None:
        """Answer 200 with ``body`` from now on (after ``delay`` seconds)."""
        data = body.encode() if isinstance(body, str) else body
        with self.content.lock:
            self.content.status, self.content.content_type, self.content.body = 200, content_type, data
            self.content.redirect, self.content.trickle, self.content.delay = None, None, delay

    def serve_documents(self, documents: dict[str, tuple[bytes, dict[str, str]]]) -> None:
        """Answer 200 for each path (``/name.xml``) with its body and response headers (``Content-Type``
        among them), besides the single document; other paths answer as before."""
        with self.content.lock:
            self.content.documents.update(documents)

    def fail(self, status: int = 500) -> None:
        """Answer ``status`` with an empty body from now on."""
        with self.content.lock:
            self.content.status, self.content.body, self.content.redirect, self.content.trickle = status, b"", None, None

    def redirect(self, location: str) -> None:
        """Answer requests for /feed.xml with 302 to ``location`` from now on (other paths: the body)."""
        with self.content.lock:
            self.content.redirect, self.content.trickle = location, None

    def trickle(self, seconds_per_byte: float = 2.0) -> None:
        """From now on, answer 200 and then send one byte every ``seconds_per_byte``, forever."""
        with self.content.lock:
            self.content.trickle, self.content.redirect = seconds_per_byte, None

    def active(self) -> int:
        """Requests being answered right now (a trickle in progress counts)."""
        with self.content.lock:
            return self.content.active

    def received_headers(self) -> list[dict[str, str]]:
        with self.content.lock:
            return list(self.content.received_headers)

    def received(self) -> str:
        """Everything the server was sent: each request's path and query, and its headers."""
        with self.content.lock:
            return "\n".join([*self.content.received_paths, *map(repr, self.content.received_headers)])

    def start(self) -> FeedServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.content.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


def _handler_for(content: FeedContent) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            with content.lock:
                content.received_headers.append(dict(self.headers.items()))
                content.received_paths.append(self.path)
                content.active += 1
                status, ctype, body = content.status, content.content_type, content.body
                redirect, trickle, delay = content.redirect, content.trickle, content.delay
                document = content.documents.get(self.path)
            try:
                if delay and document is None:
                    content.stopping.wait(delay)
                if document is not None:
                    self._document(*document)
                elif redirect is not None and self.path == "/feed.xml":
                    self._answer(302, ctype, b"", location=redirect)
                elif trickle is not None:
                    self._trickle(trickle)
                else:
                    self._answer(status, ctype, body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up: what the connector is expected to do with a trickle
            finally:
                with content.lock:
                    content.active -= 1

        def _answer(self, status: int, ctype: str, body: bytes, location: str | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            if location is not None:
                self.send_header("Location", location)
            self.end_headers()
            self.wfile.write(body)

        def _document(self, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(200)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _trickle(self, seconds_per_byte: float) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/rss+xml")
            self.send_header("Content-Length", str(10**9))
            self.end_headers()
            self.wfile.flush()
            while not content.stopping.wait(seconds_per_byte):
                self.wfile.write(b" ")
                self.wfile.flush()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet test output
            pass

    return Handler


@pytest.fixture
def feed_server() -> Iterator[FeedServer]:
    """A running feed server, stopped after the test."""
    server = FeedServer().start()
    yield server
    server.stop()


@pytest.fixture
def other_server() -> Iterator[FeedServer]:
    """A second feed server: another origin (another port), for cross-origin redirects."""
    server = FeedServer().start()
    yield server
    server.stop()


@dataclass(frozen=True)
class Entry:
    """A feed item for building documents; ``guid=None`` leaves the item without an id."""

    guid: str | None
    title: str
    link: str
    published: str  # RFC 3339, e.g. "2024-05-01T10:00:00Z"
    summary: str = ""


def rss_document(entries: list[Entry], *, title: str = "Test feed") -> str:
    """An RSS 2.0 document listing ``entries`` in the given order."""
    items = "".join(_rss_item(e) for e in entries)
    return (
        '<?xml version="1.0" encoding="UTF-8"?><rss version="2.0"><channel>'
        f"<title>{html.escape(title)}</title><link>http://example.test/</link>"
        f"<description>d</description>{items}</channel></rss>"
    )


def _rss_item(e: Entry) -> str:
    pub = format_datetime(datetime.fromisoformat(e.published.replace("Z", "+00:00")))
    guid = f"<guid isPermaLink=\"false\">{html.escape(e.guid)}</guid>" if e.guid else ""
    return (
        f"<item><title>{html.escape(e.title)}</title><link>{html.escape(e.link)}</link>{guid}"
        f"<description>{html.escape(e.summary)}</description><pubDate>{pub}</pubDate></item>"
    )


def atom_document(entries: list[Entry], *, title: str = "Test feed") -> str:
    """An Atom 1.0 document listing ``entries`` in the given order."""
    items = "".join(
        f"<entry><title>{html.escape(e.title)}</title><link href=\"{html.escape(e.link)}\"/>"
        + (f"<id>{html.escape(e.guid)}</id>" if e.guid else "")
        + f"<updated>{e.published}</updated><published>{e.published}</published>"
        f"<summary>{html.escape(e.summary)}</summary></entry>"
        for e in entries
    )
    return (
        '<?xml version="1.0" encoding="utf-8"?><feed xmlns="http://www.w3.org/2005/Atom">'
        f"<title>{html.escape(title)}</title><id>urn:test:feed</id><updated>2024-01-01T00:00:00Z</updated>"
        f"{items}</feed>"
    )


# --- PostgreSQL -------------------------------------------------------------------------------


def postgres_binaries() -> tuple[str, str] | None:
    """Paths of ``initdb`` and ``pg_ctl`` from PATH or /usr/lib/postgresql/*/bin, if installed."""
    for directory in [None, *sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]:
        initdb = shutil.which("initdb", path=directory)
        pg_ctl = shutil.which("pg_ctl", path=directory)
        if initdb and pg_ctl:
            return initdb, pg_ctl
    return None


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_server_user() -> list[str]:
    # initdb refuses to run as root; run the server as the 'postgres' account when we are root.
    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.skip("running as root and 'runuser' is missing: cannot start PostgreSQL as a non-root user")
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("running as root and there is no 'postgres' user to run PostgreSQL as")
    return [runuser, "-u", "postgres", "--"]


@dataclass(frozen=True)
class PostgresServer:
    """A running throwaway PostgreSQL server."""

    dsn: str
    data_dir: str
    pg_ctl: str
    prefix: tuple[str, ...]

    def stop(self) -> None:
        subprocess.run([*self.prefix, self.pg_ctl, "-D", self.data_dir, "-m", "immediate", "-w", "stop"],
                       check=False, capture_output=True)


def start_postgres(base: str) -> PostgresServer:
    """Initialise and start PostgreSQL in ``base`` on a free port of 127.0.0.1 (trust auth)."""
    found = postgres_binaries()
    if found is None:
        pytest.skip("PostgreSQL binaries (initdb, pg_ctl) not found on PATH or in /usr/lib/postgresql/*/bin")
    initdb, pg_ctl = found
    prefix = _as_server_user()
    if prefix:
        shutil.chown(base, user="postgres")
    data, port = os.path.join(base, "data"), _free_port()
    run = _runner(prefix)
    run(initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
    options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off"
    run(pg_ctl, "-D", data, "-o", options, "-l", os.path.join(base, "server.log"), "-w", "start")
    return PostgresServer(f"postgresql://postgres@127.0.0.1:{port}/postgres", data, pg_ctl, tuple(prefix))


def _runner(prefix: list[str]):
    def run(*cmd: str) -> None:
        done = subprocess.run([*prefix, *cmd], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:2])} failed ({done.returncode}): {done.stderr.strip()}")

    return run


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the session (each xdist worker's), started when a test first needs it;
    skipped with a reason when PostgreSQL is not installed. Tests use tables of their own."""
    base = tempfile.mkdtemp(prefix="wfi-pg-")
    try:
        server = start_postgres(base)
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_dsn(postgres_server: PostgresServer) -> str:
    """The DSN of the session's PostgreSQL server."""
    return postgres_server.dsn


# --- Contract checks shared by the connector tests ----------------------------------------------


def activity_env(start_to_close: float = 30.0) -> ActivityEnvironment:
    """An ActivityEnvironment whose activity has ``start_to_close`` seconds, as a real poll does.

    The connectors derive their deadline from it (ActivityEnvironment's default is 1 s: too short
    for a loaded machine, and not what a deployment gives).
    """
    import dataclasses
    from datetime import timedelta

    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, start_to_close_timeout=timedelta(seconds=start_to_close))
    return env


def assert_payloads_conform(connector: str, payloads: list[dict]) -> None:
    """Every payload satisfies the manifest's payload_schema and carries a non-empty delivery id."""
    import jsonschema

    from wf_initiation.core._catalog import Catalog

    manifest = Catalog.default(third_party=False).get(connector)
    assert manifest is not None, f"no built-in manifest {connector}"
    for payload in payloads:
        jsonschema.validate(payload, manifest.payload_schema)
        assert manifest.delivery_id_of(payload), payload


def assert_manifest_names_activity(connector: str, activity_fn: object) -> None:
    """The manifest's `implementation` is ``activity_fn``, its activity name is the contract's, and the
    worker registers it (POLL_ACTIVITIES is resolved from the manifests)."""
    from temporalio import activity

    from wf_initiation.activities.poll import POLL_ACTIVITIES, activity_name_for
    from wf_initiation.activities.poll._registry import load_implementation
    from wf_initiation.core._catalog import Catalog

    manifest = Catalog.default(third_party=False).get(connector)
    assert manifest is not None and manifest.implementation and manifest.stable_order is True
    assert load_implementation(manifest) is activity_fn and activity_fn in POLL_ACTIVITIES
    assert activity._Definition.must_from_callable(activity_fn).name == activity_name_for(connector)


# --- A real `wfi worker` process ------------------------------------------------------------------


class CliWorker:
    """``wfi worker`` in a subprocess: the real entry point (logging, SIGTERM = graceful shutdown),
    with its own environment (e.g. the secrets connections reference) and its output in a log file."""

    def __init__(self, directory: pathlib.Path, address: str, task_queue: str, env: dict[str, str] | None = None,
                 deployment: pathlib.Path | None = None):
        # The worker resolves the secrets of its own deployment's connections only: pass the deployment
        # the activations are made with when they have connections with references.
        self.deployment = deployment or directory / f"worker-{task_queue}.yaml"
        if deployment is None:
            self.deployment.write_text(f"temporal: {{address: '{address}', task_queue: '{task_queue}'}}\n")
        self.log_path = directory / f"worker-{task_queue}.log"
        self.env = {**os.environ, "PYTHONTZPATH": "", **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self._ready = threading.Event()

    def start(self, timeout: float = 60.0) -> CliWorker:
        self._ready.clear()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "wf_initiation", "worker", "--deployment", str(self.deployment)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=self.env,
        )
        threading.Thread(target=self._copy_output, args=(self.proc,), daemon=True).start()
        if not self._ready.wait(timeout):
            self.kill()
            raise RuntimeError(f"the worker was not ready within {timeout}s; its log:\n{self.log()}")
        return self

    def _copy_output(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        with self.log_path.open("ab") as log:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if b"worker ready" in line:
                    self._ready.set()

    def terminate(self, timeout: float) -> float:
        """SIGTERM; the seconds until the process exited (AssertionError if it did not within ``timeout``)."""
        assert self.proc is not None
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the worker ignored SIGTERM for {timeout}s; its log:\n{self.log()}") from None
        return time.monotonic() - started

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
