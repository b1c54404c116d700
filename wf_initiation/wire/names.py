"""Every name on the wire: workflow types, update/signal/query names, activity names, workflow id format.

Histories, webhook bridges, the Temporal UI/CLI and other workers address the activation by these
strings: each is written here once, and everything else (workflows, activities, client, CLI,
ingress, conformance, bench) imports it. Changing one breaks recorded histories and running
deployments. The signal names the pure engine emits as commands are defined in ``core.engine`` (core
imports nothing above it; its public names) and re-exported here: this module is where every other
layer reads them. The engine also addresses its sibling shards by the workflow id format defined
here, spelling it below the wire (tests/core/test_workflow_ids.py pins the two equal).
"""

from __future__ import annotations

from wf_initiation.core.engine import EVENT_SIGNAL as SUBSCRIPTION_EVENT_SIGNAL
from wf_initiation.core.engine import (
    LANES_SIGNAL,
    LIFECYCLE_SIGNAL,
    SUBSCRIBE_SIGNAL,
    UNSUBSCRIBE_SIGNAL,
)

# --- workflow ids
ACTIVATION_ID_PREFIX = "wfi-activation:"
"""Temporal workflow ids of activations: this prefix and the workflow identity (shard 0)."""


def workflow_id_for(workflow: str) -> str:
    """The Temporal workflow id of the activation of ``workflow`` (its shard 0): the id every sender knows."""
    return ACTIVATION_ID_PREFIX + workflow


def shard_workflow_id(workflow: str, shard: int) -> str:
    """The Temporal workflow id of shard ``shard`` of an activation: shard 0 is ``workflow_id_for``
    (the id every sender knows), shard k its id followed by ``#k`` (core.sharding)."""
    return workflow_id_for(workflow) if shard == 0 else f"{workflow_id_for(workflow)}#{shard}"


# --- workflow types
ACTIVATION_WORKFLOW = "wfi.Activation"
"""The activation workflow: one per workflow identity, id ``workflow_id_for(name)``."""
ECHO_RUN_WORKFLOW = "wfi.EchoRun"
"""The sample run (``WfiPlugin(sample_runs=True)``): echoes its input, fails or waits on request."""
ECHO_RUN_RELEASE_SIGNAL = "release"
"""Signal to a ``wfi.EchoRun`` started with ``{"hold": true}`` in its payload: finish now."""
ECHO_RUN_RECEIVED_QUERY = "received"
"""Query of a ``wfi.EchoRun``: the run input it received."""
WAIT_FOR_EXAMPLE_WORKFLOW = "wfi.WaitForExample"
"""The sample run that waits for events with ``wait_for``."""

# --- the activation's updates
ACTIVATE_UPDATE = "activate"
DELIVER_UPDATE = "deliver"
DELIVER_MANY_UPDATE = "deliver_many"
OPERATE_UPDATE = "operate"
DEACTIVATE_UPDATE = "deactivate"

# --- the activation's signals (and the one a waiting run receives)
DELIVER_SIGNAL = "deliver_signal"
PARENT_DRAINED_SIGNAL = "split_parent_drained"
"""A split's parent tells its children that every id it held at the split has expired (core.sharding)."""

# --- the activation's queries
STATE_QUERY = "state"
SUMMARY_QUERY = "summary"
EVENTS_QUERY = "events"
DELIVERY_QUERY = "delivery"
DEFERRED_SIGNALS_QUERY = "deferred_signal_list"
"""The signalled deliveries an activation deferred and lists, a page at a time: ``(offset, limit)``."""
REDRIVABLE_QUERY = "redrivable"
"""Every event the activation keeps for re-drive (deferred signals included), by number, a page at a
time: ``(offset, limit)``."""
ROUTING_QUERY = "routing"
"""Shard 0 answers how deliveries are spread: ``{"shards": N, "entries": {name: delivery id path}}``
(and ``split_from`` while it takes part in a split)."""
SPLIT_LOOKUP_QUERY = "split_lookup"
"""A split's parent answers what it holds of ids that moved to a child: ``{"shards": its count,
"records": [dedup entry or None, ...]}`` for ``[[entry, delivery id], ...]`` (core.sharding)."""
SUBSCRIPTIONS_CHECK_QUERY = "subscriptions_check"
"""Shard 0 answers a shard that asks whether a subscription copy it was sent (or told to drop) is one
of shard 0's: ``{"held": [the asked sub ids shard 0 holds as originals]}`` (core.routing)."""
SPLIT_LANES_CHECK_QUERY = "split_lanes_check"
"""A split's parent answers a child that asks whether a lane notice it got is the parent's:
``{"handed": bool, "handover": {part: digest}, "busy": [keys it still runs]}`` for ``(child, keys)``
(core/engine/_lanes.py, core.routing.notice_problem)."""

# --- activity names (histories carry them: never rename)
START_RUNS_ACTIVITY = "wfi.start_runs"
WATCH_RUNS_ACTIVITY = "wfi.watch_runs"
CONTROL_RUN_ACTIVITY = "wfi.control_run"
CONTROL_RUNS_ACTIVITY = "wfi.control_runs"
PUBLISH_LIFECYCLE_ACTIVITY = "wfi.publish_lifecycle"
WAIT_ACTIVITY = "wfi.wait_for_instant"
ASK_SHARD_ACTIVITY = "wfi.ask_shard"
"""A shard asks another shard of its activation a query (the split protocol's checks, core.routing)."""
MEASURE_SHARDS_ACTIVITY = "wfi.measure_shards"
"""Shard 0 of an activation that grows itself asks every shard how full it is (core/engine/_growth.py)."""
GROW_ACTIVITY = "wfi.grow"
"""Shard 0 of an activation that grows itself splits it into twice its shards (the split of ``wfi activate``)."""
POLL_ACTIVITY_PREFIX = "wfi.poll."
"""Poll activities are named ``wfi.poll.<connector name>``, e.g. ``wfi.poll.rss.item_published``."""


def poll_activity_name(connector: str) -> str:
    """The activity name of a poll connector, e.g. ``wfi.poll.rss.item_published``.

    Args:
        connector: The manifest name, e.g. ``rss.item_published``.
    """
    return POLL_ACTIVITY_PREFIX + connector

__all__ = [
    "ACTIVATE_UPDATE", "ACTIVATION_ID_PREFIX", "LANES_SIGNAL", "ACTIVATION_WORKFLOW", "CONTROL_RUN_ACTIVITY", "CONTROL_RUNS_ACTIVITY", "DEACTIVATE_UPDATE",
    "DEFERRED_SIGNALS_QUERY", "DELIVERY_QUERY", "DELIVER_MANY_UPDATE", "DELIVER_SIGNAL", "DELIVER_UPDATE",
    "ECHO_RUN_RECEIVED_QUERY", "ECHO_RUN_RELEASE_SIGNAL", "ECHO_RUN_WORKFLOW", "EVENTS_QUERY", "LIFECYCLE_SIGNAL", "OPERATE_UPDATE", "PARENT_DRAINED_SIGNAL", "POLL_ACTIVITY_PREFIX",
    "PUBLISH_LIFECYCLE_ACTIVITY", "REDRIVABLE_QUERY", "START_RUNS_ACTIVITY", "STATE_QUERY", "SUBSCRIBE_SIGNAL",
    "SUBSCRIPTION_EVENT_SIGNAL", "SUMMARY_QUERY", "UNSUBSCRIBE_SIGNAL", "WAIT_ACTIVITY", "WAIT_FOR_EXAMPLE_WORKFLOW",
    "ROUTING_QUERY", "SPLIT_LANES_CHECK_QUERY", "SUBSCRIPTIONS_CHECK_QUERY", "SPLIT_LOOKUP_QUERY", "ASK_SHARD_ACTIVITY", "GROW_ACTIVITY", "MEASURE_SHARDS_ACTIVITY", "WATCH_RUNS_ACTIVITY", "poll_activity_name", "shard_workflow_id", "workflow_id_for",
]
