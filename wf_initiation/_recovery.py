"""Re-activation after a run that ended without a deactivation (terminated, failed, timed out): the
complete state of the closed run, recovered from its history, as the arguments of its new run.

How: the closed run's history is replayed here, on the client, with the client's data converter (a
team's codec decrypts it; nothing is written anywhere), by the activation workflow of this build
(``wf_initiation/_ended.py``): the replayed workflow holds the engine state the run was in after its
last completed workflow task, exactly as a worker held it. That state is what the new run starts
from, as continue-as-new would have carried it. Why replay rather than re-feeding the deliveries
into the engine: the engine's state is also made of what every activity reported (runs started,
outcomes, polls), of time and of the order of all of it; replaying the recorded history with the
recorded results is the one way that reproduces it, and the recorded histories of tests/histories
prove that this build replays what earlier builds wrote.

What the replay cannot hold, and what is done about it:

* Signalled deliveries the run never took (they arrived after its last completed task, or waited in
  its inbox): their senders were told they are durable. Each one whose id the recovered state does
  not know is signalled again to the new run (:attr:`Recovery.resend`), where it is disposed as any
  delivery: an id taken meanwhile is ``duplicate``.
* A split's child: a parent's lane notice sent while the child was closed was lost; the child takes
  the parent's word from the parent's own state before it starts (``core.engine.recovery``).
* A history this build cannot replay (a nondeterminism error): the run starts from the state its
  run began with, and the note says what that loses (``wf_initiation/_reactivation.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode

from wf_initiation._ended import replayed
from wf_initiation._reactivation import recorded, restart_args
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.engine import event_key
from wf_initiation.core.engine import recovery as lanes
from wf_initiation.core.sharding import is_child, parent_of
from wf_initiation.plugin import compose_data_converter
from wf_initiation.wire import DELIVER_SIGNAL, DeliveryRequest, shard_workflow_id

# At most this many untaken signalled deliveries are signalled again (the server's cap per run is 10,000).
MAX_RESEND = 5_000

AskState = Callable[[int], Awaitable[dict[str, Any]]]
"""The full state (``STATE_QUERY``) of shard ``k`` of the same activation."""


@dataclass(frozen=True)
class Recovery:
    """How the closed run's activation starts again."""

    args: list[Any]  # [spec, carried state] of the new run
    note: str  # what holds, in words (wfi activate prints it)
    resend: list[DeliveryRequest] = field(default_factory=list)  # signalled deliveries to signal again
    complete: bool = True  # the whole state was recovered (False: only what the run began with)


async def recover(client: Client, closed: Any, history: WorkflowHistory, spec: ActivationSpec,
                  ask_state: AskState | None = None) -> Recovery:
    """The new run's arguments after ``closed`` ended without a deactivation.

    Args:
        client: The client (its data converter, with the team's codec, decodes the history).
        closed: The closed run's description.
        history: The closed run's history.
        spec: The spec being activated (its ``activate`` update follows the start).
        ask_state: Reads another shard's state (a split's child asks its parent); None: not asked.
    """
    try:
        instance = await replayed(client, history)
    except Exception as exc:  # e.g. a history this build cannot replay: the run's start input, said so
        args, note = await restart_args(client.data_converter, closed, history.events, spec)
        return Recovery(args, f"{note} (its history could not be replayed here: {type(exc).__name__})", complete=False)
    engine = instance._engine
    carried = (instance._pending_spec or instance._spec).as_shard(instance._shard)
    resend = await _untaken_signals(client, history, instance)
    lane_note = await _rejoin_lanes(instance, carried, ask_state)
    return Recovery([carried, engine.encode_state()], _note(closed, history, resend, lane_note), resend)


def _note(closed: Any, history: WorkflowHistory, resend: list[DeliveryRequest], lane_note: str | None) -> str:
    status = closed.status.name.lower().replace("_", " ") if closed.status else "closed"
    when = closed.close_time.isoformat(timespec="seconds") if closed.close_time else "an unknown time"
    note = (f"re-activated after run {closed.run_id} was {status} at {when}, with its complete state replayed from its "
            f"history ({recorded(history.events[1:])} since its last continue-as-new included): every delivery it "
            "accepted is kept, so its redelivery is `duplicate` and starts no second run, also after a rebind")
    if resend:
        note += f"; {len(resend)} signalled delivery(ies) it had not taken yet are delivered again"
    return note + (f"; {lane_note}" if lane_note else "")


async def _untaken_signals(client: Client, history: WorkflowHistory, instance: Any) -> list[DeliveryRequest]:
    """The run's ``deliver_signal`` deliveries whose id its replayed state does not know, oldest first."""
    converter = compose_data_converter(client.data_converter)
    engine, found = instance._engine, []
    for event in history.events:
        if event.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            continue
        attrs = event.workflow_execution_signaled_event_attributes
        if attrs.signal_name != DELIVER_SIGNAL or len(attrs.input.payloads) != 1:
            continue
        try:
            [request] = await converter.decode(list(attrs.input.payloads), [DeliveryRequest])
        except Exception:  # noqa: S112 - an undecodable signal was recorded invalid by the run; nothing to carry
            continue
        key = instance._event_key(request)
        if key is not None and engine.lookup(event_key(*key)) is None:
            found.append(request)
    return found[:MAX_RESEND]


async def _rejoin_lanes(instance: Any, carried: ActivationSpec, ask_state: AskState | None) -> str | None:
    """A split's child holding queue keys: take its parent's word from the parent's state."""
    engine, split = instance._engine, instance._engine.split
    if ask_state is None or split is None or not is_child(carried.shard, split) or not lanes.awaits_parent(engine):
        return None
    parent = parent_of(carried.shard, split)
    try:
        state = await ask_state(parent)
    except Exception as exc:  # the parent cannot answer now: the child waits for its notices, said so
        return (f"shard {parent} (the split's parent) could not be asked ({type(exc).__name__}): its queue keys stay "
                f"held until shard {parent} frees them, and one it freed while this shard was closed stays held")
    if "lanes_busy" in "".join(state.get("trimmed", [])):
        return f"shard {parent}'s handed-over keys were too many to read: its queue keys stay held until it frees them"
    held = lanes.rejoin(engine, parent, state.get("lanes_handed"), state.get("lanes_busy") or {}, datetime.now(UTC))
    if held is None:
        return None
    return (f"it rejoined the split's lane handover with shard {parent}: {len(held)} queue key(s) stay held while shard "
            f"{parent} still runs their earlier events, every other key runs")


RESTART = "wfi activate WORKFILE --deployment FILE"
"""What starts a shard that is not running again, with its complete state (docs/operator-view.md)."""

Describe = Callable[[int], Awaitable[Any]]
"""The description of shard ``k``'s latest run, or None when it never ran."""


async def shards_not_running(describe: Describe, shards: int) -> list[dict[str, Any]]:
    """The shards of a sharded activation whose workflow is not running (terminated, failed, timed out,
    or completed: deactivated alone), each with when it closed and the command that starts it again.
    Their ids are answered 503 until then. Empty for an unsharded activation (its status says it)."""
    if shards <= 1:
        return []
    latest_runs = await asyncio.gather(*(describe(k) for k in range(shards)))
    if not any(d is not None and d.status == WorkflowExecutionStatus.RUNNING for d in latest_runs):
        return []  # none runs: the activation's own status says so
    found = []
    for k, latest in enumerate(latest_runs):
        if latest is not None and latest.status == WorkflowExecutionStatus.RUNNING:
            continue
        status = "never started" if latest is None or latest.status is None else latest.status.name.lower()
        found.append({"shard": k, "status": "deactivated" if status == "completed" else status,
                      "run_id": latest.run_id if latest is not None else None,
                      "at": latest.close_time.isoformat() if latest is not None and latest.close_time else None,
                      "restart": RESTART})
    return found


def describer(client: Client, workflow: str, timeout: float = 5.0) -> Describe:
    """A :data:`Describe` of ``workflow``'s shards by the server alone (no worker, no query)."""

    async def describe(shard: int) -> Any:
        try:
            return await asyncio.wait_for(client.get_workflow_handle(shard_workflow_id(workflow, shard)).describe(), timeout)
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None
            raise

    return describe
