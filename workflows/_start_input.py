"""The carried state is let go once the activation has read it.

An activation starts (and continues as new) with its state as the workflow's second argument: up to
the capacity's worth of retained ids, ~15 bytes each. ``ActivationWorkflow.__init__`` decodes it into
the engine, and nothing reads it again; but the SDK keeps the decoded arguments in the
``ExecuteWorkflowInput`` it made for the run (``temporalio/worker/_workflow_instance.py``,
``_workflow_input``) for the run's whole life, and the run function's frame keeps them too. So every
cached activation held one more copy of its state than it needs. The interceptor below replaces
the argument by ``None`` in that same input object, after the workflow object was made and before
the run function is called (``run`` never reads it). Nothing recorded changes: arguments are not
part of what a replay compares.

The copy the SDK's activation message still holds (its ``Info`` refers into it) is not reachable
from here.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

with workflow.unsafe.imports_passed_through():
    from wf_initiation.wire.names import ACTIVATION_WORKFLOW

STATE_ARGUMENT = 1  # ActivationWorkflow.run(spec, state)


class ReleaseCarriedState(Interceptor):
    """Adds :class:`_Inbound` to every workflow of the worker (it acts on the activation only)."""

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        return _Inbound


class _Inbound(WorkflowInboundInterceptor):
    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        if workflow.info().workflow_type == ACTIVATION_WORKFLOW and len(input.args) > STATE_ARGUMENT:
            args = list(input.args)
            args[STATE_ARGUMENT] = None
            input.args = args  # the SDK's own object: its reference goes too
        return await self.next.execute_workflow(input)
