"""Limits on what a sender may deliver, in one place for the client, the CLI, the ingress and the docs.

Every limit is enforced at the edge (client, CLI, ingress) and inside the activation's handlers;
docs/limits.md lists them with what happens past each. (The CLI's subset of the module the engine
work brings; names and values are the same.)
"""

from __future__ import annotations

KIB = 1024

MAX_DELIVERY_BYTES = 256 * KIB
"""One payload, as compact JSON. Past it: refused by the client; ``invalid`` in the handler."""
MAX_PAYLOAD_DEPTH = 64
"""Nesting of objects and arrays in one payload (``{"a": 1}`` is 1). Past it: ``invalid``. The
pydantic data converter cannot decode ~200 levels at all, and a payload is wrapped a few levels
deeper in run inputs and the carried state."""
MAX_INT_DIGITS = 1000
"""Decimal digits of one integer in a payload. Past it: ``invalid`` (no JSON peer reads it)."""
