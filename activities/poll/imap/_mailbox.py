"""One poll of an IMAP mailbox with the standard library's imaplib (blocking: run on a source thread).

The mailbox is opened read-only (``EXAMINE``) and messages are fetched with ``BODY.PEEK``, so a
poll changes nothing on the server: no ``\\Seen`` flag, no expunge. Every socket operation has the
connection's ``timeout``; :meth:`MailboxRead.abort` (called from the poll's coroutine when its
deadline passes) shuts the socket down, so the thread ends instead of waiting in a read.
"""

from __future__ import annotations

import imaplib
import ipaddress
import re
import socket
import ssl
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from wf_initiation.activities.poll._budget import ResponseBuilder
from wf_initiation.activities.poll._contract import PollResponse, config_invalid, source_unavailable
from wf_initiation.activities.poll.imap._message import (
    CONNECTOR,
    MailCursor,
    Rescan,
    instant_text,
    internaldate,
    message_payload,
    parse_instant,
)

MAX_MESSAGE_BYTES = 10 * 1024 * 1024
"""A message larger than this (RFC822.SIZE, attachments included) is not read: its header makes a
stand-in that the activation quarantines (or holds)."""
MAX_POLL_BYTES = 32 * 1024 * 1024
"""Message bytes one poll reads; past it the poll stops after the message that passed it (``more``)."""
META_CHUNK = 200
_UID = re.compile(rb"\bUID (\d+)")
_SIZE = re.compile(rb"\bRFC822\.SIZE (\d+)")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
Security = Literal["tls", "starttls", "none"]


@dataclass(frozen=True)
class ImapSettings:
    """The connection's settings, checked, with the password resolved."""

    host: str
    port: int
    security: Security
    username: str
    password: str
    mailbox: str
    timeout: float
    inbox: str

    @property
    def source(self) -> str:
        """The mailbox, for messages and the per-source bounds (never the password)."""
        return f"IMAP mailbox {self.mailbox!r} of {self.username} at {self.host}:{self.port}"


def imap_settings(connection: dict[str, Any], inbox: str, timeout: float) -> ImapSettings:
    """The connection's IMAP settings (PollConfigInvalid naming the key that is wrong)."""
    host = connection.get("host")
    if not isinstance(host, str) or not host or any(c in host for c in "/@ \r\n"):
        raise config_invalid(f"{CONNECTOR}: an IMAP connection needs 'host', the server's name or address")
    security = connection.get("security", "tls")
    if security not in ("tls", "starttls", "none"):
        raise config_invalid(f"{CONNECTOR}: connection 'security' must be tls, starttls or none, got {security!r}")
    if security == "none" and not _loopback(host):
        raise config_invalid(
            f"{CONNECTOR}: security: none would send the password unencrypted to {host}; it is allowed only for a "
            "loopback host (a local bridge or test server): use tls (port 993) or starttls (port 143)"
        )
    port = connection.get("port", 993 if security == "tls" else 143)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise config_invalid(f"{CONNECTOR}: connection 'port' must be a TCP port number, got {port!r}")
    username, password = connection.get("username"), connection.get("password")
    if not isinstance(username, str) or not username or not isinstance(password, str):
        raise config_invalid(
            f"{CONNECTOR}: an IMAP connection needs 'username' and 'password' (a reference: password: env:NAME)")
    mailbox = connection.get("mailbox", "INBOX")
    if not isinstance(mailbox, str) or not mailbox or not mailbox.isascii() or not mailbox.isprintable():
        raise config_invalid(
            f"{CONNECTOR}: connection 'mailbox' must be a mailbox name in printable ASCII (a name with other "
            f"characters is written in IMAP's modified UTF-7, as the server lists it), got {str(mailbox)[:80]!r}"
        )
    return ImapSettings(host=host, port=port, security=security, username=username, password=password,
                        mailbox=mailbox, timeout=timeout, inbox=inbox)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class MailboxRead:
    """One poll of the mailbox: ``read()`` on a source thread, ``abort()`` from the poll's coroutine."""

    def __init__(self, settings: ImapSettings, cursor: MailCursor | None, request_cursor: str | None, limit: int) -> None:
        self.settings, self.cursor, self.request_cursor, self.limit = settings, cursor, request_cursor, limit
        self._imap: imaplib.IMAP4 | None = None
        self._aborted = False

    def abort(self) -> None:
        self._aborted = True
        if self._imap is not None:
            try:
                self._imap.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __call__(self) -> PollResponse:
        try:
            imap = self._connect()
            try:
                return self._read(imap)
            finally:
                _logout(imap)
        except TimeoutError:
            raise source_unavailable(
                f"{CONNECTOR}: {self.settings.source} did not answer within {self.settings.timeout:g}s (the "
                "connection's 'timeout', or the poll's deadline); polling retries with backoff") from None
        except (OSError, ssl.SSLError, imaplib.IMAP4.abort, EOFError) as exc:
            raise source_unavailable(
                f"{CONNECTOR}: {self.settings.source} could not be reached or dropped the connection "
                f"({type(exc).__name__}: {exc}); check the connection's host, port and security, polling retries "
                "with backoff") from None

    def _connect(self) -> imaplib.IMAP4:
        s = self.settings
        if s.security == "tls":
            imap: imaplib.IMAP4 = imaplib.IMAP4_SSL(s.host, s.port, ssl_context=ssl.create_default_context(),
                                                    timeout=s.timeout)
        else:
            imap = imaplib.IMAP4(s.host, s.port, timeout=s.timeout)
        self._imap = imap
        if s.security == "starttls":
            imap.starttls(ssl.create_default_context())
        return imap

    def _read(self, imap: imaplib.IMAP4) -> PollResponse:
        s = self.settings
        try:
            imap.login(s.username, s.password)
        except imaplib.IMAP4.error as exc:
            raise source_unavailable(
                f"{CONNECTOR}: {s.source} refused the login ({_text(exc)}); check the connection's 'username' and "
                "'password', polling retries with backoff") from None
        validity, uidnext = self._examine(imap)
        state, notices = self._resume(validity, uidnext)
        uids = self._candidates(imap, state)
        return self._collect(imap, state, uids, uidnext, notices)

    def _examine(self, imap: imaplib.IMAP4) -> tuple[int, int]:
        status, data = imap.select(_quoted(self.settings.mailbox), readonly=True)
        if status != "OK":
            raise config_invalid(
                f"{CONNECTOR}: {self.settings.source} cannot be opened ({_first(data)}); fix the connection's "
                "'mailbox' (default INBOX)")
        validity = _number(imap.response("UIDVALIDITY")[1])
        uidnext = _number(imap.response("UIDNEXT")[1])
        if validity is None:
            raise source_unavailable(f"{CONNECTOR}: {self.settings.source} gave no UIDVALIDITY; polling retries with backoff")
        return validity, uidnext or 0

    def _resume(self, validity: int, uidnext: int) -> tuple[MailCursor, list[str]]:
        """Where this poll starts in the mailbox's numbering, and the notice of a UIDVALIDITY change."""
        old = self.cursor
        if old is None:
            return MailCursor(uidvalidity=validity, uid=0), []
        if old.uidvalidity == validity:
            return old, []
        through = max(uidnext - 1, 0)
        rescan = Rescan(through=through, before=old.since) if old.since is not None else None
        taken = (f"messages received at or after {old.since} (the last one taken) are read again and those already "
                 "accepted are recognised by their Message-ID (duplicate, no second run); older ones count as seen"
                 if old.since else "no message had been taken, so every message of the mailbox is read")
        notice = (f"{self.settings.source}: UIDVALIDITY changed from {old.uidvalidity} to {validity}, so its UIDs were "
                  f"renumbered (the mailbox was rebuilt, restored or replaced): {taken}")
        return MailCursor(uidvalidity=validity, uid=0, since=old.since, rescan=rescan), [notice]

    def _candidates(self, imap: imaplib.IMAP4, state: MailCursor) -> list[int]:
        """UIDs after the cursor that may be new, in increasing order (older ones of a rescan are
        pre-filtered by the server by day, then by instant in :meth:`_collect`)."""
        rescan = state.rescan
        if rescan is not None and state.uid < rescan.through:
            day = parse_instant(rescan.before) - timedelta(days=1)
            found = self._search(imap, "UID", f"{state.uid + 1}:{rescan.through}", "SINCE", _imap_date(day))
            found += self._search(imap, "UID", f"{rescan.through + 1}:*")
        else:
            found = self._search(imap, "UID", f"{state.uid + 1}:*")
        return sorted({uid for uid in found if uid > state.uid})

    def _search(self, imap: imaplib.IMAP4, *criteria: str) -> list[int]:
        status, data = imap.uid("SEARCH", *criteria)
        if status != "OK":
            raise source_unavailable(f"{CONNECTOR}: {self.settings.source} refused a search ({_first(data)}); "
                                     "polling retries with backoff")
        return [int(n) for n in b" ".join(d for d in data if isinstance(d, bytes)).split() if n.isdigit()]

    def _collect(self, imap: imaplib.IMAP4, state: MailCursor, uids: list[int], uidnext: int,
                 notices: list[str]) -> PollResponse:
        builder = ResponseBuilder(self.request_cursor, limit=self.limit)
        taken, more = uids[: self.limit], len(uids) > self.limit
        meta = self._metadata(imap, taken)
        passed, read = state.uid, 0
        before = parse_instant(state.rescan.before) if state.rescan is not None else None
        for uid in taken:
            if self._aborted:  # the poll's deadline passed: nobody waits for this result
                raise source_unavailable(f"{CONNECTOR}: {self.settings.source}: the poll was abandoned at its deadline")
            if uid not in meta:  # not there any more: expunged since the search
                continue
            size, at = meta[uid]
            if before is not None and state.rescan is not None and uid <= state.rescan.through and at < before:
                passed = uid  # there before the renumbering and older than the last message taken: seen
                continue
            if read and read + size > MAX_POLL_BYTES:
                more = True
                break
            item, problem = self._message(imap, uid, size, at)
            read += min(size, MAX_MESSAGE_BYTES)
            after = MailCursor(state.uidvalidity, uid, since=instant_text(at), rescan=state.rescan)
            if not builder.add(item, after.encode(), id_field="message_id", problem=problem):
                more = True
                break
            passed = uid
        if not more:
            passed = max(passed, uidnext - 1)
        end = MailCursor(state.uidvalidity, passed, since=state.since, rescan=state.rescan)
        response = builder.response(more=more, empty_cursor=end.encode())
        return response.model_copy(update={"notices": notices}) if notices else response

    def _metadata(self, imap: imaplib.IMAP4, uids: list[int]) -> dict[int, tuple[int, datetime]]:
        """UID -> (size, INTERNALDATE) of those still in the mailbox."""
        out: dict[int, tuple[int, datetime]] = {}
        for start in range(0, len(uids), META_CHUNK):
            chunk = ",".join(str(u) for u in uids[start:start + META_CHUNK])
            status, data = imap.uid("FETCH", chunk, "(UID RFC822.SIZE INTERNALDATE)")
            if status != "OK":
                raise source_unavailable(f"{CONNECTOR}: {self.settings.source} refused a fetch ({_first(data)}); "
                                         "polling retries with backoff")
            for line in data:
                head = line[0] if isinstance(line, tuple) else line
                uid, size, at = _UID.search(head or b""), _SIZE.search(head or b""), internaldate(head or b"")
                if uid and size and at:
                    out[int(uid.group(1))] = (int(size.group(1)), at)
        return out

    def _message(self, imap: imaplib.IMAP4, uid: int, size: int, at: datetime) -> tuple[dict[str, Any], str | None]:
        """The message's payload, and the problem that keeps it from starting a run (too big), if any."""
        big = size > MAX_MESSAGE_BYTES
        raw = self._fetch(imap, uid, "BODY.PEEK[HEADER]" if big else "BODY.PEEK[]")
        payload = message_payload(raw, received=at, inbox=self.settings.inbox, account=self.settings.username)
        if not big:
            return payload, None
        return payload, (f"the message is {size:,} bytes; messages over {MAX_MESSAGE_BYTES:,} bytes (attachments "
                         "included) are not read (docs/limits.md): it is kept out, and the cursor moves past it once "
                         "it is quarantined")

    def _fetch(self, imap: imaplib.IMAP4, uid: int, what: str) -> bytes:
        status, data = imap.uid("FETCH", str(uid), f"({what})")
        literal = next((part[1] for part in data if isinstance(part, tuple) and len(part) > 1), None)
        if status != "OK" or not isinstance(literal, bytes):
            raise source_unavailable(f"{CONNECTOR}: {self.settings.source} did not return message UID {uid} "
                                     f"({_first(data)}); polling retries with backoff")
        return literal


def _quoted(mailbox: str) -> str:
    return '"' + mailbox.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _imap_date(at: datetime) -> str:
    return f"{at.day:02d}-{_MONTHS[at.month - 1]}-{at.year:04d}"


def _number(values: list[Any] | None) -> int | None:
    value = (values or [None])[0]
    text = value.decode() if isinstance(value, bytes) else value
    return int(text) if isinstance(text, str) and text.strip().isdigit() else None


def _first(data: Any) -> str:
    value = (data or [b""])[0]
    text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return text[:200] or "no detail"


def _text(exc: Exception) -> str:
    return str(exc)[:200] or type(exc).__name__


def _logout(imap: imaplib.IMAP4) -> None:
    try:
        imap.logout()
    except (OSError, imaplib.IMAP4.error, EOFError):  # the connection is going away either way
        pass
