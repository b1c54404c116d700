"""Asking another shard of the same activation (core.routing): the split protocol's checks; and an
activation growing itself (core/engine/_growth.py): how full each shard is, and its split.

A signal between shards can be sent by anyone with a Temporal client, so a shard never acts on
what one says about another shard: it asks that shard itself, by a query made here, and acts on the
answer (``core.routing.drained_problem``, ``notice_problem``). Only the activation's own shard
workflows are asked, and only the split protocol's queries (and, for growth, their summaries).

``wfi.grow`` performs the very split ``wfi activate`` makes (``_activating.split``) with the worker's
client (the team's data converter with it): idempotent, so a retry after a killed worker completes
what was done of it. It grows only an activation whose every shard runs (a closed one is started
again, with its state, by ``wfi activate``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from wf_initiation._activating import ActivateAnswer, activate_shard, split, update_id
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.engine import ShardFill
from wf_initiation.errors import ActivationRefused
from wf_initiation.wire import (
    ACTIVATION_ID_PREFIX,
    ASK_SHARD_ACTIVITY,
    GROW_ACTIVITY,
    MEASURE_SHARDS_ACTIVITY,
    ROUTING_QUERY,
    SPLIT_LANES_CHECK_QUERY,
    SPLIT_LOOKUP_QUERY,
    SUBSCRIPTIONS_CHECK_QUERY,
    SUMMARY_QUERY,
    GrowRequest,
    GrowResult,
    MeasureShardsRequest,
    shard_workflow_id,
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

    @activity.defn(name=MEASURE_SHARDS_ACTIVITY)
    async def measure_shards(self, request: MeasureShardsRequest) -> list[ShardFill]:
        """How full each shard of ``request.workflow`` is, each asked itself (its summary), and whether it
        runs and still takes part in a split."""
        return list(await asyncio.gather(*(self._fill(request.workflow, k) for k in range(request.shards))))

    async def _fill(self, workflow: str, shard: int) -> ShardFill:
        handle = self._client.get_workflow_handle(shard_workflow_id(workflow, shard))
        described = await self._describe(handle)
        if described is None or described.status != WorkflowExecutionStatus.RUNNING:
            return ShardFill(shard=shard, running=False)
        summary = await handle.query(SUMMARY_QUERY)
        split = summary.get("split") if isinstance(summary, dict) else None
        fill = (summary.get("capacity") or {}).get("fill") if isinstance(summary, dict) else None
        return ShardFill(shard=shard, running=True, fill=fill if isinstance(fill, int | float) else None,
                         splitting=isinstance(split, dict) and not split.get("drained"))

    @activity.defn(name=GROW_ACTIVITY)
    async def grow(self, request: GrowRequest) -> GrowResult:
        """Split the activation into ``request.to`` shards, as ``wfi activate`` with that ``scale.shards``
        would; ``ok`` false with the reason when it cannot be split now (nothing was changed then)."""
        spec, current = request.spec.grown(request.to), request.spec.shards
        beat = asyncio.create_task(_heartbeat())
        try:
            await split(spec, current, ask_routing=lambda k: self._routing(spec.workflow, k),
                        activate=lambda named, k: self._activate(named, k, request.task_queue))
        except ActivationRefused as exc:
            return GrowResult(ok=False, message=str(exc))
        finally:
            beat.cancel()
        return GrowResult(ok=True, message=f"split from {current} into {request.to} shards")

    async def _routing(self, workflow: str, shard: int) -> dict[str, Any]:
        handle = self._client.get_workflow_handle(shard_workflow_id(workflow, shard))
        described = await self._describe(handle)
        if described is None or described.status != WorkflowExecutionStatus.RUNNING:
            raise ActivationRefused(f"shard {shard} of {workflow!r} is not running: `wfi activate` starts it again "
                                    "with its state, then the activation grows", workflow=workflow)
        answer = await handle.query(ROUTING_QUERY)
        return answer if isinstance(answer, dict) else {}

    async def _activate(self, spec: ActivationSpec, shard: int, task_queue: str) -> ActivateAnswer:
        """One shard of the split: a new one started, a running one switched (never a closed one started
        afresh, which would lose its state)."""
        handle = self._client.get_workflow_handle(shard_workflow_id(spec.workflow, shard))
        described = await self._describe(handle)
        if described is not None and described.status != WorkflowExecutionStatus.RUNNING:
            raise ActivationRefused(f"shard {shard} of {spec.workflow!r} is not running: `wfi activate` starts it again "
                                    "with its state, then the activation grows", workflow=spec.workflow)
        part = spec.as_shard(shard)
        try:
            return await activate_shard(self._client, part, task_queue=task_queue, args=[part, None],
                                        update=update_id(part, shard), note=None, rpc_timeout=ACTIVATE_TIMEOUT)
        except WorkflowUpdateFailedError as exc:  # the shard refused it (e.g. a split began meanwhile): said so
            raise ActivationRefused(f"shard {shard} of {spec.workflow!r} refused the grown binding: {exc.cause or exc}",
                                    workflow=spec.workflow) from exc

    @staticmethod
    async def _describe(handle: WorkflowHandle[Any, Any]) -> WorkflowExecutionDescription | None:
        try:
            return await handle.describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None
            raise

    def all(self) -> Sequence[Any]:
        return [self.ask_shard, self.measure_shards, self.grow]


ACTIVATE_TIMEOUT = timedelta(seconds=20)  # one shard's activate update; the activity's retry goes on after it
HEARTBEAT_EVERY = 5.0  # seconds: a killed worker's split is retried once its heartbeat timeout (30 s) passes


async def _heartbeat() -> None:
    while True:
        activity.heartbeat()
        await asyncio.sleep(HEARTBEAT_EVERY)
