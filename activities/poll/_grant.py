"""The worker's deployment connections, bound to every activity it runs (see ``_runtime``).

``WfiPlugin(deployment=...)`` adds :class:`ConnectionsInterceptor`; a poll activity then resolves
secret references only of a connection equal to one of that deployment's. Without it (a worker
without a deployment) no reference is resolved.
"""

from __future__ import annotations

from typing import Any

from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from wf_initiation.activities.poll._runtime import worker_connections
from wf_initiation.core.connections import WorkerConnections


class ConnectionsInterceptor(Interceptor):
    """Runs each activity of the worker with the worker's deployment connections."""

    def __init__(self, connections: WorkerConnections) -> None:
        self.connections = connections

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Inbound(next, self.connections)


class _Inbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, connections: WorkerConnections) -> None:
        super().__init__(next)
        self._connections = connections

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        with worker_connections(self._connections):
            return await self.next.execute_activity(input)
