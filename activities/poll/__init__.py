"""Poll connectors and the poll contract they implement (see docs/poll-contract.md).

Each built-in connector is a folder of its own: ``rss/``, ``sql/``, ``sheet/``, ``http_json/``, ``imap/``
(``mail.received`` polled over IMAP, chosen by a connection's ``via: imap``), each holding its
``manifest.yaml`` (read by the pure catalog, :mod:`wf_initiation.core._catalog`) and its activity.
The manifest's ``implementation`` (``module:function``) names the activity; :func:`poll_activities`
resolves those of every poll manifest in a catalog, which is how ``WfiPlugin`` registers the
built-ins and any third-party connector installed through the ``wf_initiation.connectors`` entry
points. The activation calls the activity named ``activity_name_for(manifest.name)`` with a
:class:`PollRequest`.

A third-party connector can build on the same pieces: :func:`run_poll` (secret references resolved,
a deadline below the activity's start-to-close, every error redacted) and :class:`ResponseBuilder`
(the response and item byte budgets). Importing this package imports nothing heavy (names resolve on first use), so that the catalog can
read the manifests in the connector folders without importing Temporal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wf_initiation._lazy import lazy_exports

if TYPE_CHECKING:
    from wf_initiation.activities.poll._budget import MAX_ITEM_BYTES, MAX_RESPONSE_BYTES, ResponseBuilder
    from wf_initiation.activities.poll._contract import (
        POLL_CONFIG_INVALID,
        POLL_SOURCE_UNAVAILABLE,
        PollItem,
        PollRequest,
        PollResponse,
        activity_name_for,
    )
    from wf_initiation.activities.poll._registry import POLL_ACTIVITIES, poll_activities
    from wf_initiation.activities.poll._runtime import run_poll
    from wf_initiation.activities.poll.http_json.activity import poll_http_json
    from wf_initiation.activities.poll.imap.activity import poll_imap
    from wf_initiation.activities.poll.rss.activity import poll_rss
    from wf_initiation.activities.poll.sheet.activity import poll_sheet
    from wf_initiation.activities.poll.sql.activity import poll_sql

__all__ = [
    "MAX_ITEM_BYTES",
    "MAX_RESPONSE_BYTES",
    "POLL_ACTIVITIES",
    "POLL_CONFIG_INVALID",
    "POLL_SOURCE_UNAVAILABLE",
    "PollItem",
    "PollRequest",
    "PollResponse",
    "ResponseBuilder",
    "activity_name_for",
    "poll_activities",
    "poll_http_json",
    "poll_imap",
    "poll_rss",
    "poll_sheet",
    "poll_sql",
    "run_poll",
]

__getattr__, __dir__ = lazy_exports(__name__, {
    **{name: "._contract" for name in ("POLL_CONFIG_INVALID", "POLL_SOURCE_UNAVAILABLE", "PollItem", "PollRequest",
                                       "PollResponse", "activity_name_for")},
    **{name: "._registry" for name in ("POLL_ACTIVITIES", "poll_activities")},
    **{name: "._budget" for name in ("MAX_ITEM_BYTES", "MAX_RESPONSE_BYTES", "ResponseBuilder")},
    "run_poll": "._runtime",
    "poll_http_json": ".http_json.activity",
    "poll_imap": ".imap.activity",
    "poll_rss": ".rss.activity",
    "poll_sheet": ".sheet.activity",
    "poll_sql": ".sql.activity",
})
