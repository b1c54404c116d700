"""Activating an activation's workflows by Temporal calls, for the client and the worker alike.

- :func:`activate_shard`: one shard, by its idempotent update-with-start (the ``activate`` update,
  the workflow started with ``args`` when it does not run);
- :func:`split`: a running activation split into more shards (core.sharding, "splitting"), the one
  sequence that ``wfi activate`` with a larger ``scale.shards`` performs (``WfiClient``, through
  ``_sharded_client``) and that an activation growing itself performs (``activities/growth.py``,
  with the worker's client): whether it may (``core.routing.split_refusal``), then the new shards
  first, the old ones next, shard 0 last. Idempotent: after an interruption, running it again
  completes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, Field
from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy

from wf_initiation.core.activation import ActivationSpec, Split
from wf_initiation.core.routing import busy_in_split, split_refusal
from wf_initiation.errors import ActivationRefused
from wf_initiation.wire import ACTIVATE_UPDATE, ACTIVATION_WORKFLOW, DeactivatedResult, shard_workflow_id

T = TypeVar("T")


class ActivateAnswer(BaseModel):
    """The ``activate`` update's result as any build of the activation words it: ``current`` (recorded
    by earlier builds), ``unchanged``, ``activated`` or ``rebound``."""

    activation_id: str
    outcome: str
    previous: list[str] = Field(default_factory=list)


def update_id(spec: ActivationSpec, shard: int) -> str:
    """The ``activate`` update's id for ``spec`` on ``shard``: the same for every sender of the same
    binding (a repeat is answered by the first)."""
    return f"activate-{spec.activation_id}" + (f"-{shard}" if shard else "")


async def activate_shard(client: Client, spec: ActivationSpec, *, task_queue: str, args: list[Any], update: str,
                         note: str | None, rpc_timeout: timedelta) -> ActivateAnswer:
    """One attempt at activating ``spec`` on its shard (``spec.shard``): the ``activate`` update with id
    ``update``, the shard's workflow started with ``args`` when none runs (``note`` in its details)."""
    start: WithStartWorkflowOperation[Any, DeactivatedResult] = WithStartWorkflowOperation(
        ACTIVATION_WORKFLOW, args=args, id=shard_workflow_id(spec.workflow, spec.shard), task_queue=task_queue,
        result_type=DeactivatedResult, id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary=f"wf-initiation activation of {spec.workflow}", static_details=note,
    )
    return await client.execute_update_with_start_workflow(
        ACTIVATE_UPDATE, spec, start_workflow_operation=start, id=update, result_type=ActivateAnswer,
        rpc_timeout=rpc_timeout)


async def split(spec: ActivationSpec, current: int, *, ask_routing: Callable[[int], Awaitable[Mapping[str, Any]]],
                activate: Callable[[ActivationSpec, int], Awaitable[T]]) -> T:
    """Split a running activation from ``current`` shards into ``spec.shards`` while deliveries go on:
    the new shards start first (no sender knows them yet), then the old ones switch, shard 0 last, so
    a sender that learns the new count from shard 0 finds every parent already refusing the ids that
    moved. Returns shard 0's answer.

    Args:
        ask_routing: Shard ``k``'s answer to the ``routing`` query (whether it still takes part in a split).
        activate: Activates a spec on shard ``k`` (the caller's :func:`activate_shard`, retried its way).

    Raises:
        ActivationRefused: the split cannot be made now (core.routing.split_refusal says why).
    """
    problem = split_refusal(current, spec.shards, from_shards=None, busy=[])
    if problem is None:
        answers = await asyncio.gather(*(ask_routing(k) for k in range(current)))
        problem = split_refusal(current, spec.shards, from_shards=None, busy=busy_in_split(answers, current))
    if problem is not None:
        raise ActivationRefused(f"the activation of {spec.workflow!r} cannot be split into {spec.shards} shards: {problem}",
                                workflow=spec.workflow)
    named = spec.model_copy(update={"split": Split(from_shards=current)})
    await asyncio.gather(*(activate(named, k) for k in range(current, spec.shards)))
    await asyncio.gather(*(activate(named, k) for k in range(1, current)))
    return await activate(named, 0)
