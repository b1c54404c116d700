"""Publishing lifecycle events (COMP-3, COMP-5): hand each one to the activations that trigger on it.

The activation that started a run keeps ``workflow.started|completed|failed`` events in its state
until this activity returns. The activity finds the subscribers in Temporal visibility, as the
running activations whose ``WfiTriggers`` search attribute lists the event's connector, and
signals each ``lifecycle_event``; the receiving activation routes it by ``config.workflow`` and
runs it through its ordinary pipeline. The new run is its own execution; the originating run is
never signalled or re-entered (COMP-5).

The start and watch activities publish the events of the transitions they learn themselves
(:meth:`Publisher.publish_or_leave`); this activity publishes the rest (one they could not publish,
and those of a run begun before they did).

Visibility is eventually consistent: an activation started moments before the event may not be
listed yet and then does not receive it. A republish (retry, restart) is a duplicate at the
receiver, because the delivery id is the run's workflow id plus the transition.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from wf_initiation.core.engine import LifecycleEvent
from wf_initiation.wire import (
    LIFECYCLE_SIGNAL,
    PUBLISH_LIFECYCLE_ACTIVITY,
    PublishRequest,
    PublishResult,
    subscribers_query,
)

_log = logging.getLogger("wf_initiation.lifecycle")

PUBLISH_BUDGET = 5.0
"""Seconds a start or watch activity spends publishing before it leaves the rest to the activation
(the start activity's own timeout is 15 s; a publish to many subscribers must not use it up)."""


class Publisher:
    """Signals lifecycle events to the activations subscribed to their connectors."""

    def __init__(self, client: Client):
        self._client = client

    async def publish(self, events: Sequence[LifecycleEvent]) -> PublishResult:
        """Signal every event to every subscribing activation; a closed activation is skipped."""
        subscribers = {c: await self._subscribers(c) for c in {e.connector for e in events}}
        sends = [self._signal(wid, event) for event in events for wid in subscribers[event.connector]]
        await asyncio.gather(*sends)
        return PublishResult(signals=len(sends), activations=sorted({w for ws in subscribers.values() for w in ws}))

    async def publish_or_leave(self, events: Sequence[LifecycleEvent]) -> bool:
        """For an activity whose own work must not fail or stall with the publishing (a start, a
        watch): True once every event was published; False (logged) when it failed or took longer
        than :data:`PUBLISH_BUDGET` (many subscribers, a slow server), and the activation then keeps
        the events and publishes them with ``wfi.publish_lifecycle`` as before."""
        if not events:
            return True
        try:
            async with asyncio.timeout(PUBLISH_BUDGET):
                await self.publish(events)
        except Exception as exc:  # noqa: BLE001 - whatever failed, the activation publishes them itself
            reason = f"not done within {PUBLISH_BUDGET:.0f}s" if isinstance(exc, TimeoutError) else str(exc)
            _log.warning("%d lifecycle event(s) left to the activation to publish: %s", len(events), reason)
            return False
        return True

    async def _subscribers(self, connector: str) -> list[str]:
        try:
            return [wf.id async for wf in self._client.list_workflows(subscribers_query(connector))]
        except RPCError as exc:
            if exc.status != RPCStatusCode.UNIMPLEMENTED:
                raise
            # A server without visibility (the time-skipping test server) cannot route lifecycle
            # events: nobody can subscribe there, so there is nobody to deliver to.
            _log.warning("lifecycle events not published: the server has no workflow visibility")
            return []

    async def _signal(self, workflow_id: str, event: LifecycleEvent) -> None:
        try:
            await self._client.get_workflow_handle(workflow_id).signal(LIFECYCLE_SIGNAL, event)
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:  # closed since the query: nobody left to trigger
                raise


class LifecycleActivities:
    """The publish activity, bound to the worker's client (the plugin constructs it)."""

    def __init__(self, client: Client):
        self._publisher = Publisher(client)

    @activity.defn(name=PUBLISH_LIFECYCLE_ACTIVITY)
    async def publish(self, request: PublishRequest) -> PublishResult:
        """Signal every event to every subscribing activation; a closed activation is skipped."""
        return await self._publisher.publish(request.events)

    def all(self) -> Sequence[Any]:
        return [self.publish]
