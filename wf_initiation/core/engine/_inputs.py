"""The input a run is started with (pure): the trigger, every entry's binding, ``into`` and the initiation."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..activation import ActivationSpec, EntrySpec
from ..runinput import Causation, Initiation, RunInput, TriggerInfo


def run_input(
    spec: ActivationSpec, entry: EntrySpec, value: Any, into: dict[str, Any], run_key: str, delivery_ids: list[str],
    scheduled_at: str | None, now: datetime, causation: Causation, batched: bool = False,
) -> RunInput:
    """The input of a run of ``entry`` bound to ``value`` (the other entries bound to None)."""
    bindings: dict[str, Any] = {e.name: None for e in spec.entries}
    bindings[entry.name] = value
    return RunInput(
        trigger=TriggerInfo(name=entry.name, connector=entry.connector, kind=entry.kind, batched=batched),
        bindings=bindings, into=into, inputs=spec.inputs,
        initiation=Initiation(activation_id=spec.activation_id, workflow=spec.workflow, run_key=run_key,
                              delivery_ids=delivery_ids, scheduled_at=scheduled_at, accepted_at=now,
                              causation=causation),
    )
