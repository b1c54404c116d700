"""Limits the ingress enforces at the edge, before anything reaches Temporal.

They are the activation's own (``wf_initiation.core.limits``, where each is documented): a body the
ingress takes makes a payload the client and the activation take. An ``http.request`` payload is
the body plus an envelope (delivery id, method, path, kept headers, query), so the payload limit is
split in two: ``ENVELOPE_BYTES`` for the envelope (more is 431) and the rest, ``MAX_BODY_BYTES``,
for the body (more is 413, ``payload_too_large`` for a body whose JSON form grew past it).
"""

from __future__ import annotations

from wf_initiation.core.limits import ENVELOPE_BYTES, MAX_BODY_BYTES, MAX_INT_DIGITS, MAX_UPDATES_IN_FLIGHT
from wf_initiation.core.limits import MAX_PAYLOAD_DEPTH as MAX_JSON_DEPTH

__all__ = ["ENVELOPE_BYTES", "MAX_BODY_BYTES", "MAX_INT_DIGITS", "MAX_JSON_DEPTH", "MAX_UPDATES_IN_FLIGHT"]
