"""The parsed, validated form of a Workfile's trigger declaration."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class BatchSpec(BaseModel):
    """`batch:` of one entry. At least one of size and max_wait is present."""

    model_config = ConfigDict(frozen=True)

    size: int | None = Field(default=None, description="Maximum and closing threshold of events per batch.")
    max_wait_seconds: float | None = Field(default=None, description="Wait bound from the first event's acceptance.")
    partition_by: str | None = Field(default=None, description="Expression: one partition per batch.")


class TriggerEntry(BaseModel):
    """One resolved entry of `on:`."""

    model_config = ConfigDict(frozen=True)

    index: int = Field(description="0-based position in `on:` (0 for the single form).")
    connector: str = Field(description="`connector.event` name.")
    config: dict[str, Any] = Field(default_factory=dict, description="Configuration keys, minus `connection`.")
    connection: str | None = None
    as_name: str | None = Field(default=None, description="Explicit `as`, if declared.")
    binding: str = Field(description="Effective binding name: `as`, or the manifest's `binds`.")
    when: str | None = None
    queue_by: str | None = None
    batch: BatchSpec | None = None
    into: dict[str, Any] | None = None
    line: int | None = None

    @property
    def name(self) -> str:
        """`trigger.name` of this entry (TRIG-7): its `as`, or the manifest default."""
        return self.binding


class Workfile(BaseModel):
    """A Workfile as far as initiation is concerned."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Workflow identity (INIT-2).")
    inputs: dict[str, Any] = Field(default_factory=dict, description="Declared inputs: name -> spec or default.")
    entries: list[TriggerEntry] = Field(default_factory=list)
    multi: bool = Field(default=False, description="`on:` was written as a list.")
    step_ids: list[str] = Field(default_factory=list, description="Root-scope step ids.")

    def entry(self, name: str) -> TriggerEntry | None:
        return next((e for e in self.entries if e.name == name), None)
