"""Error types on the wire: every ``ApplicationError(type=...)`` raised and every place that recognises one.

A caller tells failures apart by these types (``exc.cause.type``), never by message text.
"""

from __future__ import annotations

from wf_initiation.errors import WfiError

INVALID_ARGUMENT = "InvalidArgument"
"""An update's argument cannot be decoded or is not acceptable (the update is rejected)."""
HANDLER_FAILED = "HandlerFailed"
"""An update handler failed on a valid argument (a defect): the update fails, the activation lives on."""
REBINDING = "Rebinding"
"""The activation is being replaced by a re-activation, or its run by the next (continue-as-new):
retry the call (``WfiClient`` does)."""
NO_ACTIVATION = "NoActivation"
"""``wait_for`` named a workflow that has no running activation."""
SUBSCRIPTION_REFUSED = "SubscriptionRefused"
"""``wait_for`` named a trigger the activation does not have (no such external or poll entry)."""
MISROUTED = "Misrouted"
"""A delivery reached a shard of a sharded activation that does not take its delivery id (a stale
routing): nothing was recorded; ask shard 0's ``routing`` query again and send it to its shard."""
CONSULT_PARENT = "ConsultParent"
"""A delivery reached a shard created by a split while its parent may still hold the id: nothing was
recorded; send it again with the parent's ``split_lookup`` answer as ``prior`` (``WfiClient`` does)."""
UNENCODED = "Unencoded"
"""A delivery reached the activation without the team's payload codec (plaintext) and the deployment
refuses such deliveries (``temporal.unencoded: refuse``): nothing was recorded; send it again
through the team's codec (docs/wire.md, "Payload encoding")."""
ECHO_RUN_FAILED = "EchoRunFailed"
"""The sample run ``wfi.EchoRun`` was asked to fail by its payload."""
POLL_SOURCE_UNAVAILABLE = "PollSourceUnavailable"
"""Poll activities: the source failed (HTTP error or timeout, database unreachable, file missing)."""
POLL_CONFIG_INVALID = "PollConfigInvalid"
"""Poll activities: the configuration, connection or cursor cannot be used; polling again will not help."""


class StaleActivationError(WfiError, RuntimeError):
    """Raised in the activation workflow to fail a workflow activation the SDK built at a stale time
    (workflows/_fresh.py). Not an ApplicationError: it fails the activation (the worker evicts and
    replays the run), never the workflow. A query that came with it fails with a failure of type
    ``STALE_ACTIVATION`` (the SDK names an exception's failure after its class), which clients
    recognise and retry."""


STALE_ACTIVATION = StaleActivationError.__name__

__all__ = [
    "CONSULT_PARENT", "ECHO_RUN_FAILED", "HANDLER_FAILED", "INVALID_ARGUMENT", "MISROUTED", "NO_ACTIVATION", "POLL_CONFIG_INVALID",
    "POLL_SOURCE_UNAVAILABLE", "REBINDING", "STALE_ACTIVATION", "SUBSCRIPTION_REFUSED", "UNENCODED", "StaleActivationError",
]
