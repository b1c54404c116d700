"""State, inputs and commands of the activation engine (pure data, carried across continue-as-new)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator
from pydantic.dataclasses import dataclass as dataclass_model
from pydantic.fields import FieldInfo

from wf_initiation.errors import OperatorRefused  # noqa: F401  (the engine's operator refusal; imported from here too)

from ..activation import ActivationSpec, Split
from ..runinput import Causation, RunInput


class Disposition(str, Enum):
    """What happened to one delivery, poll item or scheduled occurrence."""

    ACCEPTED = "accepted"  # admitted; its run is being started or runs
    QUEUED = "queued"  # admitted; waits behind an equal queue_by key or the overlap policy
    BATCHED = "batched"  # admitted into an open batch
    DUPLICATE = "duplicate"  # same identity, same payload as a retained event: nothing new
    CONFLICT = "conflict"  # same identity, different payload: initiation error (EXT-4)
    SUPPRESSED = "suppressed"  # `when` was false (TRIG-8)
    GUARD_FAULT = "guard_fault"  # `when` faulted (TRIG-9)
    KEY_FAULT = "key_fault"  # `queue_by`/`partition_by` faulted or was null (TRIG-13)
    PROJECTION_FAULT = "projection_fault"  # `into` faulted (BATCH-6)
    SKIPPED = "skipped"  # overlap: skip (EXT-13)
    INVALID = "invalid"  # payload failed manifest validation (EXT-9)
    QUARANTINED = "quarantined"  # invalid poll item retained as quarantined (POLL-11)
    DELIVERED = "delivered"  # delivered to a waiting run's subscription (INIT-8)
    UNMATCHED = "unmatched"  # subscription-only trigger: no active subscription matched (INIT-9)
    REFUSED = "refused"  # cycle guard (COMP-6)
    DROPPED = "dropped"  # operator dropped a pending run/batch (BATCH-5)
    DEACTIVATED = "deactivated"  # the activation was deactivated: refused, not recorded, id not consumed (_deactivate)
    # Appended, never inserted: the compact dedup form stores a member's position (_codec).
    DEFERRED = "deferred"  # the activation holds its budget of payloads (limits.MAX_HELD_BYTES): not consumed
    START_FAULT = "start_fault"  # its run could not be started (e.g. an input over the payload limit)
    ROUTED = "routed"  # a sharded activation's id-home took the id; its queue key's lane shard takes the event (core.sharding)


ROUTED_TO = "taken by shard "
"""How a ``routed`` record's detail names the shard that takes the event (``WfiClient.delivery`` reads it)."""

# Dispositions that consume the delivery identity with no run to wait for: retention starts now.
RELEASED_AT_ACCEPTANCE = frozenset({
    Disposition.SUPPRESSED, Disposition.GUARD_FAULT, Disposition.KEY_FAULT, Disposition.PROJECTION_FAULT,
    Disposition.SKIPPED, Disposition.QUARANTINED, Disposition.DELIVERED, Disposition.UNMATCHED,
    Disposition.REFUSED, Disposition.ROUTED,
})
# Dispositions that are not acceptance and leave the identity unconsumed.
NOT_RETAINED = frozenset({Disposition.DUPLICATE, Disposition.CONFLICT, Disposition.INVALID, Disposition.DEACTIVATED,
                          Disposition.DEFERRED})

RunStatus = Literal[
    "pending", "starting", "running", "completed", "failed", "cancelled", "terminated", "timed_out", "dropped",
    "start_failed",
]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled", "terminated", "timed_out", "dropped",
                                      "start_failed"})


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass_model(slots=True, kw_only=True, config=ConfigDict(extra="forbid"))
class EventRecord:
    """Dedup entry of one delivery identity (EXT-3, EXT-5).

    A slotted dataclass, not a model: a run holds one per delivery id until it continues as new
    (thousands: ``limits.RECORDS_PER_RUN``), and a model's instance dict and set of fields took ~1.2 KB
    of the worker's memory each, this ~0.1 KB. The same fields and JSON; read and write it with
    :data:`EVENT_RECORD` (``validate_python``, ``dump_python``, ``dump_json``), copy it with
    ``copy.copy``."""

    entry: str
    delivery_id: str
    digest: str = Field(description="Payload digest fixed by the first acceptance.")
    disposition: Disposition
    run_key: str | None = None
    accepted_at: datetime
    released_at: datetime | None = Field(default=None, description="Suppression or run terminal: retention starts.")
    activation_id: str
    detail: str | None = None
    seq: int = Field(default=0, description="Acceptance order within the workflow identity (EXT-11).")
    redriven_by: str | None = Field(default=None, description="The operator action (its action id) whose re-drive "
                                    "gave this event its disposition; the event keeps its original delivery id.")


EVENT_RECORD: TypeAdapter[EventRecord] = TypeAdapter(EventRecord)
"""Validation and JSON of :class:`EventRecord` (what ``model_validate`` / ``model_dump`` are to a model)."""
EVENT_RECORD_FIELDS: dict[str, FieldInfo] = EventRecord.__pydantic_fields__  # type: ignore[attr-defined]
""":class:`EventRecord`'s fields by name (what ``model_fields`` is to a model)."""


class RunRecord(_M):
    run_key: str
    entry: str
    queue_key: str | None = None
    status: RunStatus = "pending"
    waiting_for: str | None = Field(default=None, description="Why a pending run is not started yet.")
    input: RunInput | None = Field(default=None, description="Kept until started, then dropped to save state.")
    event_keys: list[str] = Field(default_factory=list)
    accepted_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None
    temporal_run_id: str | None = None
    activation_id: str
    scheduled_at: str | None = None
    cancel_requested: bool = False
    causation: Causation | None = Field(default=None, description="Kept from the input for lifecycle events (COMP-6).")
    input_bytes: int = Field(default=0, description="Payload bytes the input holds while the run is not started.")
    lane: str | None = Field(default=None, description="A sharded batch's partition (core.sharding.batch_lane_text): "
                             "its run waits while a split's parent still has that partition's earlier batch.")
    throttle_key: str | None = Field(default=None, description="Its throttle key (the `throttle.key` value, "
                                     "canonical; None: the one window of an unkeyed throttle, _throttle).")


class ErrorRecord(_M):
    at: datetime
    kind: str = Field(description="conflict | invalid | guard_fault | key_fault | projection_fault | start_failed | ...")
    entry: str | None = None
    delivery_id: str | None = None
    message: str


class SignalRef(_M):
    """A signalled delivery the activation keeps without its payload: the signal stays in the history
    of run ``run_id`` (for the namespace's retention), where its payload is found again by entry and
    digest (``wf_initiation.activities.signals``)."""

    entry: str
    delivery_id: str
    digest: str = Field(description="Digest of its payload (``_keys.payload_digest``).")
    size: int = Field(default=0, description="Payload bytes (canonical JSON).")
    run_id: str = Field(description="The activation run whose history holds the signal.")
    at: datetime = Field(description="When it was kept (deferred, or carried waiting).")
    reason: str | None = Field(default=None, description="Why it was deferred (None: carried waiting).")
    number: int = Field(default=0, description="Its number among the events kept for re-drive, once deferred "
                        "(0: carried waiting, not listed).")


RedriveKind = Literal["invalid", "quarantined", "start_fault", "deferred_signal"]


class KeptEvent(_M):
    """An event that did not run, kept so that an operator can offer it again once its cause is fixed
    (``wfi operate redrive``, ``_redrive``): an invalid delivery or a quarantined poll item with its
    payload, a start fault with its run as admitted (its input included). Deferred signals are kept
    apart, by reference (``SignalRef``)."""

    number: int = Field(description="Its number among the events kept for re-drive (increasing).")
    kind: Literal["invalid", "quarantined", "start_fault"]
    entry: str
    delivery_id: str | None = Field(default=None, description="Its original delivery id (a start fault: its run's "
                                    "first event's); None when the payload had no usable one.")
    digest: str = Field(description="Digest of its payload (a start fault: of its run input).")
    size: int = Field(description="Bytes it keeps (its payload; a start fault: its run input and its events' records).")
    at: datetime = Field(description="When it was kept; it is let go a dedup_retention later.")
    reason: str = Field(description="Why it did not run (the latest try's, after a re-drive that left it as it was).")
    payload: Any = Field(default=None, description="invalid, quarantined: the payload as delivered or polled.")
    run: RunRecord | None = Field(default=None, description="start_fault: the run as admitted, with its input.")
    records: list[EventRecord] = Field(default_factory=list, description="start_fault: its events' dedup entries "
                                       "when it faulted (a re-drive restores one retired since from its copy).")
    tries: int = Field(default=0, description="Re-drives that left it as it was (still invalid, deferred).")


class RedrivenEvent(_M):
    """What one re-drive action did with one event it selected."""

    number: int
    kind: RedriveKind
    entry: str
    delivery_id: str | None = Field(description="The event's original delivery id (None: it had no usable one).")
    outcome: str = Field(description="The disposition it got when offered again (`accepted`, `queued`, `invalid`, "
                         "...), or `not_offered` (the message says why).")
    run_key: str | None = None
    message: str | None = None
    activation_id: str


class BatchEvent(_M):
    event_key: str
    payload: Any
    accepted_at: datetime
    delivery_id: str | None = None
    scheduled_at: str | None = None
    into: dict[str, Any] | None = Field(default=None, description="This event's `into` projection, taken at acceptance.")
    bytes: int = Field(default=0, description="Payload bytes (limits.MAX_BATCH_BYTES).")


class OpenBatch(_M):
    batch_id: str
    entry: str
    partition: str
    opened_at: datetime
    deadline: datetime | None
    events: list[BatchEvent] = Field(default_factory=list)
    run_key: str = Field(default="", description="Key of the batch's one run, fixed when the batch opens (EXT-6).")
    bytes: int = Field(default=0, description="Payload bytes of its events: closes early at limits.MAX_BATCH_BYTES.")
    throttle_key: str | None = Field(default=None, description="Its first event's throttle key: the batch's run "
                                     "is throttled under it (_throttle).")


class OccurrenceRecord(_M):
    scheduled_at: str
    utc: datetime
    disposition: str = Field(description="admitted | caught_up | skipped_missed | suppressed | guard_fault | ...")
    fired_at: datetime | None = None
    run_key: str | None = None
    tzdata_version: str


class OverflowRange(_M):
    range_id: str
    entry: str
    first: datetime
    last: datetime
    count: int
    status: Literal["awaiting_operator", "admitted", "skipped", "partially_admitted"] = "awaiting_operator"
    decided_at: datetime | None = None
    note: str | None = None


class AdmitJob(_M):
    """A large operator action on a schedule (backfill, an overflow decision), worked off a bounded
    number of occurrences per workflow task (limits.ADMIT_PER_TASK) so no task outgrows the worker's
    deadlock timeout."""

    job_id: str
    kind: Literal["backfill", "overflow"]
    entry: str
    how: str = Field(description="How admitted occurrences are recorded: backfilled | caught_up.")
    first: datetime
    last: datetime
    after: datetime = Field(description="Occurrences strictly after this and up to `last` are still to do.")
    status: Literal["counting", "admitting", "done", "refused"] = "admitting"
    total: int = Field(default=0, description="Occurrences in the range (counted first for a backfill).")
    limit: int | None = Field(default=None, description="Admit at most this many (admit_first), the rest skipped.")
    range_id: str | None = None
    admitted: int = 0
    duplicates: int = 0
    other: int = Field(default=0, description="Occurrences disposed otherwise (suppressed, faults, skipped by overlap).")
    requested_at: datetime
    finished_at: datetime | None = None
    message: str | None = None


class TriggerRecord(_M):
    """One run an operator started now (``wfi operate trigger``): not an occurrence of the sequence."""

    at: datetime
    action_id: str
    run_key: str | None = None
    disposition: str = Field(description="accepted | queued | batched | suppressed | skipped | ... (the pipeline's).")


class ScheduleState(_M):
    entry: str
    policy: str
    bound: int | None = None
    tzdata_version: str
    last_instant: datetime | None = Field(default=None, description="Latest intended instant disposed.")
    next_instant: datetime | None = None
    active: bool = True
    inactive_reason: str | None = None
    paused: bool = False
    paused_at: datetime | None = None
    occurrences: list[OccurrenceRecord] = Field(default_factory=list, description="Most recent records (bounded).")
    counts: dict[str, int] = Field(default_factory=dict)
    overflow: list[OverflowRange] = Field(default_factory=list)
    missed_ranges: list[OverflowRange] = Field(
        default_factory=list, description="Missed occurrences skipped under policy skip, one range per gap (SCHED-9)."
    )
    missed_through: datetime | None = Field(
        default=None, description="Open gap: instants up to here are missed whatever their lateness (resume; long gaps)."
    )
    gap_admitted: int = Field(default=0, description="Missed occurrences caught up so far in the open gap (one bound per gap).")
    jobs: list[AdmitJob] = Field(default_factory=list, description="Backfills and overflow decisions in progress (+ recent).")
    # Added with the schedule options (deployment `schedule:`); an older state reads them at their defaults.
    note: str | None = Field(default=None, description="Why it was last paused or resumed: the operator's note, or "
                             "the run that failed (pause_on_failure).")
    resumed_at: datetime | None = None
    failed_run: str | None = Field(default=None, description="The run whose failure paused it (pause_on_failure); "
                                   "cleared by resume.")
    run_limit: int | None = Field(default=None, description="remaining_runs the count below was started under.")
    runs_counted: int = Field(default=0, description="Occurrences it admitted by itself under run_limit.")
    triggers: list[TriggerRecord] = Field(default_factory=list, description="Runs started by `trigger` (most recent).")


class CursorChange(_M):
    at: datetime
    old: str | None
    new: str | None
    note: str | None = None
    by: str = "operator"


class HeldItem(_M):
    payload: Any
    cursor_before: str | None
    cursor_after: str | None
    reason: str
    since: datetime


class PollState(_M):
    entry: str
    cursor: str | None = None
    cursor_version: int = 0
    cursor_changes: list[CursorChange] = Field(default_factory=list)
    next_poll_at: datetime | None = None
    in_flight: int | None = Field(default=None, description="Sequence number of the poll in flight.")
    poll_requested: bool = Field(default=False, description="An operator's poll_now arrived while a poll was in "
                                 "flight: the next poll starts as soon as that one ends, not an interval later.")
    poll_seq: int = 0
    failures: int = 0
    last_error: str | None = None
    last_success_at: datetime | None = None
    paused: bool = False
    note: str | None = Field(default=None, description="The operator's note of the last pause or resume.")
    held: HeldItem | None = None
    items_seen: int = 0


class Subscription(_M):
    sub_id: str
    entry: str
    run_workflow_id: str
    match: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    expires_at: datetime | None = None
    seq: int
    replica: bool = Field(default=False, description="A copy shard 0 gave this shard (sharded): a match here routes "
                          "the event to shard 0, which selects (core.engine._offer).")


class OperatorAction(_M):
    at: datetime
    action: str
    detail: str
    action_id: str | None = None


class Deactivation(_M):
    """An operator's deactivation of the activation (rules in ``_deactivate``, docs/lifecycle.md)."""

    requested_at: datetime
    queued: Literal["drain", "cancel"] = Field(description="drain: queued work starts and finishes; cancel: it is dropped.")
    running: Literal["leave", "cancel", "terminate"] = Field(description="What happens to runs already running.")
    action_id: str | None = None
    note: str | None = None
    spec: ActivationSpec = Field(description="The binding deactivated: a re-activation rebinds from it (INIT-4).")
    completed_at: datetime | None = Field(default=None, description="Set when nothing was left to settle.")
    dropped_runs: int = 0
    dropped_batches: int = 0
    closed_batches: int = Field(default=0, description="drain: batches without max_wait, closed at deactivation.")
    controlled: dict[str, Literal["cancel", "terminate"]] = Field(
        default_factory=dict, description="Run key -> the control the deactivation requested for that running run.")
    controls_applied: int = Field(default=0, description="Controls of `controlled` the server applied (since the "
                                  "last escalation): the progress of a deactivation over many runs.")
    controls_not_applied: int = Field(default=0, description="Controls of `controlled` not applied: the run had closed.")
    left_running: int = 0
    paused_polls: list[str] = Field(default_factory=list, description="Polls the deactivation paused (resumed on re-activation).")
    refused: int = Field(default=0, description="Deliveries refused since the deactivation.")


class ThrottleState(_M):
    """The deployment's ``throttle`` as kept by the engine (rules in ``_throttle``): per throttle key,
    the run starts still inside its window and the runs waiting for room, in order."""

    starts: dict[str, list[tuple[datetime, int]]] = Field(
        default_factory=dict, description="throttle key -> (instant, runs started then), oldest first: the starts "
        "that may still be inside its window ('' for an unkeyed throttle); keys in the order of their newest start.")
    lines: dict[str, list[str]] = Field(
        default_factory=dict, description="throttle key -> run keys of pending runs waiting for room in its "
        "window, first to start first.")
    marks: int = Field(default=0, description="How many marks `starts` holds (kept with it).")
    key_chars: int = Field(default=0, description="Characters of the keys of `starts` (kept with it).")


class ShardFill(_M):
    """How full one shard of the activation is, as the shard itself answered (``wfi.measure_shards``)."""

    shard: int = Field(ge=0)
    running: bool = Field(description="Its workflow runs (a shard not running is started again by `wfi activate`).")
    fill: float | None = Field(default=None, description="Its carried state against its capacity (core.limits).")
    splitting: bool = Field(default=False, description="It still takes part in a split (not drained).")


class GrowthState(_M):
    """Shard 0 of an activation that grows itself (``scale.grow_at``; _growth)."""

    next_check: datetime | None = Field(default=None, description="When every shard is next asked how full it is.")
    measuring: bool = Field(default=False, description="A MeasureShards is out.")
    fills: list[ShardFill] = Field(default_factory=list, description="Each shard's answer, last measured.")
    measured_at: datetime | None = None
    growing: int | None = Field(default=None, description="A growth to this many shards is under way (GrowShards).")
    since: datetime | None = None
    reason: str | None = Field(default=None, description="Why the growth under way (or the last one) was decided.")
    waits: str | None = Field(default=None, description="Why it does not grow although the fullest shard is past "
                              "grow_at (a split going on, a shard not running, max_shards).")
    grown: int = Field(default=0, description="Growths completed.")


class EngineState(_M):
    """Everything the activation owns; carried whole across continue-as-new."""

    activation_id: str
    previous_activations: list[str] = Field(default_factory=list)
    events: dict[str, EventRecord] = Field(default_factory=dict, description="Live dedup entries by event key.")
    runs: dict[str, RunRecord] = Field(default_factory=dict, description="Runs not yet terminal (+ recent terminal).")
    queues: dict[str, list[str]] = Field(default_factory=dict, description="queue key -> run keys, head holds the key.")
    waiting: list[str] = Field(default_factory=list, description="Pending runs blocked by overlap/concurrency, FIFO.")
    batches: dict[str, OpenBatch] = Field(default_factory=dict)
    schedules: dict[str, ScheduleState] = Field(default_factory=dict)
    polls: dict[str, PollState] = Field(default_factory=dict)
    subscriptions: dict[str, Subscription] = Field(default_factory=dict)
    errors: list[ErrorRecord] = Field(default_factory=list, description="Most recent initiation errors (bounded).")
    error_counts: dict[str, int] = Field(default_factory=dict)
    operator_log: list[OperatorAction] = Field(default_factory=list)
    seen_action_ids: list[str] = Field(default_factory=list)
    action_digests: dict[str, str] = Field(default_factory=dict, description="action_id -> digest of the action's "
                                           "content: a reused id with other content is refused.")
    counters: dict[str, int] = Field(default_factory=dict)
    seq: int = 0
    unacked: dict[str, SignalRun | PublishEvent] = Field(
        default_factory=dict, description="Subscription deliveries and lifecycle events kept until the shell confirms them."
    )
    compact_events: bytes = Field(default=b"", description="Released dedup entries, packed (see _codec).")
    deactivation: Deactivation | None = Field(default=None, description="Set by `deactivate`; cleared by a re-activation.")
    capacity_warned: bool = Field(default=False, description="Past the capacity warning level (core.limits.CAPACITY_WARNING).")
    capacity_full: bool = Field(default=False, description="At capacity: new ids are deferred (recorded once).")
    shed_through: datetime | None = Field(
        default=None, description="Dedup entries released up to this instant were shed early (at_capacity: shed_oldest): "
        "a redelivery of one of them was taken as new.")
    split: Split | None = Field(default=None, description="This shard's part in a split of the activation "
                                "(_split): a parent's drain, a child's wait for its parent (kept, ended, once the "
                                "parent drained); None: it took part in none since it began.")
    growth: GrowthState | None = Field(default=None, description="Shard 0 of an activation that grows itself "
                                       "(scale.grow_at): its measures and its growths (_growth).")
    # Queue keys across a split (_lanes): a child's holds, a parent's moved keys still running here.
    lanes_awaited: int | None = Field(default=None, description="A split's child: the parent whose handover of "
                                      "queue keys it waits for; every key is held until then.")
    lanes_held: list[str] = Field(default_factory=list, description="A split's child: keys whose earlier events "
                                  "still run on its parent.")
    lanes_freed: list[str] = Field(default_factory=list, description="A child: keys freed before the handover came.")
    lanes_parts: list[int] = Field(default_factory=list, description="A child: the parts of its handover come so far.")
    lanes_handed: int | None = Field(default=None, description="A split's parent: the shard count it handed its "
                                     "moved keys over for.")
    lanes_busy: dict[str, int] = Field(default_factory=dict, description="A split's parent: moved keys with events "
                                       "here -> the child told when they end.")
    lanes_waiting: list[str] = Field(default_factory=list, description="A split's child: batch runs waiting for "
                                     "their partition's earlier batch on the parent, in order.")
    lanes_sent: dict[str, str] = Field(default_factory=dict, description="A split's parent: '<child>/<part>' -> the "
                                       "digest of each handover part it sent (core.routing.handover_digest), "
                                       "which a child checks the part it got against.")
    throttle: ThrottleState = Field(default_factory=ThrottleState, description="The throttle's windows and the "
                                    "runs waiting for them (_throttle).")
    # Signalled deliveries kept by reference (their senders were told they are durable; SignalRef).
    signals_waiting: list[SignalRef] = Field(default_factory=list, description="Signals still waiting for room when "
                                             "the previous run continued as new: the next run takes them first, in order.")
    signals_deferred: dict[str, SignalRef] = Field(default_factory=dict, description="Signals deferred anyway, by event "
                                                   "key (at most limits.MAX_DEFERRED_SIGNALS), until their id is "
                                                   "delivered again (`wfi operate redrive`, `wfi deliver --redrive`).")
    redrive_kept: list[KeptEvent] = Field(default_factory=list, description="Events that did not run, kept for "
                                          "re-drive, oldest first (limits.MAX_REDRIVE_KEPT, MAX_REDRIVE_KEPT_BYTES).")
    redrive_seq: int = Field(default=0, description="The last number given to an event kept for re-drive.")

    @model_validator(mode="after")
    def _number_deferred_signals(self) -> EngineState:
        """Deferred signals listed by a build before numbers are numbered in their listed order, so every
        event kept for re-drive has one (a pure function of the state: a replay numbers them alike)."""
        for ref in self.signals_deferred.values():
            if ref.number == 0:
                self.redrive_seq += 1
                ref.number = self.redrive_seq
        return self


class StartRun(_M):
    kind: Literal["start_run"] = "start_run"
    run_key: str
    input: RunInput


class ControlRun(_M):
    kind: Literal["control_run"] = "control_run"
    run_key: str
    action: Literal["cancel", "terminate"]
    reason: str


class SignalRun(_M):
    kind: Literal["signal_run"] = "signal_run"
    workflow_id: str
    signal: str
    payload: Any
    key: str | None = Field(default=None, description="Set when kept in `EngineState.unacked` until it succeeds.")


class PublishEvent(_M):
    """Publish a lifecycle event (COMP-3) to the activations that trigger on it; kept until published."""

    kind: Literal["publish_event"] = "publish_event"
    key: str
    connector: str
    payload: dict[str, Any]


class RunPoll(_M):
    """Run one poll of a poll entry now (the connector's poll activity); report it with its ``seq`` and ``version``."""

    kind: Literal["run_poll"] = "run_poll"
    entry: str
    connector: str
    seq: int
    version: int = Field(description="Cursor version the poll starts from: a response under an older one is discarded.")
    cursor: str | None
    config: dict[str, Any]
    connection: dict[str, Any]
    limit: int


class WatchTarget(_M):
    run_key: str
    run_id: str | None


class WatchRuns(_M):
    """These runs are running and their outcomes are awaited: the shell watches those it is not watching yet."""

    kind: Literal["watch_runs"] = "watch_runs"
    runs: list[WatchTarget]
    prompt: bool = Field(default=True, description="Something waits for an ending as soon as it comes "
                         "(Runs.endings_awaited): every new run is watched at once; otherwise new runs may "
                         "be gathered for the next watcher (core.engine.Dispatcher).")


class MeasureShards(_M):
    """Ask every shard of the activation how full it is (shard 0 of an activation that grows itself);
    report the answers with ``Engine.shards_measured`` (``measure_failed`` when they cannot be asked)."""

    kind: Literal["measure_shards"] = "measure_shards"
    shards: int


class GrowShards(_M):
    """Split the activation into ``to`` shards, the split ``wfi activate`` makes (its last step rebinds
    shard 0, which ends the growth); a refusal is reported with ``Engine.growth_refused``."""

    kind: Literal["grow_shards"] = "grow_shards"
    to: int
    reason: str


Command = StartRun | ControlRun | SignalRun | PublishEvent | RunPoll | WatchRuns | MeasureShards | GrowShards

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Compat:
    """What an activation run keeps of the build that began it, so that its recorded history replays.

    Decided once when the run begins, from the run's patch markers and the spec's evaluation version
    (the shell: ``workflows/_compat.py``), and passed to the :class:`Engine`; nothing else in the
    engine asks. A new run (a new activation, or any run after continue-as-new) has every flag at
    its current value. A flag can be retired (with its old code path) once no activation begun
    before its change can still run or be replayed: every such activation has continued as new or
    closed, and its closed runs are past the namespace's retention.
    """

    bounded: bool = True
    """The budgets of ``core.limits`` (depth, id length, held bytes, batch bytes, work per task,
    start chunks by bytes): patch ``wfi-hostile-input-budgets`` (1 Dec 2026). Off only for a run
    recorded before it."""
    legacy_evaluation: bool = False
    """Expressions and schedules as a spec before evaluation 2 had them (Python-literal results,
    the old day-of-month/day-of-week rule, no bounds): ``ActivationSpec.evaluation < 2`` (30 Nov
    2026). Carried with the spec across continue-as-new: retired when every such activation has been
    re-activated (a new binding has the current evaluation)."""
    capacity: bool = True
    """The carried state is kept within its capacity (``core.limits.CAPACITY_BYTES``): at capacity new
    ids are deferred or the oldest released ones shed, with a warning at 80%; a state over the carry
    limit anyway sheds released ids until it fits: patch ``wfi-capacity`` (2 Dec 2026). Off: the
    state grew until continue-as-new failed and deliveries were deferred on the same history."""
    signals_kept: bool = True
    """A signalled delivery the held-bytes budget would defer waits in the shell and is taken later
    in arrival order, and one deferred anyway is recorded as ``deferred_signal`` for the operator:
    patch ``wfi-delivery-inbox`` (1 Dec 2026). Off: signalled deliveries were deferred like updates."""
    redrive_kept: bool = True
    """Invalid deliveries, quarantined poll items and start faults are kept for re-drive (their
    payloads or run inputs, counted in the capacity): patch ``wfi-redrive`` (5 Dec 2026). Off: nothing
    was kept but the error record; a re-drive finds deferred signals only."""


CURRENT = Compat()  # a run begun by this build


@dataclass(frozen=True, slots=True)
class Intake:
    """How a delivery reached the activation, for what it may do while the activation is under pressure."""

    signalled: bool = False
    """By signal: its sender was told it is durable and hears no disposition; a deferral is
    recorded as ``deferred_signal`` (for the operator) rather than ``deferred``."""
    may_wait: bool = False
    """The shell can keep it and offer it again: when only the held-bytes budget would defer it,
    nothing is recorded (``Engine.take_signal`` answers None)."""
    run_id: str | None = None
    """A signal's: the activation run whose history holds it (a deferral keeps a ``SignalRef``)."""
    defer_new: str | None = None
    """Defer it with this reason if its id is new (signalled deliveries wait ahead of it, and a new
    event must not pass them); a known id is still answered (duplicate, conflict)."""
    prior: EventRecord | None = None
    """The dedup entry of its id in the shard that took it before a split (core.sharding,
    "splitting"): an id this shard does not know is then answered as a redelivery of that entry."""
    lane: bool = False
    """Its id's shard took the id and routed the event here, its queue key's shard (core.sharding,
    lanes): taken, not routed again; the ``routed`` entry of the id's shard, when that is this one,
    is replaced by the event's."""


NO_INTAKE = Intake()


@dataclass(frozen=True, slots=True)
class Decision(Generic[R]):
    """What one call into the engine decided: its answer (``value``) and the commands the shell executes,
    in order. Every call that changes the engine returns one."""

    value: R
    commands: list[Command] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the acceptance pipeline did with one new event: its disposition, its run (when it has
    one, or will in a batch) and a detail (the fault or the subscription it was delivered to)."""

    disposition: Disposition
    run_key: str | None = None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class OperatorOutcome:
    """What an operator action did: applied (``ok``) or refused, with a message naming why."""

    ok: bool
    message: str
    events: tuple[RedrivenEvent, ...] = ()
    """A re-drive: what became of each event it selected."""


class DeliveryResult(_M):
    """Disposition of one delivery, returned to the caller once it is durable (EXT-8)."""

    entry: str | None
    delivery_id: str | None
    disposition: Disposition
    run_key: str | None = None
    retained: Disposition | None = Field(default=None, description="For a duplicate: the retained disposition.")
    message: str | None = None
    activation_id: str
    shard: int | None = Field(default=None, description="For `routed`: the shard that takes the event, its queue "
                              "key's lane (WfiClient sends it there; core.sharding).")
