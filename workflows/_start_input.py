"""What the SDK keeps of the activation a run began with: the least that it needs.

An activation starts (and continues as new) with its state as the workflow's second argument: up to
the capacity's worth of retained ids, ~15 bytes each. ``ActivationWorkflow.__init__`` decodes it into
the engine and nothing reads it again; but a cached run kept it, several times over:

- the SDK keeps the decoded arguments in the ``ExecuteWorkflowInput`` it made for the run
  (``temporalio/worker/_workflow_instance.py``, ``_workflow_input``) for the run's whole life;
- that input's ``headers`` (``InitializeWorkflow.headers``), the run's ``Info`` (its ``headers`` and
  ``raw_memo``, ``temporalio/worker/_workflow.py``) and the instance details' ``last_completion_result``
  and ``last_failure`` are sub-messages of the first activation's protobuf message, and a sub-message
  keeps its whole message alive (upb allocates a message and its sub-messages in one arena): the
  activation, with the state's payload in it, about four times the state in the worker's memory
  (measured: a cached run begun with 1.9 MB of input held 7.7 MB more than one begun with 10
  bytes, 0.45 MB once nothing referred into its first activation).

:class:`ReleaseCarriedState` (a workflow interceptor) replaces the state argument by ``None`` in
the input the SDK keeps, after the workflow object was made and before the run function is called
(``run`` never reads it), and gives that input copies of its headers. The plugin's runners,
:class:`DetachedSandboxRunner` (sandboxed workflows) and :class:`DetachedUnsandboxedRunner` (those
outside the sandbox: the activation workflow is one), give each run copies of those messages in its
details. Nothing recorded changes: arguments and headers are read the same, and a replay compares
commands only.

The SDK (1.35) also passes every payload of an activation through three visitors (payload
references, external storage, the codec), each putting its result back into the message, so the
first activation's arena holds the state four times (a view into any part keeps all of it): a
fresh worker that loaded a 75,000-id shard held 4.3 MB of such copies (~57 bytes per id) while the
activation workflow ran outside the sandbox without the detached details (bench/bench_memory.py).
The SDK also keeps a view into the activation it is processing until the next one (its internal
flags), so the first activation goes at the run's next task or query, not at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from google.protobuf.message import Message
from temporalio import workflow
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInstance,
    WorkflowInstanceDetails,
    WorkflowInterceptorClassInput,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

with workflow.unsafe.imports_passed_through():
    from wf_initiation.wire.names import ACTIVATION_WORKFLOW

STATE_ARGUMENT = 1  # ActivationWorkflow.run(spec, state)
M = TypeVar("M", bound=Message)


def _copy(message: M) -> M:
    """``message`` in a protobuf message of its own (not a view into the message it came in)."""
    copied = type(message)()
    copied.CopyFrom(message)
    return copied


def _copies(messages: Mapping[str, M]) -> dict[str, M]:
    return {key: _copy(value) for key, value in messages.items()}


def detached(det: WorkflowInstanceDetails) -> WorkflowInstanceDetails:
    """``det`` holding nothing of the activation message it was read from."""
    info = dataclasses.replace(det.info, headers=_copies(det.info.headers), raw_memo=_copies(det.info.raw_memo))
    return dataclasses.replace(det, info=info, last_completion_result=_copy(det.last_completion_result),
                               last_failure=None if det.last_failure is None else _copy(det.last_failure))


@dataclasses.dataclass(frozen=True)
class DetachedSandboxRunner(SandboxedWorkflowRunner):
    """The SDK's sandboxed runner, each run given :func:`detached` details."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return super().create_instance(detached(det))


class DetachedUnsandboxedRunner(UnsandboxedWorkflowRunner):
    """The SDK's runner for workflows outside the sandbox, each run given :func:`detached` details."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return super().create_instance(detached(det))


class ReleaseCarriedState(Interceptor):
    """Adds :class:`_Inbound` to every workflow of the worker (it acts on the activation only)."""

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        return _Inbound


class _Inbound(WorkflowInboundInterceptor):
    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        # The SDK's own object is changed, so that its references go too.
        input.headers = _copies(input.headers)
        if workflow.info().workflow_type == ACTIVATION_WORKFLOW and len(input.args) > STATE_ARGUMENT:
            args = list(input.args)
            args[STATE_ARGUMENT] = None
            input.args = args
        return await self.next.execute_workflow(input)
