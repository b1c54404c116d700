"""A mail message as a `mail.received` payload, and the IMAP cursor (no I/O).

**Payload** (the ``mail.received`` manifest's schema): ``message_id`` (the ``Message-ID`` header
without its angle brackets; a message without one gets ``sha256:`` and the digest of its header
block, which stays the same when the mailbox is rebuilt), ``thread_id`` (the first id of
``References``, else ``In-Reply-To``, else the message's own id: the thread's root as the messages
name it), ``from`` (the first address of ``From``), ``recipient`` (the first address of
``Delivered-To``, else ``To``, else ``Cc``, else the trigger's ``inbox``), ``subject`` (decoded),
``body`` (the first ``text/plain`` part that is no attachment, decoded; else the first
``text/html``; else empty), ``received_at`` (the IMAP INTERNALDATE, UTC) and ``account_id`` (the
connection's ``username``). Nothing in it depends on UIDs or flags, so the same message read again
under a new UIDVALIDITY is the same payload: a ``duplicate``, never a second run.

**Cursor** ``{"v": 1, "uidvalidity": V, "uid": U, "since": T, "rescan": {"through": R, "before": B}}``:
the mailbox's UIDVALIDITY, the last UID passed, and the INTERNALDATE of the last message returned.
When the mailbox's UIDVALIDITY is no longer ``V`` its UIDs mean nothing: the poll records a notice
and starts over in the new numbering, taking the messages that were already there (UID up to ``R``)
only when received at or after ``B`` (the old cursor's ``since``), and every later one.
"""

from __future__ import annotations

import codecs
import email
import email.errors
import email.policy
import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.header import decode_header
from email.message import Message
from email.utils import getaddresses
from typing import Any

from wf_initiation.activities.poll._contract import config_invalid, decode_cursor, encode_cursor

CONNECTOR = "mail.received"
_ID = re.compile(r"<([^<>\s]+)>")
_INTERNALDATE = re.compile(rb'INTERNALDATE "\s?(\d{1,2})-([A-Za-z]{3})-(\d{4}) (\d\d):(\d\d):(\d\d) ([+-])(\d\d)(\d\d)"')
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                       "Dec"), start=1)}
_INSTANT = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class Rescan:
    """After a UIDVALIDITY change: messages up to UID ``through`` count only if received at or after ``before``."""

    through: int
    before: str


@dataclass(frozen=True)
class MailCursor:
    """Where a poll of the mailbox resumes (see the module docstring)."""

    uidvalidity: int
    uid: int
    since: str | None = None
    rescan: Rescan | None = None

    def encode(self) -> str:
        value: dict[str, Any] = {"v": 1, "uidvalidity": self.uidvalidity, "uid": self.uid, "since": self.since}
        if self.rescan is not None and self.uid < self.rescan.through:
            value["rescan"] = {"through": self.rescan.through, "before": self.rescan.before}
        return encode_cursor(value)


def parse_cursor(cursor: str | None) -> MailCursor | None:
    """The cursor (None: nothing read yet); PollConfigInvalid for one this connector did not write."""
    if cursor is None:
        return None
    value = decode_cursor(CONNECTOR, cursor)
    try:
        if not isinstance(value, dict) or value.get("v") != 1:
            raise ValueError
        validity, uid, since = value["uidvalidity"], value["uid"], value.get("since")
        if not _count(validity) or not _count(uid) or (since is not None and not _instant(since)):
            raise ValueError
        rescan = value.get("rescan")
        if rescan is not None:
            if not isinstance(rescan, dict) or not _count(rescan.get("through")) or not _instant(rescan.get("before")):
                raise ValueError
            rescan = Rescan(through=rescan["through"], before=rescan["before"])
        return MailCursor(uidvalidity=validity, uid=uid, since=since, rescan=rescan)
    except (KeyError, ValueError):
        raise config_invalid(
            f"cursor {cursor[:80]!r} is not a {CONNECTOR} (IMAP) cursor; clear it to read the whole mailbox, or set "
            '{"v": 1, "uidvalidity": V, "uid": U} to start after UID U of that UIDVALIDITY'
        ) from None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**32


def _instant(value: Any) -> bool:
    try:
        return isinstance(value, str) and datetime.strptime(value, _INSTANT) is not None
    except ValueError:
        return False


def internaldate(fetched: bytes) -> datetime | None:
    """The INTERNALDATE in one FETCH response line, as an aware UTC instant."""
    found = _INTERNALDATE.search(fetched)
    if found is None:
        return None
    day, month, year, hh, mm, ss, sign, zh, zm = (g.decode() for g in found.groups())
    if month.capitalize() not in _MONTHS:
        return None
    offset = timedelta(hours=int(zh), minutes=int(zm)) * (1 if sign == "+" else -1)
    local = datetime(int(year), _MONTHS[month.capitalize()], int(day), int(hh), int(mm), int(ss), tzinfo=UTC)
    return local - offset


def instant_text(at: datetime) -> str:
    return at.astimezone(UTC).strftime(_INSTANT)


def parse_instant(text: str) -> datetime:
    return datetime.strptime(text, _INSTANT).replace(tzinfo=UTC)


def message_payload(raw: bytes, *, received: datetime, inbox: str, account: str) -> dict[str, Any]:
    """The payload of one message (``raw``: the message as fetched, or only its header block)."""
    message = email.message_from_bytes(raw, policy=email.policy.compat32)
    # Headers are read from their own text: raw 8-bit bytes as UTF-8 (RFC 6532), anything else replaced.
    headers = email.message_from_string(header_block(raw).decode("utf-8", "replace") + "\n\n",
                                        policy=email.policy.compat32)
    own = first_id(headers.get("Message-ID")) or "sha256:" + hashlib.sha256(header_block(raw)).hexdigest()
    references = _ID.findall(decoded(headers.get("References")))
    payload = {
        "message_id": own,
        "thread_id": (references[0] if references else None) or first_id(headers.get("In-Reply-To")) or own,
        "account_id": account,
        "from": first_address(headers, "From") or "",
        "recipient": first_address(headers, "Delivered-To") or first_address(headers, "To")
        or first_address(headers, "Cc") or inbox,
        "subject": decoded(headers.get("Subject")),
        "body": body_text(message),
        "received_at": instant_text(received),
    }
    return {key: text(value) for key, value in payload.items()}


def text(value: str) -> str:
    """``value`` as valid Unicode: raw 8-bit header bytes (which the parser keeps as lone surrogates)
    read as UTF-8, what is not UTF-8 replaced (U+FFFD), so no payload carries a lone surrogate."""
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def header_block(raw: bytes) -> bytes:
    """The message's header section, as stored (up to the first empty line)."""
    for separator in (b"\r\n\r\n", b"\n\n"):
        end = raw.find(separator)
        if end >= 0:
            return raw[:end]
    return raw


def first_id(value: Any) -> str | None:
    """The first ``<id>`` of a Message-ID-like header, without its brackets (or the bare value)."""
    if value is None:
        return None
    found_text = decoded(value).strip()
    found = _ID.search(found_text)
    return found.group(1) if found else (found_text.split()[0] if found_text else None)


def first_address(message: Message, header: str) -> str | None:
    values = [decoded(v) for v in message.get_all(header) or []]
    return next((address for _, address in getaddresses(values) if address), None)


def decoded(value: Any) -> str:
    """A header's text with its RFC 2047 encoded words decoded by their charset (what does not decode
    is replaced, U+FFFD)."""
    if value is None:
        return ""
    raw = text(str(value))
    if "=?" not in raw:  # no encoded word: the text as it is
        return raw
    try:
        parts = decode_header(raw)
    except (LookupError, UnicodeError, ValueError, email.errors.HeaderParseError):
        return raw
    return "".join(_chunk(chunk, charset) for chunk, charset in parts)


def _chunk(chunk: bytes | str, charset: str | None) -> str:
    if isinstance(chunk, str):
        return text(chunk)
    # decode_header gives the text between encoded words back in raw-unicode-escape (as make_header reads it).
    return chunk.decode(_known(charset) if charset else "raw-unicode-escape", errors="replace")


def _known(charset: str | None) -> str:
    try:
        return codecs.lookup(charset).name if charset and charset != "unknown-8bit" else "utf-8"
    except LookupError:
        return "utf-8"


def body_text(message: Message) -> str:
    """The first ``text/plain`` part that is no attachment, else the first ``text/html``, decoded by its charset."""
    parts = [p for p in message.walk() if not p.is_multipart() and not _attachment(p)]
    for kind in ("text/plain", "text/html"):
        part = next((p for p in parts if p.get_content_type() == kind), None)
        if part is not None:
            data = part.get_payload(decode=True)
            if isinstance(data, bytes):
                return data.decode(_charset(part), errors="replace")
    return ""


def _attachment(part: Message) -> bool:
    return str(part.get("Content-Disposition") or "").strip().lower().startswith("attachment")


def _charset(part: Message) -> str:
    return _known(part.get_content_charset())
