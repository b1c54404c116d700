"""The run-side API: what a run (a Temporal workflow) may ask of wf-initiation.

One function, :func:`wait_for`: wait inside a run for an event of another workflow's trigger.

    from wf_initiation.workflows.runapi import wait_for

    reply = await wait_for("support-triage", "message", match={"thread_id": thread}, timeout=timedelta(days=2))

Deliberately nothing else (COMP-4, COMP-7): a run cannot create, change, delete or fire triggers
or schedules, and cannot advance or cancel other runs through this API. The only signals it sends
are ``subscribe`` and ``unsubscribe`` to an activation, and the activation answers only with this
run's own event or the end of its subscription.

How a wait works (see docs/composition.md): the run signals ``subscribe`` to the activation of
``workflow`` with a deterministic subscription id (its workflow id, run id and a per-run counter),
the entry, the ``match`` (dotted payload path -> value) and its deadline, then waits for the signal
``wfi.subscription_event`` on itself. Only events accepted while the subscription is active can
match (INIT-8); of several waiting runs that match, the earliest registered receives the event.
On timeout the run asks the activation to end the subscription and waits for the answer, so an
event delivered in the meantime is returned rather than lost.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio import workflow as _wf
from temporalio.exceptions import ApplicationError, FailureError

with _wf.unsafe.imports_passed_through():
    from wf_initiation.core.engine import SubscribeRequest, SubscriptionEvent, UnsubscribeRequest
    from wf_initiation.wire import (
        NO_ACTIVATION,
        SUBSCRIBE_SIGNAL,
        SUBSCRIPTION_REFUSED,
        UNSUBSCRIBE_SIGNAL,
        WAIT_FOR_EXAMPLE_WORKFLOW,
        WaitRequest,
    )
    from wf_initiation.wire import SUBSCRIPTION_EVENT_SIGNAL as EVENT_SIGNAL
    from wf_initiation.wire import workflow_id_for as activation_workflow_id

__all__ = ["wait_for"]


async def wait_for(workflow: str, trigger: str, match: dict[str, Any] | None = None, timeout: timedelta | None = None) -> Any:
    """Wait for the next event of ``workflow``'s trigger entry ``trigger`` that matches ``match``.

    Call it from workflow code only. Events accepted before this call registered its subscription
    are never returned (INIT-8, INIT-9); an event returned here starts no run of ``workflow``.

    Args:
        workflow: Workflow identity (Workfile ``name``) whose activation accepts the events.
        trigger: The trigger entry's name (``as``, or the connector's binding name).
        match: Dotted payload path -> expected value, compared as JSON values; all must hold.
            ``None`` or ``{}`` takes the next event of the entry.
        timeout: How long to wait; ``None`` waits until an event arrives.

    Returns:
        The event's payload.

    Raises:
        TimeoutError: No matching event was accepted within ``timeout``.
        ApplicationError: ``SubscriptionRefused`` (no such external or poll entry) or
            ``NoActivation`` (``workflow`` has no running activation); both non-retryable.
    """
    box = _mailbox()
    info = _wf.info()
    request = SubscribeRequest(
        sub_id=box.next_id(info.workflow_id, info.run_id), entry=trigger, run_workflow_id=info.workflow_id,
        match=dict(match or {}), expires_at=_wf.now() + timeout if timeout is not None else None,
    )
    activation = _wf.get_external_workflow_handle(activation_workflow_id(workflow))
    await _send(activation, SUBSCRIBE_SIGNAL, request, workflow)
    try:
        await _wf.wait_condition(lambda: box.has(request.sub_id), timeout=timeout,
                                 timeout_summary=f"wait for {workflow}/{trigger}")
    except TimeoutError:
        await _end_subscription(activation, request, box, workflow)
    except asyncio.CancelledError:
        await asyncio.shield(_send(activation, UNSUBSCRIBE_SIGNAL, _unsubscribe(request), workflow))
        raise
    return _outcome(box.take(request.sub_id), workflow, trigger, timeout)


async def _end_subscription(activation: Any, request: SubscribeRequest, box: _Mailbox, workflow: str) -> None:
    # The activation answers an unsubscribe with the end notice, or with an event it already
    # delivered: either way the next signal for this subscription settles the wait.
    if not box.has(request.sub_id):
        await _send(activation, UNSUBSCRIBE_SIGNAL, _unsubscribe(request), workflow)
        await _wf.wait_condition(lambda: box.has(request.sub_id))


def _unsubscribe(request: SubscribeRequest) -> UnsubscribeRequest:
    return UnsubscribeRequest(sub_id=request.sub_id, run_workflow_id=request.run_workflow_id)


async def _send(activation: Any, signal: str, arg: BaseModel, workflow: str) -> None:
    try:
        await activation.signal(signal, arg)
    except FailureError as exc:
        raise ApplicationError(
            f"workflow {workflow!r} has no running activation ({activation_workflow_id(workflow)}): "
            f"activate its Workfile before waiting for its events ({exc})", type=NO_ACTIVATION, non_retryable=True,
        ) from exc


def _outcome(event: SubscriptionEvent, workflow: str, trigger: str, timeout: timedelta | None) -> Any:
    if event.kind == "event":
        return event.payload
    if event.reason == "refused":
        raise ApplicationError(event.message or "subscription refused", type=SUBSCRIPTION_REFUSED, non_retryable=True)
    raise TimeoutError(f"no event of {workflow}/{trigger} matched within {timeout}")


class _Mailbox:
    """Per-run state of :func:`wait_for`, held by the run's own signal handler (no module state)."""

    def __init__(self) -> None:
        self.count = 0
        self.results: dict[str, SubscriptionEvent] = {}
        self.done: set[str] = set()

    def next_id(self, workflow_id: str, run_id: str) -> str:
        self.count += 1
        return f"{workflow_id}/{run_id}/{self.count}"

    def receive(self, event: SubscriptionEvent) -> None:
        if event.sub_id in self.done:
            return  # a re-issued delivery after the wait ended
        current = self.results.get(event.sub_id)
        if current is None or (current.kind == "ended" and event.kind == "event"):
            self.results[event.sub_id] = event

    def has(self, sub_id: str) -> bool:
        return sub_id in self.results

    def take(self, sub_id: str) -> SubscriptionEvent:
        self.done.add(sub_id)
        return self.results.pop(sub_id)


def _mailbox() -> _Mailbox:
    handler = _wf.get_signal_handler(EVENT_SIGNAL)
    if handler is None:
        box = _Mailbox()
        _wf.set_signal_handler(EVENT_SIGNAL, box.receive)
        return box
    owner = getattr(handler, "__self__", None)
    if not isinstance(owner, _Mailbox):
        raise RuntimeError(f"signal {EVENT_SIGNAL!r} has a handler of the workflow's own: wf-initiation's run API needs it")
    return owner


@_wf.defn(name=WAIT_FOR_EXAMPLE_WORKFLOW)
class WaitForExample:
    """Example run that waits for events with :func:`wait_for`; registered with the sample runs.

    Returns the payloads received, or ``{"timed_out": ...}`` after the last one received.
    """

    def __init__(self) -> None:
        self._received: list[Any] = []

    @_wf.run
    async def run(self, request: WaitRequest) -> dict[str, Any]:
        timeout = timedelta(seconds=request.timeout_seconds) if request.timeout_seconds is not None else None
        for _ in range(request.waits):
            try:
                self._received.append(await wait_for(request.workflow, request.trigger, request.match, timeout))
            except TimeoutError as exc:
                return {"received": self._received, "timed_out": str(exc)}
        return {"received": self._received, "timed_out": None}

    @_wf.query
    def received(self) -> list[Any]:
        return list(self._received)
