"""Asking another shard of the same activation (core.routing): the split protocol's checks.

A signal between shards can be sent by anyone with a Temporal client, so a shard never acts on
what one says about another shard: it asks that shard itself, by a query made here, and acts on the
answer (``core.routing.drained_problem``, ``notice_problem``). Only the activation's own shard
workflows are asked, and only the split protocol's queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from wf_initiation.wire import (
    ACTIVATION_ID_PREFIX,
    ASK_SHARD_ACTIVITY,
    ROUTING_QUERY,
    SPLIT_LANES_CHECK_QUERY,
    SPLIT_LOOKUP_QUERY,
    SUBSCRIPTIONS_CHECK_QUERY,
)

ASKABLE = (ROUTING_QUERY, SPLIT_LANES_CHECK_QUERY, SPLIT_LOOKUP_QUERY, SUBSCRIPTIONS_CHECK_QUERY)


class ShardActivities:
    """The ask activity, bound to the worker's client (the plugin constructs it)."""

    def __init__(self, client: Client):
        self._client = client

    @activity.defn(name=ASK_SHARD_ACTIVITY)
    async def ask_shard(self, workflow_id: str, query: str, args: list[Any]) -> Any:
        """The answer of shard ``workflow_id`` to ``query``; None when that workflow does not exist
        (then nothing it would have said can be verified)."""
        if query not in ASKABLE or not workflow_id.startswith(ACTIVATION_ID_PREFIX):
            raise ValueError(f"wfi.ask_shard asks an activation shard one of {', '.join(ASKABLE)}, not {query!r} of {workflow_id!r}")
        try:
            return await self._client.get_workflow_handle(workflow_id).query(query, args=args)
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None
            raise

    def all(self) -> Sequence[Any]:
        return [self.ask_shard]
