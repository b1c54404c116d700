"""Read an ended activation run's state from its history, on the client, when no worker can answer.

Why: a run that was terminated (or timed out) while events waited for a workflow task ends with
those events after its last completed task. A query of such a run is a legacy query task whose
activation applies them at the last task's time, which is exactly what the activation's stale-time
guard refuses (workflows/_fresh.py): every worker that keeps a cache answers ``StaleActivationError``
for as long as the run exists, and a closed run never gets the next workflow task that would clear it
(reproduced by tests/integration/test_ended_state.py).

Then the client replays the run's history itself (``temporalio.worker.Replayer``, with the client's
data converter, so a team's codec decrypts it on the client and nothing is written anywhere) and
answers the query from the replayed workflow. The replay stops at the last completed workflow task:
the answer is the state the activation was really in when it ended; events that arrived after it
(a signal the run never took) are not in it, as they were never in the activation. ``wfi activate``
recovers a closed run's state the same way and signals those deliveries again (wf_initiation/_recovery.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio import workflow
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Replayer,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from wf_initiation.plugin import _runner, compose_data_converter, worker_data_converter
from wf_initiation.wire import DELIVERY_QUERY, EVENTS_QUERY, ROUTING_QUERY, STATE_QUERY, SUMMARY_QUERY
from wf_initiation.workflows.activation import ActivationWorkflow

# The activation's queries that the client asks, and the workflow method answering each.
QUERY_METHODS = {STATE_QUERY: "state", SUMMARY_QUERY: "summary_query", EVENTS_QUERY: "events", ROUTING_QUERY: "routing",
                 DELIVERY_QUERY: "delivery"}


class _Capture(Interceptor):
    """Keeps the workflow object the replay builds, whole after the replayer evicts it."""

    def __init__(self) -> None:
        self.instances: list[Any] = []

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        instances = self.instances

        class Inbound(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                instance = workflow.instance()
                instance.release_on_eviction = False  # its engine is read once the history is replayed
                instances.append(instance)
                return await super().execute_workflow(input)

        return Inbound


async def replayed(client: Client, history: WorkflowHistory) -> Any:
    """The activation workflow object that replaying ``history`` here builds (with the client's data
    converter, so a team's codec decrypts it on the client): its state as of the run's last completed
    workflow task. Also what re-activation recovers a closed run's state from (wf_initiation/_recovery.py).

    Raises:
        RuntimeError: the history does not replay with this build (a nondeterminism error, say).
    """
    capture = _Capture()
    converter = worker_data_converter(compose_data_converter(client.data_converter))  # as the worker decoded it
    # debug_mode: no 2 s deadlock detector. A long history replayed by a busy client can spend that long
    # in one activation, and a false "deadlock" here would make re-activation fall back to the start
    # input (wf_initiation/_recovery.py); the history is finite, so there is nothing to detect.
    replayer = Replayer(workflows=[ActivationWorkflow], workflow_runner=_runner(None), data_converter=converter,
                        interceptors=[capture], namespace=client.namespace, debug_mode=True)
    await replayer.replay_workflow(history, raise_on_replay_failure=True)
    if not capture.instances:
        raise RuntimeError(f"replaying {history.workflow_id} built no workflow")  # cannot happen for an activation
    return capture.instances[-1]


async def answer_from_history(client: Client, workflow_id: str, run_id: str, query: str, args: Sequence[Any]) -> Any:
    """What ``query`` of the closed run ``run_id`` answers, computed by replaying its history here.

    The answer is converted as a worker's would be (through the client's payload converter), so it
    has the types a query returns.
    """
    method = QUERY_METHODS[query]
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    value = getattr(await replayed(client, history), method)(*args)
    converter = compose_data_converter(client.data_converter)
    payloads = converter.payload_converter.to_payloads([value])
    return converter.payload_converter.from_payloads(payloads)[0]
