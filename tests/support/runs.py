"""Small helpers about run executions shared by tests."""

from __future__ import annotations

from temporalio.client import Client, WorkflowExecutionDescription
from temporalio.service import RPCError, RPCStatusCode

from tests.support.restart import ride_out


async def describe_or_none(client: Client, workflow_id: str) -> WorkflowExecutionDescription | None:
    """The execution's description, or None while no execution has that workflow id."""
    try:
        return await ride_out(client.get_workflow_handle(workflow_id).describe)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
