"""Limits the ingress enforces at the edge, before anything reaches Temporal.

The shared ones are the activation's own (``wf_initiation.core.limits``): a body the ingress takes
makes a payload the client and the activation take. ``MAX_BODY_BYTES`` is the payload limit; the
request envelope (method, path, kept headers, query) adds a little, and a payload over the client's
limit is still answered 413.
"""

from __future__ import annotations

from wf_initiation.core.limits import MAX_DELIVERY_BYTES, MAX_INT_DIGITS, MAX_PAYLOAD_DEPTH

MAX_BODY_BYTES = MAX_DELIVERY_BYTES
MAX_JSON_DEPTH = MAX_PAYLOAD_DEPTH
__all__ = ["MAX_BODY_BYTES", "MAX_INT_DIGITS", "MAX_JSON_DEPTH", "MAX_UPDATES_IN_FLIGHT"]
# Temporal admits 10 updates in flight per workflow (history.maxInFlightUpdates); the ingress keeps
# below it so that its own callers are queued here, not refused and retried by the server.
MAX_UPDATES_IN_FLIGHT = 10
