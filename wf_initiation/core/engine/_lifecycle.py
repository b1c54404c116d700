"""Kept commands and lifecycle events (COMP-3, COMP-5), between the ledger and the runs.

A command that must survive a crash or continue-as-new (a subscription delivery, a notice to a
waiting run, a lifecycle event to publish) is *kept*: recorded in ``EngineState.unacked`` and
emitted, and emitted again by every new workflow run until the shell confirms it. When a run the
activation started has started or ended, a ``workflow.started`` / ``workflow.completed`` /
``workflow.failed`` event is kept for publishing; its delivery id is the run's workflow id plus the
transition, so a republish is a duplicate.

The activities that learn of a transition may publish its event themselves (``wfi.start_runs`` the
``workflow.started`` of the runs it started, ``wfi.watch_runs`` the endings it reports): one
activity and one workflow task less per run. They build it with ``transition_event``, the same
payload the engine would keep, and say so in their result (``published``); the engine then keeps
nothing for it. An event such an activity could not publish comes back unpublished and is kept
here as before, so the guarantee (published at least once, also across a crash) is unchanged.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..limits import json_size
from ..runinput import Causation
from ._ledger import Ledger
from ._types import Command, PublishEvent, RunRecord, SignalRun


def keep(ledger: Ledger, command: SignalRun | PublishEvent) -> None:
    """Emit a command and keep it until the shell confirms it (``command_done``)."""
    assert command.key is not None
    forget(ledger, command.key)
    ledger.state.unacked[command.key] = command
    if isinstance(command, SignalRun):
        ledger.kept_signal_bytes += json_size(command.payload)
    ledger.outbox.append(command)


def forget(ledger: Ledger, key: str) -> SignalRun | PublishEvent | None:
    """Drop a kept command (confirmed, or replaced); the one dropped, or None."""
    command = ledger.state.unacked.pop(key, None)
    if isinstance(command, SignalRun):
        ledger.kept_signal_bytes -= json_size(command.payload)
    return command


def unacked_commands(ledger: Ledger) -> list[Command]:
    """Everything not confirmed yet: re-issue after a restart or continue-as-new (each is idempotent)."""
    return list(ledger.state.unacked.values())


def lifecycle_event_id(run_key: str, transition: str) -> str:
    """Delivery id of a lifecycle event: the run's workflow id and the transition."""
    return f"{run_key}#{transition}"


def lifecycle_payload(
    workflow: str, run_key: str, run_id: str | None, status: str | None, causation: Causation | None, at: datetime
) -> dict[str, Any]:
    """The payload of a run's lifecycle event: ``status`` None for ``started``, else its terminal status."""
    causation = causation or Causation()
    transition = "started" if status is None else "completed" if status == "completed" else "failed"
    return {
        "event_id": lifecycle_event_id(run_key, transition), "workflow": workflow, "workflow_id": run_key,
        "run_id": run_id, "transition": transition, "outcome": status, "at": at.isoformat(),
        "causation": {"depth": causation.depth, "chain": list(causation.chain)},
    }


def on_run_started(ledger: Ledger, run: RunRecord, now: datetime, *, published: bool = False) -> None:
    """Keep the run's causation (its input is about to be dropped) and publish ``workflow.started``
    (unless the start activity did: ``published``)."""
    if run.input is not None:
        run.causation = run.input.initiation.causation
    if not published:
        _publish(ledger, lifecycle_payload(ledger.spec.workflow, run.run_key, run.temporal_run_id, None, run.causation, now))


def on_run_finished(ledger: Ledger, run: RunRecord, now: datetime, *, published: bool = False) -> None:
    """Publish ``workflow.completed``, or ``workflow.failed`` with the outcome (unless the watch did:
    ``published``); never for a dropped run."""
    if run.started_at is None or published:
        return
    _publish(ledger, lifecycle_payload(ledger.spec.workflow, run.run_key, run.temporal_run_id, run.status,
                                       run.causation, now))


def _publish(ledger: Ledger, payload: dict[str, Any]) -> None:
    if not ledger.spec.policies.lifecycle_events:
        return
    keep(ledger, PublishEvent(key=f"publish\x1f{payload['event_id']}", connector=f"workflow.{payload['transition']}",
                              payload=payload))
