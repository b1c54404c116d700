"""Limits the ingress enforces at the edge, before anything reaches Temporal.

They match the activation's own limits: a body the ingress accepts must make a payload the client
and the activation accept. ``MAX_BODY_BYTES`` is the client's payload limit
(``wf_initiation.wire.MAX_DELIVERY_BYTES``, 256 KiB): the request envelope (method, path, kept
headers, query) adds a little, and a payload over the client's limit is still answered 413.
``MAX_JSON_DEPTH`` must equal the engine's nesting limit once ``wf_initiation.core.limits`` lands
(issue 13 note: the engine helper defines it); until then it lives here.
"""

from __future__ import annotations

from wf_initiation.wire import MAX_DELIVERY_BYTES

MAX_BODY_BYTES = MAX_DELIVERY_BYTES
MAX_JSON_DEPTH = 64
# Temporal admits 10 updates in flight per workflow (history.maxInFlightUpdates); the ingress keeps
# below it so that its own callers are queued here, not refused and retried by the server.
MAX_UPDATES_IN_FLIGHT = 10
