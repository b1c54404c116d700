"""Deactivating an activation, and activating it again: the pure rules (docs/lifecycle.md).

Deactivation is an operator action, recorded once (``action_id``, also across continue-as-new and
a later re-activation) in ``EngineState.deactivation`` and the operator log. From the task that
applies it:

* Deliveries (``deliver`` / ``deliver_many`` updates, ``deliver_signal``, lifecycle events) are
  refused with disposition ``deactivated``. Receipt is not acceptance (INIT-6): nothing enters the
  dedup set, so the same delivery is accepted normally after a re-activation. Each refusal is
  counted and recorded as an initiation error (a signalled delivery has no other trace).
* Schedules stop (inactive, reason ``deactivated``) and polls stop (paused; a poll in flight is
  abandoned: its response is discarded, the cursor stays where the last retained disposition put
  it, POLL-8, POLL-10). Waiting runs' subscriptions end with reason ``refused``; new ones are
  refused. Operator actions that would start new work are refused (operator.REFUSED_WHEN_DEACTIVATED).

Queued work is settled by ``queued``:

* ``drain``: pending runs start under the ordinary rules (queue keys, overlap, concurrency) and open
  batches close at their ``max_wait`` deadline, never earlier (BATCH-3); a batch without
  ``max_wait`` can never fill any more and is closed at once. Every run, running ones included,
  is awaited.
* ``cancel``: pending runs (queued behind a key, the overlap policy or the concurrency cap, and
  closed batches waiting for admission) and open batches are dropped: each of their events keeps
  disposition ``dropped`` and its retention clock starts (BATCH-5, EXT-5).

Running runs, by ``running`` (``cancel`` / ``terminate`` need ``queued=cancel``): ``leave`` them
alone (not watched any more once the activation completes: no outcome recorded, no lifecycle event
published; a re-activation watches them again), or request their cancellation / termination (a
run still starting is controlled once started) and await their outcomes. A run that ignores its
cancellation keeps the activation deactivating: escalate to ``terminate``.

The activation is *settled* when nothing is pending or starting, no batch is open, no run is
running (``leave``: except the ones left alone), and every kept notice and lifecycle event was
sent. The shell then completes the workflow with the final state as its result.

A second deactivation while deactivating can only escalate (drain -> cancel; leave -> cancel ->
terminate); anything else changes nothing.

Re-activation (:func:`on_start`, :func:`restart`): a new workflow run started with a deactivated activation's final
state resumes from it: dedup set and retention clocks, cursors, held items, runs left running
(watched again), operator log and action ids. Its schedules start afresh from the re-activation
instant: occurrences while it was deactivated belonged to no installed activation, so they are
neither missed nor caught up. A changed binding is a rebind (INIT-4, INIT-5).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from ..activation import EntrySpec
from . import _batch, _throttle, operator
from ._keys import entry_delivery_id, identity_text
from ._offer import notify
from ._pipeline import Pipeline, UnknownEntry
from ._schedule import refresh_next
from ._subscriptions import LifecycleEvent, SubscribeRequest
from ._types import ControlRun, Deactivation, DeliveryResult, Disposition, RunRecord

QUEUED = ("drain", "cancel")
RUNNING = ("leave", "cancel", "terminate")


class Request(Protocol):
    """Read-only view of a request (a wire model's Literal fields are str here)."""

    @property
    def queued(self) -> str: ...

    @property
    def running(self) -> str: ...

    @property
    def action_id(self) -> str | None: ...

    @property
    def note(self) -> str | None: ...


@dataclass(frozen=True)
class Outcome:
    """What a deactivate request did: ``status`` is deactivating, deactivated or refused."""

    ok: bool
    message: str
    status: str
    remaining: dict[str, int] = field(default_factory=dict)


def deactivate(engine: Pipeline, req: Request, now: datetime) -> Outcome:
    """Apply (or escalate) a deactivation; a repeated ``action_id`` changes nothing."""
    problem = _problem(req)
    if problem is not None:
        return Outcome(False, problem, "refused", remaining(engine))
    if operator.already_applied(engine, req.action_id):
        return Outcome(True, "already applied", status(engine) or "active", remaining(engine))
    current = engine.state.deactivation
    message = _escalate(engine, current, req, now) if current is not None else _start(engine, req, now)
    progress(engine)
    operator.record(engine, "deactivate", message, req.action_id, now)
    return Outcome(True, message, "deactivating", remaining(engine))


def _problem(req: Request) -> str | None:
    if req.queued not in QUEUED or req.running not in RUNNING:
        return f"queued must be one of {', '.join(QUEUED)} and running one of {', '.join(RUNNING)}"
    if req.queued == "drain" and req.running != "leave":
        return ("drain lets every run finish, so running runs cannot be cancelled or terminated with it; "
                "use queued=cancel (`wfi deactivate --cancel-queued --running cancel|terminate`)")
    return None


def _start(engine: Pipeline, req: Request, now: datetime) -> str:
    state = engine.state
    d = Deactivation(requested_at=now, queued=req.queued, running=req.running, action_id=req.action_id,  # type: ignore[arg-type]
                     note=req.note, spec=engine.spec)
    state.deactivation = d
    for st in state.schedules.values():
        if st.active:
            st.active, st.inactive_reason = False, f"deactivated at {now.isoformat()}"
    for name, poll in state.polls.items():
        if not poll.paused:
            poll.paused = True
            d.paused_polls.append(name)
        poll.in_flight, poll.poll_requested = None, False  # a response still coming is discarded
    for sub in list(state.subscriptions.values()):
        del state.subscriptions[sub.sub_id]
        notify(engine, sub.sub_id, sub.run_workflow_id, sub.entry, "refused", _refusal(engine))
    _settle_queued(engine, d, now)
    return f"deactivating: {_how(d)}"


def _escalate(engine: Pipeline, d: Deactivation, req: Request, now: datetime) -> str:
    queued = max(d.queued, req.queued, key=QUEUED.index)
    running = max(d.running, req.running, key=RUNNING.index)
    if (queued, running) == (d.queued, d.running):
        return f"already deactivating since {d.requested_at.isoformat()}: {_how(d)}"
    was = _how(d)
    if queued != d.queued:
        d.queued = queued  # type: ignore[assignment]
        _settle_queued(engine, d, now)
    if running != d.running:
        d.controls_applied = d.controls_not_applied = 0  # the runs are controlled again, the new way
    d.running = running  # type: ignore[assignment]
    return f"deactivating, escalated from {was} to {_how(d)}"


def _how(d: Deactivation) -> str:
    queued = "queued work drains" if d.queued == "drain" else "queued work dropped"
    running = {"leave": "running runs left alone", "cancel": "running runs cancelled",
               "terminate": "running runs terminated"}[d.running]
    return f"{queued}, {running}"


def _settle_queued(engine: Pipeline, d: Deactivation, now: datetime) -> None:
    state = engine.state
    if d.queued == "drain":
        for bkey in [k for k, b in state.batches.items() if b.deadline is None]:
            _batch.close(engine, bkey, now)  # size-only: nothing can fill it any more
            d.closed_batches += 1
        return
    for bkey, batch in list(state.batches.items()):
        _drop_events(engine, [e.event_key for e in batch.events], now)
        del state.batches[bkey]
        d.dropped_batches += 1
    for run in [r for r in state.runs.values() if r.status == "pending"]:
        _drop_run(engine, run, now)
        d.dropped_runs += 1


def _drop_run(engine: Pipeline, run: RunRecord, now: datetime) -> None:
    """Drop a pending run without advancing its queue or the waiting list: nothing may start now."""
    state = engine.state
    if run.run_key in state.waiting:
        state.waiting.remove(run.run_key)
    if state.throttle.lines:
        _throttle.leave(state.throttle, run)
    if run.queue_key is not None:
        queue = state.queues.get(run.queue_key, [])
        if run.run_key in queue:
            queue.remove(run.run_key)
        if not queue:
            state.queues.pop(run.queue_key, None)
    _drop_events(engine, run.event_keys, now)
    run.status, run.ended_at, run.input, run.waiting_for = "dropped", now, None, None
    del state.runs[run.run_key]
    engine.recent_runs.append(run)
    engine.count("runs_dropped")


def _drop_events(engine: Pipeline, keys: list[str], now: datetime) -> None:
    for key in keys:
        record = engine.state.events.get(key)
        if record is not None:
            record.disposition, record.detail = Disposition.DROPPED, "dropped: the activation was deactivated"
            engine.release(key, now)


def progress(engine: Pipeline) -> None:
    """Request cancellation / termination of running runs not controlled yet (each loop of the shell)."""
    d = engine.state.deactivation
    if d is None or d.completed_at is not None or d.running == "leave":
        return
    want = "cancel" if d.running == "cancel" else "terminate"
    for run in engine.in_flight():
        if run.status != "running" or d.controlled.get(run.run_key) in (want, "terminate"):
            continue
        d.controlled[run.run_key] = want  # type: ignore[assignment]
        run.cancel_requested = True
        engine.outbox.append(ControlRun(run_key=run.run_key, action=want,  # type: ignore[arg-type]
                                        reason=f"activation of {engine.spec.workflow} deactivated"))


def controlled(engine: Pipeline, run_keys: list[str], results: list[str]) -> None:
    """Count what a control activity answered for the deactivation's runs (its progress)."""
    d = engine.state.deactivation
    if d is None or d.completed_at is not None:
        return
    for key, result in zip(run_keys, results, strict=False):
        if key not in d.controlled:
            continue  # an overlap policy's control, not the deactivation's
        if result == "applied":
            d.controls_applied += 1
        else:
            d.controls_not_applied += 1


def remaining(engine: Pipeline) -> dict[str, int]:
    runs = list(engine.state.runs.values())
    return {
        "pending_runs": sum(r.status == "pending" for r in runs),
        "starting_runs": sum(r.status == "starting" for r in runs),
        "running_runs": sum(r.status == "running" for r in runs),
        "open_batches": len(engine.state.batches),
        "unconfirmed": len(engine.state.unacked),
    }


def settled(engine: Pipeline) -> bool:
    """Whether a deactivation has nothing left to wait for (the shell then completes the workflow)."""
    d = engine.state.deactivation
    if d is None or engine.state.batches or engine.state.unacked:
        return False
    # Every run left in state is pending, starting or running; only `leave` does not wait for it.
    return all(run.status == "running" and d.queued == "cancel" and d.running == "leave"
               for run in engine.state.runs.values())


def finish(engine: Pipeline, now: datetime) -> dict[str, Any]:
    """Mark the deactivation complete; returns its record for the workflow's result."""
    d = engine.state.deactivation
    assert d is not None
    d.completed_at = now
    d.left_running = sum(1 for r in engine.state.runs.values() if r.run_key not in d.controlled)
    operator.record(engine, "deactivated", (
        f"deactivated: {d.dropped_runs} pending run(s) and {d.dropped_batches} open batch(es) dropped, "
        f"{len(d.controlled)} running run(s) {'cancelled' if d.running == 'cancel' else 'terminated'}, "
        f"{d.left_running} left running, {d.refused} delivery(ies) refused"), None, now)
    return d.model_dump(mode="json", exclude={"spec"})


def status(engine: Pipeline) -> str | None:
    """``deactivating`` / ``deactivated`` for the WfiState search attribute, else None."""
    d = engine.state.deactivation
    if d is None:
        return None
    return "deactivated" if d.completed_at is not None else "deactivating"


def _refusal(engine: Pipeline) -> str:
    d = engine.state.deactivation
    assert d is not None
    return (f"the activation of {engine.spec.workflow!r} was deactivated at {d.requested_at.isoformat()}: it accepts "
            "nothing; activate its Workfile again (`wfi activate WORKFILE --deployment FILE`), then redeliver")


def refuse(engine: Pipeline, entry_name: str | None, payload: Any, now: datetime) -> DeliveryResult | None:
    """The ``deactivated`` disposition of a delivery, or None while the activation is installed."""
    if engine.state.deactivation is None:
        return None
    try:
        entry = engine.resolve_entry(entry_name)
    except UnknownEntry:
        name, ident = entry_name, None
    else:
        name, ident = entry.name, _delivery_id(entry, payload)
    message = _refusal(engine)
    _count_refusal(engine, f"delivery {ident!r} refused" if ident else "a delivery refused", message, name, ident, now)
    return DeliveryResult(entry=name, delivery_id=ident, disposition=Disposition.DEACTIVATED, message=message,
                          activation_id=engine.spec.activation_id)


def refuse_lifecycle(engine: Pipeline, event: LifecycleEvent, now: datetime) -> bool:
    """Refuse a lifecycle event of another run (True) while deactivated."""
    if engine.state.deactivation is None:
        return False
    event_id = str(event.payload.get("event_id", "?"))
    _count_refusal(engine, f"lifecycle event {event_id!r} refused", _refusal(engine), event.connector, event_id, now)
    return True


def refuse_subscription(engine: Pipeline, request: SubscribeRequest, now: datetime) -> bool:
    """End a new subscription at once with reason ``refused`` (True) while deactivated."""
    if engine.state.deactivation is None:
        return False
    message = _refusal(engine)
    notify(engine, request.sub_id, request.run_workflow_id, request.entry, "refused", message)
    engine.record_error(now, "subscription_refused", message, request.entry)
    return True


def _count_refusal(engine: Pipeline, what: str, message: str, entry: str | None, ident: str | None, now: datetime) -> None:
    d = engine.state.deactivation
    assert d is not None
    d.refused += 1
    engine.count("refused_deactivated")
    engine.record_error(now, "deactivated", f"{what}: {message}", entry, ident)


def _delivery_id(entry: EntrySpec, payload: Any) -> str | None:
    raw = entry_delivery_id(entry, payload)
    return identity_text(raw) if raw is not None else None


def on_start(engine: Pipeline) -> Deactivation | None:
    """A new run starts with this state. A completed deactivation is returned (its binding restored)
    for the engine to activate again (it rebinds when the binding changed, then :func:`restart`).

    A run continued-as-new while still deactivating carries an unfinished deactivation: it goes on,
    and its control requests are issued again (one may not have left the previous run; a repeat
    of an applied one changes nothing).
    """
    d = engine.state.deactivation
    if d is None:
        return None
    if d.completed_at is None:
        again = 0
        for run in engine.in_flight():
            if run.status == "running" and run.run_key in d.controlled:
                again += 1
                engine.outbox.append(ControlRun(run_key=run.run_key, action=d.controlled[run.run_key],
                                                reason=f"activation of {engine.spec.workflow} deactivated"))
        # The runs controlled again are counted when their answers come; the others have closed.
        d.controls_applied, d.controls_not_applied = len(d.controlled) - again, 0
        return None
    engine.state.deactivation = None
    engine.spec = d.spec
    return d


def restart(engine: Pipeline, d: Deactivation, now: datetime) -> None:
    """Activated again after ``d``: schedules restart from now, polls resume, the rest is kept."""
    state = engine.state
    for name, st in state.schedules.items():
        st.last_instant, st.missed_through, st.gap_admitted = now, None, 0
        st.active, st.inactive_reason = True, None
        refresh_next(st, engine.parsed_schedule(name))
    for name, poll in state.polls.items():
        if name in d.paused_polls:
            poll.paused = False
        poll.next_poll_at, poll.in_flight = now, None
    assert d.completed_at is not None
    operator.record(engine, "reactivate", (
        f"activated again as {engine.spec.activation_id}; deactivated {d.requested_at.isoformat()} .. "
        f"{d.completed_at.isoformat()}: schedules restart from now, dedup set, cursors and runs left running kept"),
        None, now)
