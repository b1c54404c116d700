"""Poll connectors and the poll contract they implement (see docs/poll-contract.md).

A worker registers ``POLL_ACTIVITIES``; the activation calls the activity named
``activity_name_for(manifest.name)`` with a :class:`PollRequest`.
"""

from wf_initiation.activities.poll._contract import (
    ACTIVITY_PREFIX,
    POLL_CONFIG_INVALID,
    POLL_SOURCE_UNAVAILABLE,
    PollItem,
    PollRequest,
    PollResponse,
)
from wf_initiation.activities.poll.rss import poll_rss
from wf_initiation.activities.poll.sheet import poll_sheet
from wf_initiation.activities.poll.sql import poll_sql

POLL_ACTIVITIES = [poll_rss, poll_sql, poll_sheet]
"""The built-in poll activities, for ``Worker(activities=...)``."""


def activity_name_for(connector: str) -> str:
    """The activity name of a poll connector, e.g. ``wfi.poll.rss.item_published``.

    Args:
        connector: The manifest name, e.g. ``rss.item_published``.
    """
    return ACTIVITY_PREFIX + connector


__all__ = [
    "POLL_ACTIVITIES",
    "POLL_CONFIG_INVALID",
    "POLL_SOURCE_UNAVAILABLE",
    "PollItem",
    "PollRequest",
    "PollResponse",
    "activity_name_for",
    "poll_rss",
    "poll_sheet",
    "poll_sql",
]
