"""The operator request: one model per action, with exactly that action's fields, as a union
discriminated by ``action``. ``wfi operate`` derives its sub-commands and flags from it.

    await wfi.operate("orders", SetCursor(entry="feed", cursor="2026-12-01T00:00:00Z", note="skip the backlog"))

On the wire an action is its fields: ``{"action": "set_cursor", "entry": "feed", "cursor": ...}``.
Builds before this one sent one flat model with every field (``null`` where unused), and recorded
histories carry that shape: such a request still decodes (:class:`LegacyOperatorRequest`, validated as
before) into its action's model, keeping the fields it does not use, so the engine applies it exactly
as before and its content digest (a reused action id must mean the same action) is the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, RootModel, WrapValidator, field_validator, model_validator

from wf_initiation.core.engine import redrive_selects
from wf_initiation.core.limits import MAX_REDRIVE_PER_ACTION, MAX_REDRIVE_REQUEST_BYTES, json_size

ENTRY = "Trigger entry (the entry's `as` name, see `wfi state`)."
NOTE = "Why: recorded with the action (operator log, cursor log)."


class _Action(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action_id: str | None = Field(
        default=None, description="Makes the action once-only, also across continue-as-new "
        "(`wfi operate` and WfiClient make one up when omitted, so a retried call is applied once).")
    # Fields of the old flat shape this action does not use, set only on a request decoded from it:
    # part of its content digest, as they were (operator.content_digest).
    _legacy: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def legacy_fields(self) -> dict[str, Any]:
        return dict(self._legacy)


class Pause(_Action):
    """Pause schedule and poll entries: no occurrences are admitted and no polls run until resumed."""

    action: Literal["pause"] = "pause"
    entry: str | None = Field(default=None, description=ENTRY + " Default: every schedule and poll entry.")
    note: str | None = Field(default=None, description="Why: shown with the pause (`wfi state`, the operator page) "
                             "and recorded in the operator log.")


class Resume(_Action):
    """Resume paused entries: missed occurrences follow the entry's missed policy, polls run at once."""

    action: Literal["resume"] = "resume"
    entry: str | None = Field(default=None, description=ENTRY + " Default: every schedule and poll entry.")
    note: str | None = Field(default=None, description="Why: shown with the entry (`wfi state`, the operator page) "
                             "and recorded in the operator log; a pause's note (or pause_on_failure's) is cleared.")


class Trigger(_Action):
    """Start one run of a schedule entry now: not an occurrence of its sequence (none is consumed or moved).

    Its identity is the action id (run key `<activation>/<entry>/trigger-<action id>`): the same action id
    again starts nothing new. The run passes `when`, `queue_by` and the overlap policy like an occurrence;
    it is started while the schedule is paused or inactive too, and does not count towards remaining_runs."""

    action: Literal["trigger"] = "trigger"
    entry: str | None = Field(default=None, description=ENTRY + " A schedule entry. Default: the only one.")
    note: str | None = Field(default=None, description=NOTE)


class PollNow(_Action):
    """Poll now instead of at the next interval (a poll in flight is followed by another at once)."""

    action: Literal["poll_now"] = "poll_now"
    entry: str | None = Field(default=None, description=ENTRY + " Default: every poll entry.")


class SetCursor(_Action):
    """Set a poll entry's cursor: polls started from now on read from it."""

    action: Literal["set_cursor"] = "set_cursor"
    entry: str | None = Field(default=None, description=ENTRY + " Default: the first poll entry.")
    cursor: str | None = Field(default=None, description="The new cursor; omit it to clear the cursor "
                               "(read from the beginning).")
    note: str | None = Field(default=None, description=NOTE)


class ReleaseHeld(_Action):
    """Decide on the invalid item that holds a poll entry's cursor (invalid_items: hold)."""

    action: Literal["release_held"] = "release_held"
    entry: str | None = Field(default=None, description=ENTRY + " Default: the first poll entry.")
    choice: Literal["quarantine", "retry"] = Field(
        description="quarantine: record the item as invalid and move on; retry: poll it again.")
    note: str | None = Field(default=None, description=NOTE)


class Backfill(_Action):
    """Admit a schedule entry's occurrences between two instants (inclusive), as if they had fired."""

    action: Literal["backfill"] = "backfill"
    entry: str = Field(description=ENTRY + " A schedule entry.")
    start: str = Field(description="First instant, ISO-8601 with offset, e.g. 2026-12-01T00:00:00+01:00.")
    end: str = Field(description="Last instant, ISO-8601 with offset.")


class DecideOverflow(_Action):
    """Decide on an overflow range of occurrences held for the operator (missed policy, see `wfi state`)."""

    action: Literal["decide_overflow"] = "decide_overflow"
    range_id: str = Field(description="The held range (`wfi state`: schedules.<entry>.overflow).")
    choice: Literal["admit_all", "admit_first", "skip"] = Field(
        description="admit_all: admit every occurrence; admit_first: the first COUNT, the rest skipped; skip: none.")
    count: int | None = Field(default=None, ge=0, le=10**9, description="admit_first: how many occurrences to admit.")
    note: str | None = Field(default=None, description=NOTE)


class AdmitPending(_Action):
    """Start a pending run now, ahead of its queue key, overlap or concurrency limit."""

    action: Literal["admit_pending"] = "admit_pending"
    run_key: str = Field(description="The pending run (`wfi state`: runs).")


class DropPending(_Action):
    """Drop a pending run: it never starts (recorded)."""

    action: Literal["drop_pending"] = "drop_pending"
    run_key: str = Field(description="The pending run (`wfi state`: runs).")
    note: str | None = Field(default=None, description=NOTE)


class Redrive(_Action):
    """Offer again events that did not run, once their cause is fixed: invalid deliveries and quarantined poll
    items (payloads kept), start faults (runs kept), deferred signals (payloads read back from history).

    Name the events by delivery id, by a range of their numbers (`wfi state --redrivable` lists them),
    by kind or entry, or all of them. Each selected event is offered once by this action, keeping its
    original delivery id; one that got a disposition is kept no more, so a second re-drive of it is
    refused. At most 100 events per action (WfiClient.redrive and `wfi operate redrive` page a larger
    selection)."""

    action: Literal["redrive"] = "redrive"
    kind: Literal["invalid", "quarantined", "start_fault", "deferred_signal"] | None = Field(
        default=None, description="Only events of this kind. Default: every kind.")
    entry: str | None = Field(default=None, description=ENTRY + " Default: every entry.")
    delivery_id: str | None = Field(default=None, description="Only the event with this (original) delivery id; a "
                                    "start fault of a batch is named by its first event's.")
    first: int | None = Field(default=None, ge=1, description="Only events numbered from this one on.")
    last: int | None = Field(default=None, ge=1, description="Only events numbered up to this one.")
    all_events: bool = Field(default=False, description="Every event kept for re-drive (with no other choice "
                             "named, this must be said).")
    note: str | None = Field(default=None, description=NOTE)
    payloads: list[Any] = Field(default_factory=list, json_schema_extra={"client": True},
                                description="The deferred signals' payloads, read back from the activation's history "
                                "(WfiClient.redrive sends them; each must have the digest kept with its signal).")

    @field_validator("payloads")
    @classmethod
    def _bounded(cls, payloads: list[Any]) -> list[Any]:
        """Refused as the update is decoded (so never written to the activation's history) when it
        carries more than one action takes; the activation checks again (core.engine.operator)."""
        if len(payloads) > MAX_REDRIVE_PER_ACTION:
            raise ValueError(f"{len(payloads)} payloads; one action carries at most {MAX_REDRIVE_PER_ACTION}")
        size = json_size(payloads) if payloads else 0
        if size > MAX_REDRIVE_REQUEST_BYTES:
            raise ValueError(f"{size} bytes of payloads; one action carries at most {MAX_REDRIVE_REQUEST_BYTES}")
        return payloads

    @model_validator(mode="after")
    def _named(self) -> Redrive:
        if not (self.all_events or self.kind or self.entry or self.delivery_id or self.first or self.last):
            raise ValueError("name the events to re-drive: delivery_id, first/last, kind or entry, or all_events")
        if self.first is not None and self.last is not None and self.first > self.last:
            raise ValueError(f"first ({self.first}) is after last ({self.last})")
        return self

    def selects(self, listed: Mapping[str, Any]) -> bool:
        """Whether this action selects an event listed by the ``redrivable`` query (as the activation decides)."""
        return redrive_selects(listed, kind=self.kind, entry=self.entry, delivery_id=self.delivery_id,
                               first=self.first, last=self.last)


ACTIONS: tuple[type[_Action], ...] = (
    Pause, Resume, PollNow, SetCursor, ReleaseHeld, Backfill, DecideOverflow, AdmitPending, DropPending, Redrive, Trigger)
BY_NAME: dict[str, type[_Action]] = {model.model_fields["action"].default: model for model in ACTIONS}


class LegacyOperatorRequest(BaseModel):
    """The flat shape builds before the union sent (every field, null where unused): decoded, never sent."""

    action: Literal[
        "pause", "resume", "poll_now", "set_cursor", "release_held", "backfill", "decide_overflow",
        "admit_pending", "drop_pending",
    ]
    action_id: str | None = None
    entry: str | None = None
    cursor: str | None = None
    note: str | None = None
    choice: str | None = None
    count: int | None = None
    range_id: str | None = None
    run_key: str | None = None
    start: str | None = None
    end: str | None = None


LEGACY_FIELDS = frozenset(LegacyOperatorRequest.model_fields)


def _decode(data: Any, strict: Any) -> Any:
    """A request in the old flat shape (it names every field) is decoded as before, into its action's
    model without that model's checks (the engine refuses what it cannot apply, as it did then);
    anything else is validated as the union."""
    if isinstance(data, dict) and LEGACY_FIELDS <= data.keys():
        return from_legacy(LegacyOperatorRequest.model_validate(data))
    return strict(data)


def from_legacy(flat: LegacyOperatorRequest) -> _Action:
    """The action's model of a request in the old flat shape, its extra fields kept as they were sent."""
    model = BY_NAME[flat.action]
    values = flat.model_dump()
    action = model.model_construct(**{name: values[name] for name in model.model_fields})
    action._legacy = {k: v for k, v in values.items() if k not in model.model_fields and v is not None}
    return action


OperatorAction = Annotated[
    Pause | Resume | PollNow | SetCursor | ReleaseHeld | Backfill | DecideOverflow | AdmitPending | DropPending | Redrive | Trigger,
    Field(discriminator="action"),
    WrapValidator(_decode),
]
"""An operator action: one of the action models, told apart by ``action``."""


class OperatorRequest(RootModel[OperatorAction]):
    """An operator action as the ``operate`` update takes it: ``OperatorRequest(action="pause", entry="e")``
    or ``OperatorRequest(Pause(entry="e"))``; ``.root`` is the action's model. A model (a class, not an
    annotated alias) because Temporal reads handler argument types without their annotations."""

    @property
    def action(self) -> str:
        """The action's name (``pause``, ``set_cursor``, ...)."""
        return self.root.action

    @property
    def action_id(self) -> str | None:
        """The action's id, which makes it once-only."""
        return self.root.action_id

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy; ``update`` changes the action's fields (``update={"action_id": ...}``), as on a flat model."""
        if update:
            return type(self)(self.root.model_copy(update=dict(update), deep=deep))
        return super().model_copy(deep=deep)


def as_action(request: OperatorRequest | OperatorAction) -> OperatorAction:
    """The action's model of a request, whichever way it was given."""
    return request.root if isinstance(request, OperatorRequest) else request


__all__ = [
    "ACTIONS", "AdmitPending", "Backfill", "DecideOverflow", "DropPending", "LegacyOperatorRequest", "OperatorAction",
    "OperatorRequest", "Pause", "PollNow", "Redrive", "ReleaseHeld", "Resume", "SetCursor", "Trigger", "as_action",
]
