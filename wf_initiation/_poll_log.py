"""One short log line per failing poll source, not one long line per attempt.

An unavailable source (a feed that does not answer, a missing database) fails its poll activity
with ``PollSourceUnavailable`` (a connection it cannot use: ``PollConfigInvalid``); the activation
backs off and polls again, and the SDK logs every
failed attempt as ``Completing activity as failed ({...activity info...}): ...``: some 600
characters, several times a minute per source while it stays down. The activation records each
failure (``wfi state``: ``polls.<entry>.failures``, ``last_error``), so the worker's log needs only
to say that a source started failing: the first failure of each source is one line naming the
workflow, the connector and the message; repeats are dropped, and one line says how many after
:data:`REMIND_AFTER` if it still fails then.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from wf_initiation.wire import ACTIVATION_ID_PREFIX, POLL_ACTIVITY_PREFIX, POLL_CONFIG_INVALID, POLL_SOURCE_UNAVAILABLE

REMIND_AFTER = 15 * 60.0
"""Seconds after which a source that still fails is logged again, with the count of failures since."""


@dataclass
class _Seen:
    since: float
    repeats: int = 0


class PollFailuresOncePerSource(logging.Filter):
    """Log filter for the SDK's activity loggers: the rule of the module docstring.

    Args:
        clock: Seconds, monotonic (tests pass their own).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._clock = clock
        self._seen: dict[tuple[str, str, str], _Seen] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        from temporalio.exceptions import ApplicationError

        exc = record.exc_info[1] if record.exc_info else None
        details = getattr(record, "temporal_activity", None) or {}
        activity_type = str(details.get("activity_type", ""))
        if not (isinstance(exc, ApplicationError) and exc.type in (POLL_SOURCE_UNAVAILABLE, POLL_CONFIG_INVALID)
                and activity_type.startswith(POLL_ACTIVITY_PREFIX)):
            return True
        workflow = str(details.get("workflow_id", "")).removeprefix(ACTIVATION_ID_PREFIX)
        connector = activity_type.removeprefix(POLL_ACTIVITY_PREFIX)
        key, now = (workflow, connector, exc.message), self._clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen.since < REMIND_AFTER:
            seen.repeats += 1
            return False
        again = f" (still failing: {seen.repeats + 1} failed polls in {int((now - seen.since) // 60)} min)" if seen else ""
        self._seen[key] = _Seen(since=now)
        record.msg, record.args, record.exc_info = f"poll of {workflow} ({connector}) failed{again}: {exc.message}", None, None
        record.exc_text = None
        return True
