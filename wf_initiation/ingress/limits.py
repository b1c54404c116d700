"""Limits the ingress enforces at the edge, before anything reaches Temporal.

The shared ones are the activation's own (``wf_initiation.core.limits``): a body the ingress takes
makes a payload the client and the activation take. An ``http.request`` payload is the body plus an
envelope (delivery id, method, path, kept headers, query), so the payload limit is split in two:
``ENVELOPE_BYTES`` for the envelope (more is 431) and the rest, ``MAX_BODY_BYTES``, for the body.
A body at its limit under an envelope within its own then always makes a payload within the
payload limit, as long as the body's JSON form is no longer than the body: true of JSON bodies
(re-serialised compactly, without whitespace) except for numbers in exponent form (``1e9`` is
``1000000000.0``); text and form bodies count with their JSON escapes. Past that the payload is
answered 413 (``payload_too_large``).
"""

from __future__ import annotations

from wf_initiation.core.limits import KIB, MAX_DELIVERY_BYTES, MAX_INT_DIGITS, MAX_PAYLOAD_DEPTH

ENVELOPE_BYTES = 16 * KIB
"""The JSON of an ``http.request`` payload without its body: 431 past it."""
MAX_BODY_BYTES = MAX_DELIVERY_BYTES - ENVELOPE_BYTES
"""A request body, as sent and as decoded from its content coding: 413 past it (245,760 bytes)."""
MAX_JSON_DEPTH = MAX_PAYLOAD_DEPTH
__all__ = ["ENVELOPE_BYTES", "MAX_BODY_BYTES", "MAX_INT_DIGITS", "MAX_JSON_DEPTH", "MAX_UPDATES_IN_FLIGHT"]
# Temporal admits 10 updates in flight per workflow (history.maxInFlightUpdates); the ingress keeps
# below it so that its own callers are queued here, not refused and retried by the server.
MAX_UPDATES_IN_FLIGHT = 10
