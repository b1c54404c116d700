"""Event delivery to waiting runs (INIT-8..10) and composition through lifecycle events (COMP-3..7).

The cases drive the deployment as a black box: they activate Workfiles written to the scratch
directory with ``wfi activate``, and through a plain Temporal client and the wire contract
(``wf_initiation.wire``: names and models only) start ``wfi.WaitForExample`` runs that wait with
``wait_for``, deliver events and read the activations' state. They need a worker
on the deployment's task queue with ``WfiPlugin(sample_runs=True)``: the runs use ``wfi.EchoRun``
and ``wfi.WaitForExample`` on that same queue. Without one, every case fails at once saying so.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from wf_initiation.conformance.kit import EXTERNAL, CaseFailed, Target, case, check
from wf_initiation.wire import (
    DELIVER_UPDATE,
    DELIVERY_QUERY,
    ECHO_RUN_WORKFLOW,
    STATE_QUERY,
    SUMMARY_QUERY,
    WAIT_FOR_EXAMPLE_WORKFLOW,
    DeliveryRequest,
    DeliveryResult,
    WaitRequest,
    subscribers_query,
    workflow_id_for,
)

T = TypeVar("T")

REPLIES = """name: {name}
on:
  http.request: {{path: /hooks/{name}}}
  as: reply
  when: "{{{{ reply.method == 'PUT' }}}}"
"""
UPSTREAM = "name: {name}\non:\n  http.request: {{path: /hooks/{name}}}\n  as: kick\n"
DOWNSTREAM = "name: {name}\non:\n  workflow.completed: {{workflow: {upstream}}}\n  as: upstream\n"
CYCLE_A = """name: {name}
on:
  - http.request: {{path: /hooks/{name}}}
    as: kick
  - workflow.completed: {{workflow: {other}}}
    as: upstream
"""


async def eventually(check_fn: Callable[[], Awaitable[T]], what: str, timeout: float = 60.0) -> T:
    """Retry ``check_fn`` until it stops raising CaseFailed (no fixed sleeps as the wait itself)."""
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            return await check_fn()
        except CaseFailed:
            if loop.time() > deadline:
                raise CaseFailed(f"{what} did not happen within {timeout:g}s") from None
        await asyncio.sleep(0.2)


class Activations:
    """The activations' updates and queries, called by their wire names with a plain Temporal client."""

    def __init__(self, target: Target, client: Any):
        self.target = target
        self.client = client

    async def deliver(self, workflow: str, payload: Any, *, entry: str | None = None,
                      update_id: str | None = None) -> DeliveryResult:
        handle = self.client.get_workflow_handle(workflow_id_for(workflow))
        return await handle.execute_update(DELIVER_UPDATE, DeliveryRequest(entry=entry, payload=payload),
                                           id=update_id or self.target.unique("dlv"), result_type=DeliveryResult)

    async def state(self, workflow: str) -> dict[str, Any]:
        return await self.client.get_workflow_handle(workflow_id_for(workflow)).query(STATE_QUERY)

    async def summary(self, workflow: str) -> dict[str, Any]:
        return await self.client.get_workflow_handle(workflow_id_for(workflow)).query(SUMMARY_QUERY)

    async def delivery(self, workflow: str, entry: str, delivery_id: str) -> dict[str, Any] | None:
        return await self.client.get_workflow_handle(workflow_id_for(workflow)).query(
            DELIVERY_QUERY, args=[entry, delivery_id])


class Session:
    """One case's view of the deployment: client, activation helper, worker check."""

    def __init__(self, target: Target, client: Any):
        self.target = target
        self.client = client
        self.queue = target.deployment.temporal.task_queue
        self.wfi = Activations(target, client)

    @classmethod
    async def open(cls, target: Target) -> Session:
        session = cls(target, await target.client())
        await session.require_worker()
        return session

    async def require_worker(self) -> None:
        from temporalio.api.enums.v1 import TaskQueueType
        from temporalio.api.taskqueue.v1 import TaskQueue
        from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

        request = DescribeTaskQueueRequest(namespace=self.client.namespace, task_queue=TaskQueue(name=self.queue),
                                           task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW)

        async def polled() -> None:
            response = await self.client.workflow_service.describe_task_queue(request)
            check(response.pollers, f"no worker polls task queue {self.queue!r}: start a worker there with "
                  "WfiPlugin(sample_runs=True) before running these cases")

        try:
            await eventually(polled, "a worker", timeout=2.0)
        except CaseFailed:
            await polled()  # fail with the message that names the fix

    async def activate(self, name: str, text: str, **settings: Any) -> None:
        pair = self.target.write_pair(name, text, {"run": {"workflow_type": ECHO_RUN_WORKFLOW, "task_queue": self.queue},
                                                   **settings})
        await self.target.activate(pair)

    async def start_waiter(self, workflow: str, thread: str) -> Any:
        request = WaitRequest(workflow=workflow, trigger="reply", match={"body.thread": thread})
        await self.target.require_workflow_type(WAIT_FOR_EXAMPLE_WORKFLOW, self.queue)
        return await self.client.start_workflow(WAIT_FOR_EXAMPLE_WORKFLOW, request, id=self.target.unique(f"waiter-{thread}"),
                                                task_queue=self.queue, result_type=dict)

    async def subscribed(self, workflow: str, handles: list[Any]) -> None:
        async def check_subscribed() -> None:
            runs = {s["run_workflow_id"] for s in (await self.wfi.state(workflow))["subscriptions"].values()}
            check({h.id for h in handles} <= runs, f"waiting runs not subscribed yet: {sorted(runs)}")

        await eventually(check_subscribed, "the waiting runs' subscriptions")

    async def listed(self, workflow: str, connector: str) -> None:
        query = f"{subscribers_query(connector)} AND WorkflowId = '{workflow_id_for(workflow)}'"

        async def check_listed() -> None:
            check((await self.client.count_workflows(query)).count == 1, f"{workflow} not visible for {connector}")

        await eventually(check_listed, f"visibility of {workflow}")

    async def started_runs(self, workflow: str) -> int:
        return int((await self.wfi.summary(workflow))["counters"].get("runs_started", 0))


def reply(delivery_id: str, thread: str) -> dict[str, Any]:
    return {"delivery_id": delivery_id, "method": "POST", "body": {"thread": thread}}


def kick(delivery_id: str) -> dict[str, Any]:
    return {"delivery_id": delivery_id, "method": "POST", "body": {}}


@case(capability=EXTERNAL, clauses=["INIT-8", "INIT-9", "INIT-10"])
async def a_waiting_run_gets_only_events_accepted_while_it_waits(target: Target) -> None:
    s = await Session.open(target)
    name = target.unique("replies")
    await s.activate(name, REPLIES.format(name=name))
    early = await s.wfi.deliver(name, reply("early", "t1"), entry="reply")
    check(early.disposition.value == "suppressed", f"an event no run waits for is disposed normally, got {early}")
    waiter = await s.start_waiter(name, "t1")
    await s.subscribed(name, [waiter])
    again = await s.wfi.deliver(name, reply("early", "t1"), entry="reply", update_id=target.unique("resend"))
    check(again.disposition.value == "duplicate", f"the unmatched event consumed its delivery id (INIT-9), got {again}")
    late = await s.wfi.deliver(name, reply("late", "t1"), entry="reply")
    check(late.disposition.value == "delivered" and late.run_key is None, f"expected delivered, no run; got {late}")
    outcome = await waiter.result()
    check(outcome["received"] == [reply("late", "t1")], f"the run received {outcome['received']}, expected only 'late'")


@case(capability=EXTERNAL, clauses=["INIT-8", "INIT-10"])
async def two_waiting_runs_each_get_only_their_correlation(target: Target) -> None:
    s = await Session.open(target)
    name = target.unique("replies")
    await s.activate(name, REPLIES.format(name=name))
    a, b = await s.start_waiter(name, "ta"), await s.start_waiter(name, "tb")
    await s.subscribed(name, [a, b])
    for delivery_id, thread in (("1", "tb"), ("2", "ta")):
        result = await s.wfi.deliver(name, reply(delivery_id, thread), entry="reply")
        check(result.disposition.value == "delivered", f"{delivery_id}: expected delivered, got {result}")
    got = [(await h.result())["received"] for h in (a, b)]
    check(got == [[reply("2", "ta")], [reply("1", "tb")]], f"each run must get only its thread's event, got {got}")


@case(capability=EXTERNAL, clauses=["COMP-3", "COMP-5"])
async def completion_of_a_starts_one_run_of_b_as_its_own_execution(target: Target) -> None:
    from temporalio.api.enums.v1 import EventType

    s = await Session.open(target)
    a, b = target.unique("build"), target.unique("deploy")
    await s.activate(b, DOWNSTREAM.format(name=b, upstream=a))
    await s.activate(a, UPSTREAM.format(name=a))
    await s.listed(b, "workflow.completed")
    run = await s.wfi.deliver(a, kick("one"))
    check(run.run_key is not None, f"the kick did not start a run of {a}: {run}")

    async def one_run_of_b() -> None:
        check(await s.started_runs(b) == 1, f"{b} has not started exactly one run yet")

    await eventually(one_run_of_b, f"a run of {b}")
    history = await s.client.get_workflow_handle(run.run_key).fetch_history()
    signalled = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
    check(not signalled, "the originating run was signalled; it must never be re-entered (COMP-5)")
    record = await s.wfi.delivery(b, "upstream", f"{run.run_key}#completed")
    check(record is not None and record["run_key"] != run.run_key, f"B's run must be its own execution: {record}")


@case(capability=EXTERNAL, clauses=["COMP-6"])
async def an_a_b_a_cycle_stops_at_the_causation_bound(target: Target) -> None:
    s = await Session.open(target)
    a, b = target.unique("ping"), target.unique("pong")
    await s.activate(a, CYCLE_A.format(name=a, other=b), max_causation_depth=3)
    await s.activate(b, DOWNSTREAM.format(name=b, upstream=a), max_causation_depth=3)
    for name in (a, b):
        await s.listed(name, "workflow.completed")
    await s.wfi.deliver(a, kick("go"), entry="kick")

    async def refusal() -> dict[str, Any]:
        errors = [e for e in (await s.wfi.state(a))["errors"] if e["kind"] == "refused"]
        check(errors, "no cycle-guard refusal recorded yet")
        return errors[0]

    error = await eventually(refusal, "the cycle guard's refusal")
    check("exceeds the bound 3" in error["message"] and error["message"].count(" -> ") == 3,
          f"the refusal must name the bound and the chain of four runs: {error['message']}")
    counts = (await s.started_runs(a), await s.started_runs(b))
    check(counts == (2, 2), f"runs started (A, B) must be (2, 2) at bound 3, got {counts}")


@case(capability=EXTERNAL, clauses=["COMP-4", "COMP-7"])
async def the_run_side_api_offers_only_waiting_for_events(target: Target) -> None:
    import inspect

    import wf_initiation.workflows.runapi as runapi

    check(runapi.__all__ == ["wait_for"], f"the run-side API must export only wait_for, exports {runapi.__all__}")
    params = list(inspect.signature(runapi.wait_for).parameters)
    check(params == ["workflow", "trigger", "match", "timeout"], f"wait_for takes {params}")


CASES = (
    a_waiting_run_gets_only_events_accepted_while_it_waits,
    two_waiting_runs_each_get_only_their_correlation,
    completion_of_a_starts_one_run_of_b_as_its_own_execution,
    an_a_b_a_cycle_stops_at_the_causation_bound,
    the_run_side_api_offers_only_waiting_for_events,
)
