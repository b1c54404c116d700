"""Real sources for poll tests: a local HTTP feed server, a paged JSON API, a throwaway PostgreSQL
server and a throwaway IMAP server (dovecot).

Its fixtures (``feed_server``, ``other_server``, ``json_api``, ``postgres_server``, ``postgres_dsn``,
``imap_server``) are a pytest plugin registered by tests/conftest.py: a test names them as
arguments; the helpers are imported (``from tests.support.pollsources import FeedServer,
rss_document``). Nothing here mocks a source: the feed and the JSON API are served over real
sockets, PostgreSQL is a real server started with ``initdb``/``pg_ctl`` and dovecot a real IMAP
server, each in a temporary directory.
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
from typing import Any

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


# --- A JSON API ------------------------------------------------------------------------------------


@dataclass
class Answer:
    """A scripted answer: status, headers and body (JSON when not bytes)."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = b""


class JsonApi:
    """A paged JSON listing on 127.0.0.1 (``GET`` or ``POST /items``), over a real socket.

    It answers ``{"data": [items of the page], "meta": {"next": token-or-URL-or-null}}``: pages of
    ``page_size`` items from the offset given by ``?cursor=`` (GET) or ``{"cursor": ...}`` (POST);
    ``since`` (query or body) keeps the items whose ``seq`` is greater; ``newest_first`` lists them
    in reverse. Every page has a strong ETag and ``If-None-Match`` with it is answered 304. Answers
    queued with :meth:`script` are given first, one per request (failures, rate limits).
    """

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.page_size = 2
        self.next_style = "token"  # or "url": meta.next is the next page's path and query
        self.newest_first = False
        self.lock = threading.Lock()
        self.scripted: list[Answer] = []
        self.requests: list[tuple[float, str, str, dict[str, str], int, Any]] = []  # time, method, path, headers, status, body
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def origin(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def url(self) -> str:
        return f"{self.origin}/items"

    def add(self, *items: Any) -> None:
        with self.lock:
            self.items.extend(items)

    def script(self, *answers: Answer) -> None:
        """The next requests get these answers, in order, instead of a page."""
        with self.lock:
            self.scripted.extend(answers)

    def statuses(self) -> list[int]:
        with self.lock:
            return [r[4] for r in self.requests]

    def sent(self) -> list[tuple[float, str, str, dict[str, str], int, Any]]:
        with self.lock:
            return list(self.requests)

    def start(self) -> JsonApi:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def page(self, params: dict[str, Any], if_none_match: str | None) -> Answer:
        import hashlib
        import json

        with self.lock:
            items = list(self.items)
        since = params.get("since")
        if since is not None:
            items = [i for i in items if isinstance(i, dict) and i.get("seq", 0) > float(since)]
        if self.newest_first:
            items.reverse()
        offset = int(params.get("cursor") or 0)
        page = items[offset:offset + self.page_size]
        more = offset + self.page_size < len(items)
        nxt: str | None = str(offset + self.page_size) if more else None
        if nxt is not None and self.next_style == "url":
            nxt = f"/items?cursor={nxt}" + (f"&since={since}" if since is not None else "")
        body = json.dumps({"data": page, "meta": {"next": nxt}}).encode()
        etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
        if if_none_match == etag:
            return Answer(304, {"ETag": etag})
        return Answer(200, {"Content-Type": "application/json", "ETag": etag}, body)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                import urllib.parse

                query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
                self._answer(query, None)

            def do_POST(self) -> None:  # noqa: N802
                import json

                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                self._answer(body if isinstance(body, dict) else {}, body)

            def _answer(self, params: dict[str, Any], body: Any) -> None:
                import json

                with api.lock:
                    answer = api.scripted.pop(0) if api.scripted else None
                if answer is None:
                    answer = api.page(params, self.headers.get("If-None-Match"))
                with api.lock:
                    api.requests.append((time.monotonic(), self.command, self.path, dict(self.headers.items()),
                                         answer.status, body))
                data = answer.body if isinstance(answer.body, bytes) else json.dumps(answer.body).encode()
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if answer.status != 304:
                    self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet test output
                pass

        return Handler


@pytest.fixture
def json_api() -> Iterator[JsonApi]:
    """A running JSON API, stopped after the test."""
    api = JsonApi().start()
    yield api
    api.stop()


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


# --- IMAP (dovecot) ----------------------------------------------------------------------------

IMAP_PACKAGE = "dovecot-imapd"
IMAP_USER, IMAP_PASSWORD = "support@acme.test", "imap-test-pw-5e1f"


def dovecot_binary() -> str | None:
    """The dovecot master binary from PATH or /usr/sbin (Debian's ``dovecot-core``)."""
    return shutil.which("dovecot") or shutil.which("dovecot", path="/usr/sbin:/usr/local/sbin")


@dataclass
class ImapServer:
    """A running throwaway dovecot: IMAP without TLS on 127.0.0.1, one account (passwd-file) with maildirs."""

    host: str
    port: int
    base: str
    proc: subprocess.Popen[bytes]
    username: str = IMAP_USER
    password: str = IMAP_PASSWORD

    def client(self) -> Any:
        import imaplib

        imap = imaplib.IMAP4(self.host, self.port, timeout=10)
        imap.login(self.username, self.password)
        return imap

    def create(self, mailbox: str) -> int:
        """Create ``mailbox``; its UIDVALIDITY."""
        imap = self.client()
        try:
            status, data = imap.create(mailbox)
            assert status == "OK", data
            return self.uidvalidity(mailbox, imap)
        finally:
            imap.logout()

    def recreate(self, mailbox: str) -> int:
        """Delete ``mailbox`` and create it again (its messages gone, a new UIDVALIDITY); the new UIDVALIDITY."""
        imap = self.client()
        try:
            assert imap.delete(mailbox)[0] == "OK"
            assert imap.create(mailbox)[0] == "OK"
            return self.uidvalidity(mailbox, imap)
        finally:
            imap.logout()

    def uidvalidity(self, mailbox: str, imap: Any) -> int:
        import re

        status, data = imap.status(mailbox, "(UIDVALIDITY)")
        assert status == "OK", data
        return int(re.search(rb"UIDVALIDITY (\d+)", data[0]).group(1))

    def append(self, mailbox: str, raw: bytes, received: datetime) -> int:
        """APPEND one message with that INTERNALDATE; its UID."""
        import imaplib
        import re

        imap = self.client()
        try:
            status, data = imap.append(mailbox, None, imaplib.Time2Internaldate(received), raw)
            assert status == "OK", data
            return int(re.search(rb"APPENDUID \d+ (\d+)", data[0]).group(1))
        finally:
            imap.logout()

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def mail(message_id: str | None, subject: str, *, sender: str = "alice@example.test", to: str = IMAP_USER,
         body: str = "hello", extra: str = "") -> bytes:
    """An RFC 5322 message (CRLF line ends); ``message_id=None`` leaves the header out."""
    head = f"From: Alice <{sender}>\r\nTo: {to}\r\nSubject: {subject}\r\nDate: Sat, 05 Dec 2026 10:00:00 +0000\r\n"
    head += f"Message-ID: <{message_id}>\r\n" if message_id is not None else ""
    head += extra
    return (head + "Content-Type: text/plain; charset=utf-8\r\n\r\n" + body + "\r\n").encode()


def _dovecot_config(base: str, port: int, user: str, group: str, uid: int, gid: int) -> str:
    return f"""
base_dir = {base}/run
state_dir = {base}/state
log_path = {base}/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
default_login_user = {user}
default_internal_user = {user}
default_internal_group = {group}
first_valid_uid = 1
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {base}/passwd
}}
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={base}/home/%u
}}
mail_location = maildir:~/Maildir
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
  chroot =
}}
service anvil {{
  chroot =
}}
"""


def _unprivileged() -> tuple[list[str], str, str, int, int]:
    """(command prefix, user, group, uid, gid) dovecot runs as: ``nobody`` through runuser when we are root."""
    import grp
    import pwd

    if os.geteuid() != 0:
        me = pwd.getpwuid(os.geteuid())
        return [], me.pw_name, grp.getgrgid(me.pw_gid).gr_name, me.pw_uid, me.pw_gid
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.skip("running as root and 'runuser' is missing: cannot start dovecot as an unprivileged user")
    nobody = pwd.getpwnam("nobody")
    return [runuser, "-u", "nobody", "--"], "nobody", grp.getgrgid(nobody.pw_gid).gr_name, nobody.pw_uid, nobody.pw_gid


def start_dovecot(base: str) -> ImapServer:
    """Start dovecot in ``base`` (config, sockets, state, maildirs) on a free port of 127.0.0.1, as an
    unprivileged user; skipped with a reason naming the package when dovecot is not installed."""
    binary = dovecot_binary()
    if binary is None:
        pytest.skip(f"dovecot is not installed: apt-get install {IMAP_PACKAGE} (the IMAP tests need a real server)")
    prefix, user, group, uid, gid = _unprivileged()
    port = _free_port()
    for sub in ("run", "state", "home"):
        os.makedirs(os.path.join(base, sub), exist_ok=True)
    config = os.path.join(base, "dovecot.conf")
    pathlib.Path(config).write_text(_dovecot_config(base, port, user, group, uid, gid))
    pathlib.Path(base, "passwd").write_text(f"{IMAP_USER}:{{PLAIN}}{IMAP_PASSWORD}::::::\n")
    if prefix:
        for root, dirs, files in os.walk(base):
            for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                os.chown(name, uid, gid)
    proc = subprocess.Popen([*prefix, binary, "-F", "-c", config], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    server = ImapServer("127.0.0.1", port, base, proc)
    _wait_for_greeting(server)
    return server


def _wait_for_greeting(server: ImapServer, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            log = pathlib.Path(server.base, "dovecot.log")
            detail = (server.proc.stderr.read().decode(errors="replace") if server.proc.stderr else "") + \
                (log.read_text(errors="replace") if log.exists() else "")
            raise RuntimeError(f"dovecot exited ({server.proc.returncode}): {detail[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection((server.host, server.port), timeout=2) as sock:
            if sock.recv(64).startswith(b"* OK"):
                return
        time.sleep(0.1)  # startup of a server process: nothing to wait on but its socket
    server.stop()
    raise RuntimeError(f"dovecot did not greet on port {server.port} within {timeout}s")


@pytest.fixture(scope="session")
def imap_server() -> Iterator[ImapServer]:
    """A dovecot IMAP server for the session (each xdist worker's), started when a test first needs it;
    skipped with a reason naming the package when dovecot is not installed. Tests use mailboxes of their own."""
    base = tempfile.mkdtemp(prefix="wfi-imap-")
    os.chmod(base, 0o755)
    try:
        server = start_dovecot(base)
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


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
