"""Subscriptions (INIT-8..10) and lifecycle events (COMP-3, COMP-5), inside the pure engine.

A run waiting in :func:`workflows.runapi.wait_for` registers a :class:`Subscription` with the
activation of the workflow whose trigger it waits on. When the activation accepts an external or
poll event of that entry, the event is offered to the subscriptions active *at that moment* only
(INIT-8):

* **Correlation:** ``match`` maps dotted payload paths to values; a subscription matches when every
  path exists in the payload and its value equals the expected one under JSON-value equality
  (:func:`canonical_key`: key order irrelevant, ``1 == 1.0``). An empty ``match`` matches every event.
* **Selection:** exactly one subscription receives an event: the earliest registered (lowest
  ``seq``) active match. The event is consumed by it (disposition ``delivered``) and starts no run.
* An event that matches nothing goes on through the ordinary pipeline (``when``, keys, overlap,
  batch) and is never held for a subscription established later (INIT-9).

Delivery is a :class:`SignalRun` kept in ``EngineState.unacked`` until the shell confirms the
signal, so a worker crash or continue-as-new re-issues it (INIT-7); the run side ignores a repeat.

Verification (issue 11): a ``subscribe`` signal can come from anyone with a Temporal client, so
nothing in it is trusted to be a waiting run. Its fields are bounded (``core.limits``: ids, the
``match`` size, the number of subscriptions), and an event delivered to a subscription whose
workflow does not exist (or has closed) is not swallowed: when the signal fails, the event is
released into the ordinary pipeline (``when``, keys, overlap, batch) as if no subscription had
matched (recorded as ``delivery_failed``). A forged subscription naming a live workflow that is not
waiting does receive the event; the delivery names that workflow in the event's record.

Lifecycle events: when the activation learns a run it started has started or ended, it keeps a
:class:`PublishEvent` in ``unacked`` until the publish activity has handed it to every activation
that triggers on that connector; the receiving activation routes it by ``config.workflow``
(:func:`route_lifecycle`). Its delivery id is the run's workflow id plus the transition, so a
republish is a duplicate.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .._expr import canonical_key
from ..activation import EntrySpec
from ..limits import MAX_MATCH_BYTES, MAX_OPERATOR_TEXT_CHARS, MAX_SUBSCRIPTIONS, MAX_WORKFLOW_ID_CHARS, json_problem, json_size
from ..runinput import Causation
from ._keys import digest_and_size, event_key
from ._types import Command, DeliveryResult, Disposition, PublishEvent, RunRecord, SignalRun, Subscription

if TYPE_CHECKING:
    from ._engine import Core

SUBSCRIBE_SIGNAL = "subscribe"
UNSUBSCRIBE_SIGNAL = "unsubscribe"
LIFECYCLE_SIGNAL = "lifecycle_event"
EVENT_SIGNAL = "wfi.subscription_event"
ACTIVATION_ID_PREFIX = "wfi-activation:"
SUBSCRIBABLE_KINDS = ("external", "poll")
LIFECYCLE_CONNECTORS = ("workflow.started", "workflow.completed", "workflow.failed")
_ABSENT = object()


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SubscribeRequest(_Wire):
    """Signal ``subscribe`` from a waiting run to an activation."""

    sub_id: str = Field(description="Deterministic: the run's workflow id, run id and a per-run counter.")
    entry: str = Field(description="Trigger entry name (`trigger.name`) of the activation's Workfile.")
    run_workflow_id: str = Field(description="Workflow id of the waiting run: where the event is signalled.")
    match: dict[str, Any] = Field(default_factory=dict, description="Dotted payload path -> expected value.")
    expires_at: datetime | None = Field(default=None, description="The run's wait deadline; no match after it.")


class UnsubscribeRequest(_Wire):
    """Signal ``unsubscribe``: the run stopped waiting (timeout, cancellation)."""

    sub_id: str
    run_workflow_id: str


class SubscriptionEvent(_Wire):
    """Signal ``wfi.subscription_event`` to a waiting run: its event, or the end of its subscription."""

    sub_id: str
    kind: Literal["event", "ended"]
    entry: str
    delivery_id: str | None = None
    payload: Any = None
    reason: Literal["expired", "cancelled", "refused", "unknown"] | None = None
    message: str | None = None


class LifecycleEvent(_Wire):
    """Signal ``lifecycle_event`` to an activation: one lifecycle event, routed by ``config.workflow``."""

    connector: str = Field(description="workflow.started | workflow.completed | workflow.failed.")
    payload: dict[str, Any]


def activation_workflow_id(workflow: str) -> str:
    """Temporal workflow id of the activation of a workflow identity."""
    return f"{ACTIVATION_ID_PREFIX}{workflow}"


# ---------------------------------------------------------------------- correlation and selection
def path_value(payload: Any, path: str) -> Any:
    """The value at a dotted path, or ``_ABSENT``; list items are addressed by their index."""
    value = payload
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _ABSENT
    return value


def matches(match: dict[str, Any], payload: Any) -> bool:
    """Correlation rule: every path present with a JSON-equal value."""
    for path, expected in match.items():
        found = path_value(payload, path)
        if found is _ABSENT or canonical_key(found) != canonical_key(expected):
            return False
    return True


def is_active(sub: Subscription, now: datetime) -> bool:
    return sub.expires_at is None or now < sub.expires_at


def select(subs: Iterable[Subscription], entry: str, payload: Any, now: datetime) -> Subscription | None:
    """Selection rule: the earliest-registered active subscription of ``entry`` that matches."""
    candidates = [s for s in subs if s.entry == entry and is_active(s, now) and matches(s.match, payload)]
    return min(candidates, key=lambda s: s.seq, default=None)


# ---------------------------------------------------------------------- subscription lifecycle
def subscribe(engine: Core, request: SubscribeRequest, now: datetime) -> None:
    """Register a subscription; a target that cannot serve it ends it at once with a reason."""
    if request.sub_id in engine.state.subscriptions:
        return  # a repeated signal (the run's history replays it) changes nothing
    entry = engine.spec.entry(request.entry)
    problem = _subscribe_problem(engine, entry, request, now)
    if problem is not None:
        engine.record_error(now, "subscription_refused", problem, request.entry)
        _notify(engine, request.sub_id, request.run_workflow_id, request.entry, "refused", problem)
        return
    engine.state.subscriptions[request.sub_id] = Subscription(
        sub_id=request.sub_id, entry=request.entry, run_workflow_id=request.run_workflow_id, match=dict(request.match),
        created_at=now, expires_at=request.expires_at, seq=engine._next_seq(),
    )
    engine._count("subscriptions")


def _subscribe_problem(engine: Core, entry: EntrySpec | None, request: SubscribeRequest, now: datetime) -> str | None:
    if engine.bounded:
        problem = _bounds_problem(engine, request)
        if problem is not None:
            return problem
    names = ", ".join(e.name for e in engine.spec.entries if e.kind in SUBSCRIBABLE_KINDS) or "none"
    if entry is None or entry.kind not in SUBSCRIBABLE_KINDS:
        return (f"workflow {engine.spec.workflow!r} has no external or poll trigger entry {request.entry!r} to wait for; "
                f"its external and poll entries are: {names}")
    if request.expires_at is not None and request.expires_at <= now:
        return f"the wait for {request.entry!r} had already timed out when the activation received it"
    return None


def _bounds_problem(engine: Core, request: SubscribeRequest) -> str | None:
    if len(request.run_workflow_id) > MAX_WORKFLOW_ID_CHARS or len(request.sub_id) > MAX_WORKFLOW_ID_CHARS + 100:
        return f"subscription refused: a workflow id has at most {MAX_WORKFLOW_ID_CHARS} characters"
    if len(request.entry) > MAX_OPERATOR_TEXT_CHARS:
        return "subscription refused: the entry name is too long"
    problem = json_problem(request.match, max_depth=8)
    if problem is not None or json_size(request.match) > MAX_MATCH_BYTES:
        return f"subscription refused: `match` must be JSON of at most {MAX_MATCH_BYTES} bytes ({problem or 'too large'})"
    if len(engine.state.subscriptions) >= MAX_SUBSCRIPTIONS:
        return (f"subscription refused: the activation already has {MAX_SUBSCRIPTIONS} active subscriptions "
                "(the limit); wait again later")
    if engine.carry_blocked is not None:
        return f"subscription refused for now: {engine.carry_blocked}"
    return None


def _oversized(request: UnsubscribeRequest) -> bool:
    return len(request.run_workflow_id) > MAX_WORKFLOW_ID_CHARS or len(request.sub_id) > MAX_WORKFLOW_ID_CHARS + 100


def unsubscribe(engine: Core, request: UnsubscribeRequest, now: datetime) -> None:
    """End a subscription the run stopped waiting on; answer so the run's wait can finish.

    A delivery still unconfirmed will reach the run and ends its wait; otherwise the run gets an
    ``ended`` notice, which is later in its history than any event delivered to it before.
    """
    if engine.bounded and _oversized(request):
        engine._count("unsubscribe_refused")  # no waiting run has such ids: nothing to answer
        return
    sub = engine.state.subscriptions.pop(request.sub_id, None)
    if _delivery_key(request.sub_id) in engine.state.unacked:
        return
    entry = sub.entry if sub is not None else ""
    _notify(engine, request.sub_id, request.run_workflow_id, entry, "cancelled" if sub else "unknown", None)


def expire(engine: Core, now: datetime) -> int:
    """Drop subscriptions past their deadline and tell their runs (the run's own timeout agrees)."""
    due = [s for s in engine.state.subscriptions.values() if not is_active(s, now)]
    for sub in due:
        del engine.state.subscriptions[sub.sub_id]
        _notify(engine, sub.sub_id, sub.run_workflow_id, sub.entry, "expired", None)
    if due:
        engine._count("subscriptions_expired", len(due))
    return len(due)


def next_expiry(engine: Core) -> datetime | None:
    deadlines = [s.expires_at for s in engine.state.subscriptions.values() if s.expires_at is not None]
    return min(deadlines, default=None)


def offer(
    engine: Core, entry: EntrySpec, payload: Any, key: str, digest: str, delivery_id: str | None, now: datetime
) -> tuple[Disposition, str | None, str | None] | None:
    """Deliver an accepted event to the selected subscription, or None when none matches (INIT-8, INIT-9)."""
    if entry.kind not in SUBSCRIBABLE_KINDS or not engine.state.subscriptions:
        return None
    sub = select(engine.state.subscriptions.values(), entry.name, payload, now)
    if sub is None:
        return None
    del engine.state.subscriptions[sub.sub_id]
    event = SubscriptionEvent(sub_id=sub.sub_id, kind="event", entry=entry.name, delivery_id=delivery_id, payload=payload)
    _keep(engine, SignalRun(workflow_id=sub.run_workflow_id, signal=EVENT_SIGNAL, payload=event.model_dump(mode="json"),
                            key=_delivery_key(sub.sub_id)))
    engine._count("delivered_to_subscriptions")
    detail = f"delivered to subscription {sub.sub_id} of run {sub.run_workflow_id}"
    return engine._retain(entry, key, digest, delivery_id, Disposition.DELIVERED, now, detail)


def _delivery_key(sub_id: str) -> str:
    return f"deliver\x1f{sub_id}"


def _notify(engine: Core, sub_id: str, run_workflow_id: str, entry: str, reason: str, message: str | None) -> None:
    event = SubscriptionEvent(sub_id=sub_id, kind="ended", entry=entry, reason=reason, message=message)  # type: ignore[arg-type]
    _keep(engine, SignalRun(workflow_id=run_workflow_id, signal=EVENT_SIGNAL, payload=event.model_dump(mode="json"),
                            key=f"ended\x1f{sub_id}"))


# ---------------------------------------------------------------------- confirmed commands
def _keep(engine: Core, command: SignalRun | PublishEvent) -> None:
    assert command.key is not None
    engine.state.unacked[command.key] = command
    engine.outbox.append(command)


def unacked_commands(engine: Core) -> list[Command]:
    """Everything not confirmed yet: re-issue after a restart or continue-as-new (each is idempotent)."""
    return list(engine.state.unacked.values())


def command_done(engine: Core, key: str, error: str | None, now: datetime) -> None:
    """The shell ran a kept command: forget it; a failed subscription delivery is an initiation error."""
    command = engine.state.unacked.pop(key, None)
    if command is None or error is None:
        return
    if isinstance(command, SignalRun) and key.startswith("deliver\x1f"):
        event = SubscriptionEvent.model_validate(command.payload)
        released = _release(engine, event, now) if engine.bounded else None
        engine.record_error(now, "delivery_failed", f"event {event.delivery_id!r} could not be delivered to run "
                            f"{command.workflow_id} (its subscription {event.sub_id} ended with the run): {error}"
                            + (f"; released to the ordinary pipeline: {released}" if released else ""),
                            event.entry, event.delivery_id)
    else:
        engine._count("notices_undeliverable")


def _release(engine: Core, event: SubscriptionEvent, now: datetime) -> str | None:
    """Take back an event whose subscriber could not be signalled and dispose of it as if no
    subscription had matched (INIT-9): the subscriber was not a waiting run after all."""
    entry = engine.spec.entry(event.entry)
    key = event_key(event.entry, event.delivery_id or "")
    record = engine.state.events.get(key)
    if entry is None or event.delivery_id is None or record is None or record.disposition != Disposition.DELIVERED:
        return None
    del engine.state.events[key]  # its entry in the release queue is skipped by expiry (record gone)
    digest, size = digest_and_size(event.payload)
    disposition, run_key, _ = engine._accept(entry, event.payload, key, digest, now, delivery_id=event.delivery_id,
                                             size=size, offer=False)
    engine._count("subscription_deliveries_released")
    return disposition.value + (f" (run {run_key})" if run_key else "")


# ---------------------------------------------------------------------- lifecycle events
def lifecycle_event_id(run_key: str, transition: str) -> str:
    """Delivery id of a lifecycle event: the run's workflow id and the transition."""
    return f"{run_key}#{transition}"


def lifecycle_payload(
    workflow: str, run: RunRecord, transition: Literal["started", "completed", "failed"], now: datetime
) -> dict[str, Any]:
    causation = run.causation or Causation()
    return {
        "event_id": lifecycle_event_id(run.run_key, transition), "workflow": workflow, "workflow_id": run.run_key,
        "run_id": run.temporal_run_id, "transition": transition,
        "outcome": None if transition == "started" else run.status, "at": now.isoformat(),
        "causation": {"depth": causation.depth, "chain": list(causation.chain)},
    }


def on_run_started(engine: Core, run: RunRecord, now: datetime) -> None:
    """Keep the run's causation (its input is about to be dropped) and publish ``workflow.started``."""
    if run.input is not None:
        run.causation = run.input.initiation.causation
    _publish(engine, "workflow.started", lifecycle_payload(engine.spec.workflow, run, "started", now))


def on_run_finished(engine: Core, run: RunRecord, now: datetime) -> None:
    """Publish ``workflow.completed``, or ``workflow.failed`` with the outcome; never for a dropped run."""
    if run.started_at is None:
        return
    transition = "completed" if run.status == "completed" else "failed"
    _publish(engine, f"workflow.{transition}", lifecycle_payload(engine.spec.workflow, run, transition, now))


def _publish(engine: Core, connector: str, payload: dict[str, Any]) -> None:
    if not engine.spec.policies.lifecycle_events:
        return
    _keep(engine, PublishEvent(key=f"publish\x1f{payload['event_id']}", connector=connector, payload=payload))


def route_lifecycle(engine: Core, event: LifecycleEvent, now: datetime) -> list[DeliveryResult]:
    """Deliver a lifecycle event to every entry of this connector watching its workflow (COMP-3)."""
    upstream = event.payload.get("workflow")
    entries = [e for e in engine.spec.entries if e.connector == event.connector and e.config.get("workflow") == upstream]
    if not entries:
        engine._count("lifecycle_unrouted")
    return [engine.deliver_event(entry, event.payload, now) for entry in entries]
