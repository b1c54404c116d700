"""The `mail.received` poll activity over IMAP: messages after the cursor's UID, oldest UID first.

The connection (``via: imap``) gives the server (``host``, ``port``, ``security``), the account
(``username``, ``password`` as a secret reference), the ``mailbox`` (default INBOX) and a
``timeout``; the trigger's ``inbox`` is the recipient of a message that names none. imaplib is
blocking, so the read runs on a source thread (``_runtime.LIMITS``), its socket shut down when the
poll's deadline passes.
"""

from __future__ import annotations

from typing import Any

from temporalio import activity

from wf_initiation.activities.poll._contract import PollRequest, PollResponse, activity_name_for, config_invalid, require_str
from wf_initiation.activities.poll._runtime import LIMITS, run_poll
from wf_initiation.activities.poll.imap._mailbox import MailboxRead, imap_settings
from wf_initiation.activities.poll.imap._message import CONNECTOR, parse_cursor
from wf_initiation.core.connections import ResolvedConnection

DEFAULT_TIMEOUT_S = 30.0


@activity.defn(name=activity_name_for(CONNECTOR))
async def poll_imap(req: PollRequest) -> PollResponse:
    """Return the messages after the cursor, in UID order (a UIDVALIDITY change is a notice).

    Raises:
        ApplicationError: ``PollSourceUnavailable`` when the server cannot be reached, refuses the login
            or does not answer in time; ``PollConfigInvalid`` for a bad connection, mailbox or cursor.
    """
    return await run_poll(req, _poll, cap=lambda conn: timeout_of(conn.settings))


async def _poll(req: PollRequest, connection: ResolvedConnection, deadline: float) -> PollResponse:
    inbox = require_str(req.config, "inbox", CONNECTOR)
    settings = imap_settings(connection.settings, inbox, min(deadline, timeout_of(connection.settings)))
    read = MailboxRead(settings, parse_cursor(req.cursor), req.cursor, req.limit)
    with LIMITS.poll(settings.source, CONNECTOR):
        return await LIMITS.run_blocking(settings.source, read, abort=read.abort)


def timeout_of(connection: dict[str, Any]) -> float:
    """The connection's ``timeout``: seconds each network operation, and the whole poll, may take (default 30)."""
    timeout = connection.get("timeout", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise config_invalid(f"{CONNECTOR}: connection 'timeout' must be a positive number of seconds")
    return float(timeout)
