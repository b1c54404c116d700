"""Kept commands and lifecycle events (COMP-3, COMP-5), between the ledger and the runs.

A command that must survive a crash or continue-as-new (a subscription delivery, a notice to a
waiting run, a lifecycle event to publish) is *kept*: recorded in ``EngineState.unacked`` and
emitted, and emitted again by every new workflow run until the shell confirms it. When a run the
activation started has started or ended, a ``workflow.started`` / ``workflow.completed`` /
``workflow.failed`` event is kept for publishing; its delivery id is the run's workflow id plus the
transition, so a republish is a duplicate.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

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
    workflow: str, run: RunRecord, transition: Literal["started", "completed", "failed"], now: datetime
) -> dict[str, Any]:
    causation = run.causation or Causation()
    return {
        "event_id": lifecycle_event_id(run.run_key, transition), "workflow": workflow, "workflow_id": run.run_key,
        "run_id": run.temporal_run_id, "transition": transition,
        "outcome": None if transition == "started" else run.status, "at": now.isoformat(),
        "causation": {"depth": causation.depth, "chain": list(causation.chain)},
    }


def on_run_started(ledger: Ledger, run: RunRecord, now: datetime) -> None:
    """Keep the run's causation (its input is about to be dropped) and publish ``workflow.started``."""
    if run.input is not None:
        run.causation = run.input.initiation.causation
    _publish(ledger, "workflow.started", lifecycle_payload(ledger.spec.workflow, run, "started", now))


def on_run_finished(ledger: Ledger, run: RunRecord, now: datetime) -> None:
    """Publish ``workflow.completed``, or ``workflow.failed`` with the outcome; never for a dropped run."""
    if run.started_at is None:
        return
    transition: Literal["completed", "failed"] = "completed" if run.status == "completed" else "failed"
    _publish(ledger, f"workflow.{transition}", lifecycle_payload(ledger.spec.workflow, run, transition, now))


def _publish(ledger: Ledger, connector: str, payload: dict[str, Any]) -> None:
    if not ledger.spec.policies.lifecycle_events:
        return
    keep(ledger, PublishEvent(key=f"publish\x1f{payload['event_id']}", connector=connector, payload=payload))
