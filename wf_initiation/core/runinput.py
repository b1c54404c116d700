"""The input every run receives: a documented, stable pydantic model.

A run workflow declares ``async def run(self, input: RunInput)``. Exactly one trigger entry fires
per run (TRIG-18): ``bindings`` maps every entry's binding name to its payload for the firing
entry (a list of payloads for a batched entry) and to ``None`` for every other entry.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class TriggerInfo(BaseModel):
    """Which trigger entry started the run (``input.trigger``)."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="`{{ trigger.name }}`: the firing entry's `as`, or the manifest default (TRIG-7).")
    connector: str = Field(description="`connector.event` of the firing entry.")
    kind: str = Field(description="schedule | external | poll.")
    batched: bool = Field(default=False, description="True when the binding holds a list of events.")


class Causation(BaseModel):
    """The chain of runs whose lifecycle events led to this run (COMP-6 bounds its depth)."""

    model_config = ConfigDict(frozen=True)

    depth: int = Field(default=0, description="0 for a run started by a non-lifecycle event; d+1 after a run of depth d.")
    chain: list[str] = Field(default_factory=list, description="Workflow ids of the runs that led here, oldest first.")


class Initiation(BaseModel):
    """How the run came to be: which activation, which event, when accepted."""

    model_config = ConfigDict(frozen=True)

    activation_id: str
    workflow: str = Field(description="Workflow identity (the Workfile `name`).")
    run_key: str = Field(description="Idempotency key; also this run's Temporal workflow id.")
    delivery_ids: list[str] = Field(default_factory=list, description="External/poll: the event identities.")
    scheduled_at: str | None = Field(default=None, description="Schedule: intended occurrence instant.")
    accepted_at: datetime
    causation: Causation = Causation()


class RunInput(BaseModel):
    """Input of a run started by wf-initiation."""

    model_config = ConfigDict(frozen=True)

    trigger: TriggerInfo
    bindings: dict[str, Any] = Field(description="Binding name -> payload (or list) for the firing entry, None for others.")
    into: dict[str, Any] = Field(default_factory=dict, description="Root-scope bindings projected by `into` (TRIG-19).")
    inputs: dict[str, Any] = Field(default_factory=dict, description="Deployment inputs.")
    initiation: Initiation

    @property
    def payload(self) -> Any:
        """The firing entry's binding value."""
        return self.bindings[self.trigger.name]
