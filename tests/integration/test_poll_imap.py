"""`mail.received` via imap against a real IMAP server: dovecot, started by the session's fixture in
a temporary directory as an unprivileged process (tests/support/pollsources.py), skipped naming the
package (dovecot-imapd) when it is not installed. Messages go in by IMAP APPEND; the password is a
secret reference resolved as on a worker started with the deployment."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio import activity
from temporalio.exceptions import ApplicationError

from tests.support.pollsources import IMAP_USER, ImapServer, activity_env, assert_payloads_conform, mail
from tests.support.waits import assert_eventually
from wf_initiation.activities.poll import (
    POLL_ACTIVITIES,
    POLL_CONFIG_INVALID,
    POLL_SOURCE_UNAVAILABLE,
    PollRequest,
    PollResponse,
    activity_name_for,
    poll_imap,
)
from wf_initiation.activities.poll._registry import load_implementation
from wf_initiation.activities.poll._runtime import LIMITS, worker_connections
from wf_initiation.activities.poll.imap import _mailbox
from wf_initiation.core._catalog import Catalog
from wf_initiation.core.connections import WorkerConnections
from wf_initiation.core.deployment import parse_deployment

CONNECTOR = "mail.received"
T0 = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)
PASSWORD_ENV = "WFI_T_IMAP_PASSWORD"


class Mailbox:
    """A mailbox of the test's own on the session's dovecot, and polls of it as a worker makes them."""

    def __init__(self, server: ImapServer, name: str, connection: dict[str, Any]) -> None:
        self.server, self.name = server, name
        dep = parse_deployment({"connections": {"inbox": connection}})
        self.sent = dep.connections["inbox"].model_dump()
        self._workers = WorkerConnections(dep.connections)

    def bound(self) -> AbstractContextManager[None]:
        return worker_connections(self._workers)

    def append(self, message_id: str | None, minute: int, **kw: Any) -> int:
        return self.server.append(self.name, mail(message_id, f"subject {message_id}", **kw), T0 + timedelta(minutes=minute))

    async def poll(self, cursor: str | None = None, *, limit: int = 500, start_to_close: float = 30.0) -> PollResponse:
        req = PollRequest(connector=CONNECTOR, config={"inbox": "support@acme.test"}, connection=self.sent,
                          cursor=cursor, limit=limit)
        with self.bound():
            return await activity_env(start_to_close).run(poll_imap, req)

    async def error(self, cursor: str | None = None, **kw: Any) -> ApplicationError:
        with pytest.raises(ApplicationError) as caught:
            await self.poll(cursor, **kw)
        assert caught.value.non_retryable and caught.value.__cause__ is None
        return caught.value


def imap_connection(server: ImapServer, box: str, **settings: Any) -> dict[str, Any]:
    return {"connector": "mail", "via": "imap", "host": server.host, "port": server.port, "security": "none",
            "username": server.username, "password": f"env:{PASSWORD_ENV}", "mailbox": box, "timeout": 10,
            **settings}


@pytest.fixture
def mailbox(imap_server: ImapServer, monkeypatch: pytest.MonkeyPatch) -> Mailbox:
    monkeypatch.setenv(PASSWORD_ENV, imap_server.password)
    name = f"T{uuid.uuid4().hex[:10]}"
    imap_server.create(name)
    return Mailbox(imap_server, name, imap_connection(imap_server, name))


def ids(response: PollResponse) -> list[str]:
    return [item.payload["message_id"] for item in response.items]


async def test_messages_are_returned_once_in_uid_order_with_the_manifests_payload(mailbox: Mailbox) -> None:
    # proves: POLL-6, POLL-5
    mailbox.append("m1@example.test", 0)
    mailbox.append("m2@example.test", 1, extra="References: <root@example.test> <m1@example.test>\r\n"
                   "Subject: =?utf-8?q?caf=C3=A9?=\r\n", to="Help Desk <help@acme.test>")
    first = await mailbox.poll()
    mailbox.append("m3@example.test", 2, extra="In-Reply-To: <m2@example.test>\r\n")
    second = await mailbox.poll(first.cursor)
    third = await mailbox.poll(second.cursor)
    assert ids(first) == ["m1@example.test", "m2@example.test"] and ids(second) == ["m3@example.test"]
    assert ids(third) == [] and third.cursor == second.cursor and first.stable_order and not first.notices
    assert first.items[0].payload == {
        "message_id": "m1@example.test", "thread_id": "m1@example.test", "account_id": IMAP_USER,
        "from": "alice@example.test", "recipient": IMAP_USER, "subject": "subject m1@example.test",
        "body": "hello\r\n", "received_at": "2026-12-05T10:00:00Z",
    }
    m2, m3 = first.items[1].payload, second.items[0].payload
    assert (m2["thread_id"], m2["recipient"], m3["thread_id"]) == ("root@example.test", "help@acme.test", "m2@example.test")
    assert_payloads_conform(CONNECTOR, [i.payload for i in first.items + second.items])


async def test_resuming_from_the_cursor_after_any_message_returns_exactly_the_ones_after_it(mailbox: Mailbox) -> None:
    # proves: POLL-8
    for n in range(5):
        mailbox.append(f"r{n}@example.test", n)
    full = await mailbox.poll()
    for k, item in enumerate(full.items):
        assert ids(await mailbox.poll(item.cursor_after)) == ids(full)[k + 1:], k
    page = await mailbox.poll(limit=2)
    assert ids(page) == ids(full)[:2] and page.more


async def test_a_poll_changes_nothing_in_the_mailbox(mailbox: Mailbox) -> None:
    mailbox.append("unread@example.test", 0)
    await mailbox.poll()
    imap = mailbox.server.client()
    try:
        imap.select(mailbox.name, readonly=True)
        status, data = imap.uid("FETCH", "1:*", "(FLAGS)")
    finally:
        imap.logout()
    assert status == "OK" and b"\\Seen" not in data[0], data


async def test_a_uidvalidity_change_is_noticed_and_resumes_from_the_last_message_taken(mailbox: Mailbox) -> None:
    # proves: POLL-9 (what was accepted comes back as the same payload: the activation's dedup absorbs it)
    for n in range(3):
        mailbox.append(f"u{n}@example.test", n)
    before = await mailbox.poll()
    old = before.items[-1].payload
    mailbox.server.recreate(mailbox.name)
    mailbox.append("u1@example.test", 1)  # restored from a backup: older than the last one taken
    mailbox.append("u2@example.test", 2)  # the last one taken, restored
    mailbox.append("u3@example.test", 3)  # new
    after = await mailbox.poll(before.cursor)
    assert ids(after) == ["u2@example.test", "u3@example.test"] and after.items[0].payload == old
    (notice,) = after.notices
    assert "UIDVALIDITY changed" in notice and mailbox.name in notice and "Message-ID" in notice
    quiet = await mailbox.poll(after.cursor)
    assert ids(quiet) == [] and quiet.notices == []
    mailbox.append("u4@example.test", 4)
    assert ids(await mailbox.poll(after.cursor)) == ["u4@example.test"]


async def test_after_a_uidvalidity_change_with_nothing_new_the_cursor_moves_to_the_new_numbering(mailbox: Mailbox) -> None:
    mailbox.append("v0@example.test", 0)
    before = await mailbox.poll()
    mailbox.server.recreate(mailbox.name)
    mailbox.append("older@example.test", -30)
    moved = await mailbox.poll(before.cursor)
    assert ids(moved) == [] and len(moved.notices) == 1 and moved.cursor != before.cursor
    assert (await mailbox.poll(moved.cursor)).notices == [], "noticed once"


async def test_a_message_without_message_id_gets_a_digest_of_its_headers_that_survives_a_rebuild(mailbox: Mailbox) -> None:
    raw_minute = 0
    mailbox.append(None, raw_minute)
    first = await mailbox.poll()
    (ident,) = ids(first)
    assert ident.startswith("sha256:") and len(ident) == len("sha256:") + 64
    mailbox.server.recreate(mailbox.name)
    mailbox.append(None, raw_minute)
    assert ids(await mailbox.poll()) == [ident]


async def test_headers_and_bodies_in_any_encoding_give_valid_unicode(mailbox: Mailbox) -> None:
    raw = (b"From: =?iso-8859-1?q?Ren=E9?= <rene@example.test>\r\nTo: support@acme.test\r\n"
           b"Subject: na\xc3\xafve \xe9t\xe9 =?utf-8?b?w6l0w6k=?=\r\nMessage-ID: <enc@example.test>\r\n"
           b"MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n"
           b"--b\r\nContent-Type: text/plain; charset=iso-8859-1\r\nContent-Transfer-Encoding: 8bit\r\n\r\n"
           b"d\xe9j\xe0 vu\r\n--b\r\nContent-Type: text/plain\r\nContent-Disposition: attachment; filename=a.txt\r\n\r\n"
           b"not the body\r\n--b--\r\n")
    mailbox.server.append(mailbox.name, raw, T0)
    (item,) = (await mailbox.poll()).items
    payload = item.payload
    assert (payload["from"], payload["body"]) == ("rene@example.test", "d\u00e9j\u00e0 vu")
    assert payload["subject"] == "na\u00efve \ufffdt\ufffd \u00e9t\u00e9", "raw bytes read as UTF-8, the rest replaced"
    assert all(not any(0xD800 <= ord(c) <= 0xDFFF for c in str(v)) for v in payload.values()), "no lone surrogate"


async def test_an_oversized_message_is_returned_as_an_invalid_stand_in(mailbox: Mailbox, monkeypatch) -> None:
    # proves: POLL-11 (the activation quarantines or holds it; never a silent skip)
    monkeypatch.setattr(_mailbox, "MAX_MESSAGE_BYTES", 64 * 1024)
    mailbox.append("big@example.test", 0, body="x" * 100_000)
    mailbox.append("small@example.test", 1)
    response = await mailbox.poll()
    big, small = response.items
    assert big.payload["message_id"] == "big@example.test" and big.payload["body"] == ""
    assert big.problem and "not read" in big.problem and small.problem is None


async def test_a_wrong_password_fails_the_poll_without_showing_it(mailbox: Mailbox, monkeypatch) -> None:
    monkeypatch.setenv(PASSWORD_ENV, "wrong-pw-7a1c")
    error = await mailbox.error()
    assert error.type == POLL_SOURCE_UNAVAILABLE and "'username' and 'password'" in error.message
    assert "wrong-pw-7a1c" not in error.message


async def test_a_mailbox_that_does_not_exist_is_an_invalid_connection(imap_server: ImapServer, monkeypatch) -> None:
    monkeypatch.setenv(PASSWORD_ENV, imap_server.password)
    missing = Mailbox(imap_server, "Nope", imap_connection(imap_server, "NoSuchBox"))
    error = await missing.error()
    assert error.type == POLL_CONFIG_INVALID and "'mailbox'" in error.message


async def test_an_unreachable_server_is_unavailable_naming_it(imap_server: ImapServer, monkeypatch) -> None:
    monkeypatch.setenv(PASSWORD_ENV, imap_server.password)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    closed = Mailbox(imap_server, "INBOX", imap_connection(imap_server, "INBOX", port=port))
    error = await closed.error()
    assert error.type == POLL_SOURCE_UNAVAILABLE and f"127.0.0.1:{port}" in error.message


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server that accepts and never answers (an IMAP server that hangs before its greeting)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


async def test_a_server_that_never_answers_ends_the_poll_at_its_deadline_and_frees_the_thread(
    imap_server: ImapServer, silent_server: int, monkeypatch
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, imap_server.password)
    hanging = Mailbox(imap_server, "INBOX", imap_connection(imap_server, "INBOX", port=silent_server, timeout=60))
    error = await hanging.error(start_to_close=3)
    assert error.type == POLL_SOURCE_UNAVAILABLE and "did not finish within" in error.message
    source = f"IMAP mailbox 'INBOX' of {IMAP_USER} at 127.0.0.1:{silent_server}"

    async def thread_freed() -> None:
        assert LIMITS.busy(source) == (0, 0)

    await assert_eventually(thread_freed, timeout=10)


@pytest.mark.parametrize(("settings", "expected"), [
    ({"host": "imap.example.com", "security": "none"}, "allowed only for a loopback host"),
    ({"security": "ssl"}, "tls, starttls or none"),
    ({"port": "143"}, "TCP port number"),
    ({"mailbox": "Boîte"}, "printable ASCII"),
    ({"username": ""}, "'username' and 'password'"),
])
async def test_a_bad_connection_is_invalid_and_names_the_setting(imap_server: ImapServer, monkeypatch, settings, expected) -> None:
    monkeypatch.setenv(PASSWORD_ENV, imap_server.password)
    bad = Mailbox(imap_server, "INBOX", imap_connection(imap_server, "INBOX", **settings))
    error = await bad.error()
    assert error.type == POLL_CONFIG_INVALID and expected in error.message


@pytest.mark.parametrize("cursor", ["{", '{"v":1,"uidvalidity":-1,"uid":0}', '{"v":1,"uid":3}', "[]"])
async def test_a_cursor_this_connector_did_not_write_is_invalid(mailbox: Mailbox, cursor: str) -> None:
    error = await mailbox.error(cursor)
    assert error.type == POLL_CONFIG_INVALID and "clear it" in error.message


def test_the_imap_manifest_names_this_activity_and_the_worker_registers_it() -> None:
    catalog = Catalog.default(third_party=False)
    polled, pushed = catalog.resolve(CONNECTOR, "imap"), catalog.get(CONNECTOR)
    assert polled is not None and pushed is not None and (pushed.kind, polled.kind) == ("external", "poll")
    assert load_implementation(polled) is poll_imap and poll_imap in POLL_ACTIVITIES
    assert activity._Definition.must_from_callable(poll_imap).name == activity_name_for(CONNECTOR) == "wfi.poll.mail.received"
