"""Argument and result types of the activation workflow's updates, signals and queries."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from wf_initiation.core.engine import (  # DeliveryResult, Disposition re-exported: the result of deliver, decided by the engine
    DeliveryResult,
    Disposition,
    RedrivenEvent,
)
from wf_initiation.core.limits import MAX_BULK, MAX_DELIVERY_BYTES  # re-exported: the limits live in core.limits


class PriorEntry(BaseModel):
    """What a split's parent shard held of a delivery id that moved to a child (core.sharding):
    its answer to ``split_lookup``, sent along with the delivery to the child."""

    shards: int = Field(ge=1, description="The shard count the parent ran on when it answered.")
    record: dict[str, Any] | None = Field(default=None, description="Its dedup entry of the id, or None.")


class LaneClaim(BaseModel):
    """That the delivery id's own shard took the id and routed the event (disposition ``routed``) to
    the shard of its queue key (core.sharding, lanes): the lane takes it without routing it again."""

    shards: int = Field(ge=1, description="The shard count the id's shard ran on when it routed the event.")
    shard: int = Field(ge=0, description="The lane: the shard that takes the event.")


class DeliveryRequest(BaseModel):
    """One delivery for an external trigger entry."""

    entry: str | None = Field(default=None, description="Trigger entry name; optional with one external entry.")
    payload: Any = Field(description="The event payload, validated against the manifest before acceptance.")
    prior: PriorEntry | None = Field(default=None, description="For a shard created by a split: its parent's answer "
                                     "for this id (set by WfiClient and by the parent passing a signal on).")
    lane: LaneClaim | None = Field(default=None, description="For an event its id's shard routed to its queue key's "
                                   "shard: that routing (set by WfiClient and by the id's shard passing a signal on).")


class OperatorResult(BaseModel):
    """The answer of the ``operate`` update: applied or not, the activation's message, the action's id."""

    ok: bool
    message: str
    action_id: str | None = None
    redriven: list[RedrivenEvent] | None = Field(default=None, description="A re-drive: what became of each event "
                                                 "it selected (its disposition, or `not_offered` and why); absent "
                                                 "for the other actions.")

    @model_serializer(mode="wrap")
    def _only_for_a_redrive(self, serialize: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The other actions answer exactly the three keys they always did (a bridge may compare them)."""
        data: dict[str, Any] = serialize(self)
        if data.get("redriven") is None:
            data.pop("redriven", None)
        return data


class ActivateResult(BaseModel):
    """The answer of the ``activate`` update: the activation id serving now, ``current`` or ``rebound``,
    and the earlier activation ids."""

    activation_id: str
    outcome: Literal["current", "rebound"]
    previous: list[str] = Field(default_factory=list)


class DeactivateRequest(BaseModel):
    """Deactivate an activation (docs/lifecycle.md). ``action_id`` makes it once-only, also across
    continue-as-new and a later re-activation."""

    queued: Literal["drain", "cancel"] = Field(
        description="drain: queued runs and open batches start and finish first; cancel: they are dropped (recorded).")
    running: Literal["leave", "cancel", "terminate"] = Field(
        default="leave", description="Runs already running: left alone, or cancellation / termination requested "
        "(cancel and terminate need queued=cancel).")
    action_id: str | None = None
    note: str | None = Field(default=None, description="Why: recorded with the deactivation.")


class DeactivateResult(BaseModel):
    """What a ``deactivate`` update did, and what is left to settle before the activation completes."""

    ok: bool
    message: str
    action_id: str | None = None
    status: Literal["deactivating", "deactivated", "refused", "active"] = Field(
        description="active: the action id was applied before and the activation was activated again since.")
    remaining: dict[str, int] = Field(default_factory=dict, description="pending_runs, starting_runs, running_runs, "
                                      "open_batches, unconfirmed (notices and lifecycle events not yet sent).")


class DeactivatedResult(BaseModel):
    """The result of a deactivated activation workflow: its final state, readable and carried."""

    model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")

    workflow: str
    activation_id: str
    deactivation: dict[str, Any] = Field(description="When, how, and what was dropped, controlled or left running.")
    summary: dict[str, Any] = Field(description="The activation's final summary (the `summary` query).")
    state: bytes = Field(description="The whole engine state: a later `wfi activate` resumes from it "
                         "(dedup set, cursors, runs left running).")


__all__ = [
    "MAX_BULK", "MAX_DELIVERY_BYTES", "ActivateResult", "DeactivateRequest", "DeactivateResult", "DeactivatedResult",
    "DeliveryRequest", "DeliveryResult", "Disposition", "LaneClaim", "OperatorResult", "PriorEntry",
]
