"""The subscription step of the acceptance pipeline (INIT-8, INIT-9): correlation, selection, delivery.

A run waiting in :func:`workflows.runapi.wait_for` holds a subscription (``_subscriptions``
registers and ends them). When the activation accepts an external or poll event of that entry,
the event is offered to the subscriptions active *at that moment* only:

* **Correlation:** ``match`` maps dotted payload paths to values; a subscription matches when every
  path exists in the payload and its value equals the expected one under JSON-value equality
  (:func:`canonical_key`: key order irrelevant, ``1 == 1.0``). An empty ``match`` matches every event.
* **Selection:** exactly one subscription receives an event: the earliest registered (lowest
  ``seq``) active match. The event is consumed by it (disposition ``delivered``) and starts no run.
* An event that matches nothing goes on through the pipeline and is never held for a subscription
  established later (INIT-9).

Delivery is a kept :class:`SignalRun` (``_lifecycle.keep``), re-issued until the shell confirms it.

A sharded activation (core.sharding) judges an external event on its id's shard, but runs subscribe
to shard 0. Shard 0 keeps the subscriptions and sends each other shard a *copy* (``replica``, a kept
signal; dropped the same way when the subscription ends). An event a copy matches is recorded there
as ``routed`` to shard 0, which selects among its own subscriptions active then (an event that no
longer matches one there goes on through shard 0's pipeline, or to its queue key's shard). A
subscription is active on a shard from the moment its copy is registered there.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .._expr import canonical_key
from ..activation import EntrySpec
from ._lanes import shard_workflow
from ._ledger import Ledger
from ._lifecycle import keep
from ._types import ROUTED_TO, Disposition, Outcome, SignalRun, Subscription

EVENT_SIGNAL = "wfi.subscription_event"
UNCONFIRMED = ("should that run not exist or have ended, the event is disposed as if no subscription had matched "
               "(the activation's record of the delivery, `wfi state --events`, then says what it became)")
SUBSCRIBABLE_KINDS = ("external", "poll")
UNSUBSCRIBE = "unsubscribe"  # the signal (_subscriptions.UNSUBSCRIBE_SIGNAL), to drop a copy
_ABSENT = object()


class SubscriptionEvent(BaseModel):
    """Signal ``wfi.subscription_event`` to a waiting run: its event, or the end of its subscription."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sub_id: str
    kind: Literal["event", "ended"]
    entry: str
    delivery_id: str | None = None
    payload: Any = None
    reason: Literal["expired", "cancelled", "refused", "unknown"] | None = None
    message: str | None = None


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


def offer(
    ledger: Ledger, entry: EntrySpec, payload: Any, key: str, digest: str, delivery_id: str | None, now: datetime
) -> Outcome | None:
    """Deliver an accepted event to the selected subscription, or None when none matches (INIT-8, INIT-9)."""
    if entry.kind not in SUBSCRIBABLE_KINDS or not ledger.state.subscriptions:
        return None
    sub = select(ledger.state.subscriptions.values(), entry.name, payload, now)
    if sub is None:
        return None
    if sub.replica:  # a copy of shard 0's subscription: shard 0 selects, among all of them (sharded)
        return Outcome(Disposition.ROUTED, None, f"{ROUTED_TO}0")
    del ledger.state.subscriptions[sub.sub_id]
    end_copies(ledger, sub)
    event = SubscriptionEvent(sub_id=sub.sub_id, kind="event", entry=entry.name, delivery_id=delivery_id, payload=payload)
    keep(ledger, SignalRun(workflow_id=sub.run_workflow_id, signal=EVENT_SIGNAL, payload=event.model_dump(mode="json"),
                           key=delivery_key(sub.sub_id)))
    ledger.count("delivered_to_subscriptions")
    # What happened so far, and what will: the run is signalled after this answer, and only then is
    # it known to exist (anyone can send ``subscribe``). _subscriptions.command_done settles the record.
    detail = (f"delivered to subscription {sub.sub_id} of run {sub.run_workflow_id}, to be signalled next; "
              f"{UNCONFIRMED}")
    ledger.retain(entry, key, digest, delivery_id, Disposition.DELIVERED, now, detail)
    return Outcome(Disposition.DELIVERED, None, detail)


def replicated(ledger: Ledger, entry: EntrySpec | None) -> bool:
    """Whether shard 0 of a sharded activation copies a subscription of ``entry`` to its other shards
    (an external entry's events are judged on every shard, a poll entry's on shard 0 alone): an event
    a copy matches is routed to shard 0, which selects among its subscriptions (INIT-10)."""
    spec = ledger.spec
    return spec.shards > 1 and spec.shard == 0 and entry is not None and entry.kind == "external"


def end_copies(ledger: Ledger, sub: Subscription) -> None:
    """A subscription of shard 0 ended (delivered, expired, cancelled): drop its copies elsewhere."""
    if sub.replica or not replicated(ledger, ledger.spec.entry(sub.entry)):
        return
    payload = {"sub_id": sub.sub_id, "run_workflow_id": sub.run_workflow_id, "replica": True}
    for shard in range(1, ledger.spec.shards):
        keep(ledger, SignalRun(workflow_id=shard_workflow(ledger.spec.workflow, shard), signal=UNSUBSCRIBE,
                               payload=payload, key=f"uncopy\x1f{shard}\x1f{sub.sub_id}"))


def delivery_key(sub_id: str) -> str:
    """Key of a subscription delivery kept until confirmed."""
    return f"deliver\x1f{sub_id}"


def notify(ledger: Ledger, sub_id: str, run_workflow_id: str, entry: str, reason: str, message: str | None) -> None:
    """Tell a waiting run its subscription ended (expired, cancelled, refused, unknown)."""
    event = SubscriptionEvent(sub_id=sub_id, kind="ended", entry=entry, reason=reason, message=message)  # type: ignore[arg-type]
    keep(ledger, SignalRun(workflow_id=run_workflow_id, signal=EVENT_SIGNAL, payload=event.model_dump(mode="json"),
                           key=f"ended\x1f{sub_id}"))
