"""The wire contract of the activation workflow: update, signal and query argument and result types.

Imported by workflows, activities, the client and the CLI alike; it imports none of them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from wf_initiation.core.limits import MAX_BULK, MAX_DELIVERY_BYTES  # noqa: F401 - the limits live in core.limits

ACTIVATION_WORKFLOW = "wfi.Activation"


class DeliveryRequest(BaseModel):
    """One delivery for an external trigger entry."""

    entry: str | None = Field(default=None, description="Trigger entry name; optional with one external entry.")
    payload: Any = Field(description="The event payload, validated against the manifest before acceptance.")


class OperatorRequest(BaseModel):
    """An operator action. ``action_id`` makes it once-only across continue-as-new."""

    action: Literal[
        "pause", "resume", "poll_now", "set_cursor", "release_held", "backfill", "decide_overflow",
        "admit_pending", "drop_pending",
    ]
    action_id: str | None = None
    entry: str | None = None
    cursor: str | None = None
    note: str | None = None
    choice: str | None = Field(default=None, description="release_held: quarantine|retry; decide_overflow: admit_all|admit_first|skip.")
    count: int | None = None
    range_id: str | None = None
    run_key: str | None = None
    start: str | None = None
    end: str | None = None


class OperatorResult(BaseModel):
    ok: bool
    message: str
    action_id: str | None = None


class ActivateResult(BaseModel):
    activation_id: str
    outcome: Literal["current", "rebound"]
    previous: list[str] = Field(default_factory=list)
