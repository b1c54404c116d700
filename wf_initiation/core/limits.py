"""Limits on what a sender may deliver, in one place for the client, the CLI, the ingress and the docs.

Every limit is enforced at the edge (client, CLI, ingress) and inside the activation's handlers;
docs/limits.md lists them with what happens past each.
"""

from __future__ import annotations

MAX_PAYLOAD_BYTES = 256 * 1024
"""A delivery's payload as compact UTF-8 JSON; Temporal's own payload limits are a few MiB per
workflow task, shared by everything in it. Larger content is sent by reference (URL, object key)."""

MAX_PAYLOAD_DEPTH = 64
"""Nesting of arrays and objects in a payload (the top-level value is depth 1). Deeper values
overflow recursive decoders (pydantic, json) on the worker."""
