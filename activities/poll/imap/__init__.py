"""`mail.received` via ``imap``: messages arriving in a mailbox, polled over IMAP.

The trigger is the catalog's ``mail.received``; a deployment connection with ``via: imap`` chooses
this implementation (``manifest.yaml`` beside this file declares ``via: imap``), so the Workfile is
the same whether mail is pushed by a bridge or polled here. ``activity.py`` is the poll activity,
``_mailbox.py`` one read of the mailbox with imaplib, ``_message.py`` the payload and the cursor.
See docs/poll-contract.md.
"""

from wf_initiation._lazy import lazy_exports

__all__ = ["MailCursor", "message_payload", "parse_cursor", "poll_imap"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "poll_imap": ".activity",
    **{name: "._message" for name in ("MailCursor", "message_payload", "parse_cursor")},
})
