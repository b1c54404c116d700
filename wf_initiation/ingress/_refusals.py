"""Refusals the ingress counts and logs quietly, and the one a slow body raises: no web framework here
(the receiver, ``_receiver``, and the connection guards, ``_connections``, share them)."""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from typing import Any

from wf_initiation.errors import InvalidInput

LOG_INTERVAL = 60.0
"""Seconds between two log lines about one kind of refusal."""


class BodyTooSlow(InvalidInput):
    """The request body did not arrive at the minimum rate (raised from ``receive``)."""


class RefusalLog:
    """Counts refusals by kind and logs each kind at most once per ``interval`` seconds, with the
    count since its last line. Kinds must come from a fixed few (never the sender's text): each is
    remembered."""

    def __init__(self, logger: logging.Logger, counter: Any = None, *, interval: float = LOG_INTERVAL,
                 clock: Callable[[], float] = time.monotonic, what: str = "connections refused",
                 metric: str = "wfi_ingress_connections_refused_total"):
        self.logger, self.counter, self.interval, self.clock = logger, counter, interval, clock
        self.what, self.metric = what, metric
        self._pending: collections.Counter[str] = collections.Counter()
        self._logged: dict[str, float] = {}

    def note(self, kind: str, detail: str) -> None:
        if self.counter is not None:
            self.counter.labels(kind).inc()
        self._pending[kind] += 1
        now, last = self.clock(), self._logged.get(kind)
        if last is not None and now - last < self.interval:
            return
        count = self._pending.pop(kind)
        since = "" if last is None else f" in the last {now - last:.0f}s"
        self.logger.warning("%s (%s): %d%s, the latest: %s; this kind is logged at most once every %gs (metric %s)",
                            self.what, kind, count, since, detail, self.interval, self.metric)
        self._logged[kind] = now
