"""Subscriptions (INIT-8..10) and lifecycle events (COMP-3, COMP-5), inside the pure engine.

A run waiting in :func:`workflows.runapi.wait_for` registers a :class:`Subscription` with the
activation of the workflow whose trigger it waits on; the acceptance pipeline offers each accepted
external or poll event of that entry to the subscriptions active at that moment (``_offer``:
correlation and selection, INIT-8, INIT-9). This module is the source on top: it registers, ends
and expires subscriptions, confirms kept commands, and routes lifecycle events into the pipeline.

Delivery is a :class:`SignalRun` kept in ``EngineState.unacked`` until the shell confirms the
signal, so a worker crash or continue-as-new re-issues it (INIT-7); the run side ignores a repeat.

Verification: a ``subscribe`` signal can come from anyone with a Temporal client, so
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

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..activation import EntrySpec
from ..limits import MAX_MATCH_BYTES, MAX_OPERATOR_TEXT_CHARS, MAX_SUBSCRIPTIONS, MAX_WORKFLOW_ID_CHARS, clip, json_problem, json_size
from ..runinput import Causation
from . import _lifecycle
from ._keys import digest_and_size, event_key
from ._lanes import shard_workflow
from ._offer import SUBSCRIBABLE_KINDS, UNSUBSCRIBE, SubscriptionEvent, delivery_key, end_copies, is_active, notify, replicated
from ._pipeline import Pipeline
from ._types import DeliveryResult, Disposition, Intake, SignalRun, Subscription

SUBSCRIBE_SIGNAL = "subscribe"
UNSUBSCRIBE_SIGNAL = UNSUBSCRIBE
LIFECYCLE_SIGNAL = "lifecycle_event"


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SubscribeRequest(_Wire):
    """Signal ``subscribe`` from a waiting run to an activation."""

    sub_id: str = Field(description="Deterministic: the run's workflow id, run id and a per-run counter.")
    entry: str = Field(description="Trigger entry name (`trigger.name`) of the activation's Workfile.")
    run_workflow_id: str = Field(description="Workflow id of the waiting run: where the event is signalled.")
    match: dict[str, Any] = Field(default_factory=dict, description="Dotted payload path -> expected value.")
    expires_at: datetime | None = Field(default=None, description="The run's wait deadline; no match after it.")
    replica: bool = Field(default=False, description="Sent by shard 0 of a sharded activation to its other shards: "
                          "a copy whose matches are routed to shard 0 (core.engine._offer).")


class UnsubscribeRequest(_Wire):
    """Signal ``unsubscribe``: the run stopped waiting (timeout, cancellation)."""

    sub_id: str
    run_workflow_id: str
    replica: bool = Field(default=False, description="Sent by shard 0: drop the copy, nothing to answer.")


class LifecycleEvent(_Wire):
    """Signal ``lifecycle_event`` to an activation: one lifecycle event, routed by ``config.workflow``."""

    connector: str = Field(description="workflow.started | workflow.completed | workflow.failed.")
    payload: dict[str, Any]


def transition_event(
    workflow: str, run_key: str, run_id: str | None, status: str | None, causation: Causation | None, at: datetime
) -> LifecycleEvent:
    """The lifecycle event of a run that started (``status`` None) or ended with ``status``: what the
    engine would keep for it (``_lifecycle.lifecycle_payload``), for an activity that publishes it."""
    payload = _lifecycle.lifecycle_payload(workflow, run_key, run_id, status, causation, at)
    return LifecycleEvent(connector=f"workflow.{payload['transition']}", payload=payload)


# ---------------------------------------------------------------------- subscription lifecycle
def subscribe(engine: Pipeline, request: SubscribeRequest, now: datetime, *, refuse_sharded: bool = False) -> None:
    """Register a subscription; a target that cannot serve it ends it at once with a reason."""
    if request.sub_id in engine.state.subscriptions:
        return  # a repeated signal (the run's history replays it) changes nothing
    if request.replica and (engine.spec.shards <= 1 or engine.spec.shard == 0):  # only shard 0 makes copies
        engine.record_error(now, "subscription_refused", f"a copy of subscription {request.sub_id!r} was sent to "
                            f"shard {engine.spec.shard}, which keeps the originals: ignored", request.entry)
        return
    entry = engine.spec.entry(request.entry)
    problem = _subscribe_problem(engine, entry, request, now)
    if problem is None and refuse_sharded and entry is not None and entry.kind == "external":
        problem = (f"entry {entry.name!r} of workflow {engine.spec.workflow!r} takes its events on {engine.spec.shards} "
                   "shards (scale.shards), so no one of them sees every event to wait for; wait for a poll entry, or "
                   "deploy the workflow without scale")
    if problem is not None:
        engine.record_error(now, "subscription_refused", problem, request.entry)
        if not request.replica:  # shard 0 answers the run
            notify(engine, request.sub_id, request.run_workflow_id, request.entry, "refused", problem)
        return
    engine.state.subscriptions[request.sub_id] = Subscription(
        sub_id=request.sub_id, entry=request.entry, run_workflow_id=request.run_workflow_id, match=dict(request.match),
        created_at=now, expires_at=request.expires_at, seq=engine.next_seq(), replica=request.replica,
    )
    engine.count("subscription_copies" if request.replica else "subscriptions")
    if not request.replica and replicated(engine, entry):
        _copy(engine, request, range(1, engine.spec.shards))  # each shard offers its events to a copy (_offer)


def copy_to_new_shards(engine: Pipeline, before: int) -> None:
    """Shard 0 split from ``before`` shards: the new shards get copies of its active subscriptions."""
    for sub in list(engine.state.subscriptions.values()):
        if not sub.replica and replicated(engine, engine.spec.entry(sub.entry)):
            request = SubscribeRequest(sub_id=sub.sub_id, entry=sub.entry, run_workflow_id=sub.run_workflow_id,
                                       match=sub.match, expires_at=sub.expires_at)
            _copy(engine, request, range(before, engine.spec.shards))


def _copy(engine: Pipeline, request: SubscribeRequest, shards: range) -> None:
    payload = request.model_copy(update={"replica": True}).model_dump(mode="json")
    for shard in shards:
        _lifecycle.keep(engine, SignalRun(workflow_id=shard_workflow(engine.spec.workflow, shard), signal=SUBSCRIBE_SIGNAL,
                                          payload=payload, key=f"copy\x1f{shard}\x1f{request.sub_id}"))


def _subscribe_problem(engine: Pipeline, entry: EntrySpec | None, request: SubscribeRequest, now: datetime) -> str | None:
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


def _bounds_problem(engine: Pipeline, request: SubscribeRequest) -> str | None:
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


def unsubscribe(engine: Pipeline, request: UnsubscribeRequest, now: datetime) -> None:
    """End a subscription the run stopped waiting on; answer so the run's wait can finish.

    A delivery still unconfirmed will reach the run and ends its wait; otherwise the run gets an
    ``ended`` notice, which is later in its history than any event delivered to it before.
    """
    if engine.bounded and _oversized(request):
        engine.count("unsubscribe_refused")  # no waiting run has such ids: nothing to answer
        return
    if request.replica:  # shard 0 dropped its subscription: drop the copy, answer nobody
        engine.state.subscriptions.pop(request.sub_id, None)
        return
    sub = engine.state.subscriptions.pop(request.sub_id, None)
    if sub is not None:
        end_copies(engine, sub)
    if delivery_key(request.sub_id) in engine.state.unacked:
        return
    entry = sub.entry if sub is not None else ""
    notify(engine, request.sub_id, request.run_workflow_id, entry, "cancelled" if sub else "unknown", None)


def expire(engine: Pipeline, now: datetime) -> int:
    """Drop subscriptions past their deadline and tell their runs (the run's own timeout agrees)."""
    due = [s for s in engine.state.subscriptions.values() if not is_active(s, now)]
    for sub in due:
        del engine.state.subscriptions[sub.sub_id]
        if not sub.replica:  # a copy ends with shard 0's, which tells the run
            end_copies(engine, sub)
            notify(engine, sub.sub_id, sub.run_workflow_id, sub.entry, "expired", None)
    if due:
        engine.count("subscriptions_expired", len([s for s in due if not s.replica]))
    return len(due)


def next_expiry(engine: Pipeline) -> datetime | None:
    deadlines = [s.expires_at for s in engine.state.subscriptions.values() if s.expires_at is not None]
    return min(deadlines, default=None)


# ---------------------------------------------------------------------- confirmed commands
def command_done(engine: Pipeline, key: str, error: str | None, now: datetime) -> None:
    """The shell ran a kept command: forget it; a failed subscription delivery is an initiation error.

    A subscription delivery's record then says what happened: signalled to the run, or (the run does
    not exist or has ended) released into the ordinary pipeline, and what it became there."""
    command = _lifecycle.forget(engine, key)
    if command is None:
        return
    if error is None:
        if isinstance(command, SignalRun) and key.startswith("deliver\x1f") and engine.bounded:
            _settle(engine, SubscriptionEvent.model_validate(command.payload), command.workflow_id, None)
        return
    if isinstance(command, SignalRun) and key.startswith("deliver\x1f"):
        event = SubscriptionEvent.model_validate(command.payload)
        released = _release(engine, event, now) if engine.bounded else None
        if released:
            _settle(engine, event, command.workflow_id, error)
        engine.record_error(now, "delivery_failed", f"event {event.delivery_id!r} could not be delivered to run "
                            f"{command.workflow_id} (its subscription {event.sub_id} ended with the run): {error}"
                            + (f"; released to the ordinary pipeline: {released}" if released else ""),
                            event.entry, event.delivery_id)
    else:
        engine.count("notices_undeliverable")


def _settle(engine: Pipeline, event: SubscriptionEvent, run: str, error: str | None) -> None:
    """Write into the event's record whether its run was signalled, or why not and what it became."""
    record = engine.state.events.get(event_key(event.entry, event.delivery_id or ""))
    if record is None:
        return
    if error is None and record.disposition == Disposition.DELIVERED:
        record.detail = clip(f"delivered to subscription {event.sub_id} of run {run}: signalled")
    elif error is not None:
        became = record.disposition.value + (f" (run {record.run_key})" if record.run_key else "")
        record.detail = clip(f"{became}: taken back from subscription {event.sub_id}, whose run {run} could not be "
                             f"signalled ({error}), and disposed as if no subscription had matched"
                             + (f"; {record.detail}" if record.detail else ""))


def _release(engine: Pipeline, event: SubscriptionEvent, now: datetime) -> str | None:
    """Take back an event whose subscriber could not be signalled and dispose of it as if no
    subscription had matched (INIT-9): the subscriber was not a waiting run after all."""
    entry = engine.spec.entry(event.entry)
    key = event_key(event.entry, event.delivery_id or "")
    record = engine.state.events.get(key)
    if entry is None or event.delivery_id is None or record is None or record.disposition != Disposition.DELIVERED:
        return None
    del engine.state.events[key]  # its entry in the release queue is skipped by expiry (record gone)
    digest, size = digest_and_size(event.payload)
    outcome = engine.accept(entry, event.payload, key, digest, now, delivery_id=event.delivery_id, size=size, offer=False)
    engine.count("subscription_deliveries_released")
    return outcome.disposition.value + (f" (run {outcome.run_key})" if outcome.run_key else "")


# ---------------------------------------------------------------------- lifecycle events
def route_lifecycle(engine: Pipeline, event: LifecycleEvent, now: datetime) -> list[DeliveryResult]:
    """Deliver a lifecycle event to every entry of this connector watching its workflow (COMP-3)."""
    upstream = event.payload.get("workflow")
    entries = [e for e in engine.spec.entries if e.connector == event.connector and e.config.get("workflow") == upstream]
    if not entries:
        engine.count("lifecycle_unrouted")
    # Its publisher was told it is durable: a deferral is recorded for the operator (deferred_signal).
    intake = Intake(signalled=engine.signals_kept)
    return [engine.deliver_event(entry, event.payload, now, intake=intake) for entry in entries]
