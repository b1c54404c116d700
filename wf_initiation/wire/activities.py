"""Argument and result types of the activities (and of the sample waiting run): what histories carry.

The activation workflow schedules these activities with these models as input; a worker of another
version reads them back from history. Poll connectors (``activities.poll``, third-party ones too)
take :class:`PollRequest` and return :class:`PollResponse`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.engine import LifecycleEvent
from wf_initiation.core.runinput import Causation, RunInput

from .names import ACTIVATION_WORKFLOW
from .search_attributes import WFI_TRIGGERS


# --- wfi.start_runs, wfi.watch_runs, wfi.control_run
class RunToStart(BaseModel):
    """One run ``wfi.start_runs`` starts: its run key (the workflow id) and its input."""

    run_key: str
    input: RunInput
    trace: dict[str, str] | None = Field(default=None, description="Trace context of the delivery that admitted "
                                         "the run (W3C carrier): its start joins that trace (wf_initiation.telemetry).")


class StartRunsRequest(BaseModel):
    """The input of ``wfi.start_runs``: runs of one workflow type and task queue, started at most once each."""

    workflow_type: str
    task_queue: str
    execution_timeout_seconds: float | None = None
    runs: list[RunToStart]
    not_before_seconds: float = Field(
        default=0.0, description="Sleep at least this long (monotonic, from this attempt's start) before starting: "
        "the activation's hold until an anticipated occurrence's instant (activities.clock).")
    publish_started: bool = Field(
        default=False, description="Also publish the workflow.started lifecycle event of each run it reports "
        "started (the activation's lifecycle_events is on); StartedRun.published says which it did.")


class StartedRun(BaseModel):
    """What ``wfi.start_runs`` did with one run: started (its run id), found started or ended, or a start fault."""

    run_key: str
    run_id: str | None = None
    already_started: bool = False
    terminal_status: str | None = Field(default=None, description="Set when the run had already ended.")
    error: str | None = Field(default=None, description="Set when this run can never be started: a start fault.")
    published: bool = Field(default=False, description="Its workflow.started event was published "
                            "(StartRunsRequest.publish_started): the activation keeps nothing to publish for it.")


class WatchedRun(BaseModel):
    """A run ``wfi.watch_runs`` waits on."""

    run_key: str
    run_id: str | None = None
    causation: Causation | None = Field(default=None, description="The run's causation, for its lifecycle event "
                                        "(WatchRequest.publish_for).")


class WatchRequest(BaseModel):
    """The input of ``wfi.watch_runs``: the runs to watch, how long to wait, how long to gather a burst of endings."""

    runs: list[WatchedRun]
    max_wait_seconds: float = 300.0
    linger_seconds: float = 0.05
    first_look: bool = Field(default=False, description="A first look at gathered runs (nothing awaits their endings "
                             "at once): no long poll, and it reports once every run ended or at max_wait, not at the "
                             "first ending.")
    first_sweep_seconds: float = Field(default=0.0, description="Seconds before the first sweep (a first look: the runs "
                                       "were just started).")
    publish_for: str | None = Field(
        default=None, description="The activation's workflow name when its lifecycle_events is on: the watch also "
        "publishes the workflow.completed / workflow.failed event of each ending it reports (RunOutcome.published).")


class RunOutcome(BaseModel):
    """A watched run that ended, and how (``completed``, ``failed``, ``terminated``, ...)."""

    run_key: str
    status: str
    published: bool = Field(default=False, description="Its lifecycle event was published (WatchRequest.publish_for).")


class ControlRequest(BaseModel):
    """The input of ``wfi.control_run``: cancel or terminate one run, with the reason recorded."""

    run_key: str
    action: str
    reason: str


class ControlRunsRequest(BaseModel):
    """The input of ``wfi.control_runs``: cancel or terminate a page of runs (``core.engine``'s
    ``CONTROL_PAGE`` at most); the answer is one ``applied`` / ``not applied: ...`` per run, in order."""

    runs: list[ControlRequest]


# --- wfi.publish_lifecycle
class PublishRequest(BaseModel):
    """The input of ``wfi.publish_lifecycle``: lifecycle events of runs, for the activations subscribed to them."""

    events: list[LifecycleEvent]


class PublishResult(BaseModel):
    """What ``wfi.publish_lifecycle`` sent."""

    signals: int = Field(description="Signals sent (events x subscribing activations).")
    activations: list[str] = Field(default_factory=list, description="Workflow ids of the activations signalled.")


def subscribers_query(connector: str) -> str:
    """Visibility query of the running activations that trigger on ``connector``."""
    return (f"WorkflowType = '{ACTIVATION_WORKFLOW}' AND ExecutionStatus = 'Running' "
            f"AND {WFI_TRIGGERS.name} = '{connector}'")


# --- wfi.measure_shards, wfi.grow (an activation that grows itself, core/engine/_growth.py)
class MeasureShardsRequest(BaseModel):
    """The input of ``wfi.measure_shards``: the activation whose shards are asked how full they are; it
    returns one ``ShardFill`` per shard (core.engine)."""

    workflow: str
    shards: int = Field(ge=1)


class GrowRequest(BaseModel):
    """The input of ``wfi.grow``: split the activation of ``spec`` (shard 0's whole binding) into ``to``
    shards, the split ``wfi activate`` makes; new shards start on ``task_queue``."""

    spec: ActivationSpec
    to: int = Field(ge=2)
    task_queue: str
    reason: str = ""


class GrowResult(BaseModel):
    """What ``wfi.grow`` did: split (``ok``), or why the split cannot be made now."""

    ok: bool
    message: str


# --- wfi.poll.<connector>
class PollRequest(BaseModel):
    """One poll: the binding's configuration, its connection and the cursor to resume from."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    connector: str = Field(description="Manifest name of the connector, e.g. `rss.item_published`.")
    config: dict[str, Any] = Field(
        description="The entry's evaluated configuration (never contains credentials)."
    )
    connection: dict[str, Any] = Field(
        default_factory=dict,
        description="The connection's settings as the deployment writes them (DSN, file locations, headers); "
        "secrets are references (`env:NAME`, `file:/path`) that the activity resolves on the worker, so no "
        "secret value is ever in workflow history. May be empty.",
    )
    cursor: str | None = Field(
        default=None, description="Opaque position to resume from; None starts from the beginning."
    )
    limit: int = Field(default=500, ge=1, le=10_000, description="Maximum number of items returned.")


class PollItem(BaseModel):
    """One candidate event and the cursor position just after it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    payload: dict[str, Any] = Field(description="The event payload; carries the manifest's delivery_id.")
    cursor_after: str = Field(description="Resuming from this cursor returns the items after this one.")
    problem: str | None = Field(
        default=None,
        description="Set when the connector cannot return this item (e.g. it is over the item byte limit): "
        "`payload` then holds only its delivery id, and the activation treats the item as invalid with this "
        "reason (quarantined or held, per the deployment's `invalid_items`, POLL-11).",
    )


class PollResponse(BaseModel):
    """The items of one poll and the cursor to resume from once all of them are disposed."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    items: list[PollItem] = Field(description="Candidate events, in stable order when `stable_order`.")
    cursor: str | None = Field(
        description="Last item's `cursor_after`; with no items, the request's cursor or one that resumes at the "
        "same point of the source (an updated validator such as an ETag, a position carried over to a renumbered mailbox)."
    )
    stable_order: bool = Field(description="Does this response promise the source's stable order?")
    more: bool = Field(default=False, description="True when `limit` or the byte budget cut the response: poll again soon.")
    notices: list[str] = Field(
        default_factory=list,
        description="What the operator should know about the source (a mailbox's UIDVALIDITY changed): recorded on the "
        "activation as `poll_notice` errors, at most 8 per response, each cut to 500 characters. Never a credential.",
    )


# --- wfi.WaitForExample
class WaitRequest(BaseModel):
    """Input of the example workflow :class:`WaitForExample`."""

    workflow: str
    trigger: str
    match: dict[str, Any] = Field(default_factory=dict)
    timeout_seconds: float | None = None
    waits: int = Field(default=1, ge=1, description="How many events to wait for, one after another.")


__all__ = [
    "ControlRequest", "ControlRunsRequest", "GrowRequest", "GrowResult", "MeasureShardsRequest", "PollItem", "PollRequest", "PollResponse", "PublishRequest", "PublishResult", "RunOutcome",
    "RunToStart", "StartRunsRequest", "StartedRun", "WaitRequest", "WatchRequest", "WatchedRun", "subscribers_query",
]
