"""The lane handover: a split moves queue keys to new lanes (core.sharding, "lanes" and "splitting").

A split from N to M shards moves a queue key from its lane under N (the *parent*) to its lane under
M (a *child*) when the two differ. The key's events must still run one at a time, in order: the
parent keeps running what it took of the key, and the child starts none of the key's events before
the parent has finished them.

- A child holds every queue key from the moment it is created (``lanes_awaited``), until its parent's
  *handover* names the moved keys that still have events on the parent (``lanes_held``); every
  other key is released at once.
- A parent, once it runs with the split's count, never takes another event of a moved key (it routes
  it to the child), sends each child its handover (:func:`hand_over`) and, as each moved key's queue
  empties, a *free* naming it (:func:`lane_done`). A batch partition moves the same way: its lane
  text (``core.sharding.batch_lane_text``) is held on the child, whose closed batches of it wait
  (``lanes_waiting``) until the parent's open batch of it has closed and its run was admitted. Both are kept commands (``SignalRun`` in
  ``unacked``): re-sent after a restart until delivered.
- The child applies a handover once (a repeat is ignored) and a free at any time (one that arrives
  before the handover is remembered, ``lanes_freed``).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from ..routing import handover_digest
from ..sharding import activation_wide, batch_lane_text, children_of, is_child, lane_of, parent_of
from . import _split
from ._lifecycle import keep
from ._types import RunRecord, SignalRun

if TYPE_CHECKING:
    from ..activation import ActivationSpec
    from ._ledger import Ledger

NOTICE_BYTES = 128 * 1024
"""At most this many bytes of keys in one handover signal (a larger handover comes in parts)."""
LANES_SIGNAL = "split_lanes"
"""The signal a split's parent sends its children about moved queue keys (:class:`LaneNotice`)."""


class LaneNotice(BaseModel):
    """A parent's word to a child about the queue keys that moved to it."""

    parent: int = Field(ge=0)
    kind: Literal["handover", "free"]
    keys: list[str] = Field(default_factory=list, description="handover: moved keys with events still on the parent; "
                            "free: keys whose events on the parent have all ended.")
    part: int = Field(default=0, ge=0, description="A handover too large for one signal comes in parts: this one's.")
    parts: int = Field(default=1, ge=1, le=10_000, description="How many parts the handover has.")


def keyed(spec: ActivationSpec) -> bool:
    """Whether the activation has external entries with ``queue_by`` or ``batch`` (whose keys and
    partitions a split moves; under an activation-wide policy every lane is shard 0, which stays)."""
    return not activation_wide(spec) and any(e.kind == "external" and (e.queue_by or e.batch) for e in spec.entries)


def awaited_parent(runs: Ledger) -> int | None:
    """For a new child of a split with queue keys: the parent whose handover it waits for."""
    spec, split = runs.spec, _split.current(runs)
    if split is None or not is_child(spec.shard, split) or not keyed(spec):
        return None
    return parent_of(spec.shard, split)


# The activation workflow id format is the wire's (wf_initiation.wire.shard_workflow_id), which every
# layer above the core reads. The engine sits below the wire and addresses its sibling shards itself
# (hand-overs here, subscription copies): it spells the same format, which tests/core/test_workflow_ids.py
# pins equal to the wire's.
_ACTIVATION_ID_PREFIX = "wfi-activation:"


def shard_workflow(workflow: str, shard: int) -> str:
    """Shard ``shard``'s Temporal workflow id, as ``wf_initiation.wire.shard_workflow_id`` makes it."""
    base = f"{_ACTIVATION_ID_PREFIX}{workflow}"
    return base if shard == 0 else f"{base}#{shard}"


def held(runs: Ledger, queue_key: str) -> bool:
    """Whether a child must not start the events of ``queue_key`` yet (its parent may still run some)."""
    state = runs.state
    return state.lanes_awaited is not None or queue_key in state.lanes_held


def hand_over(runs: Ledger) -> None:
    """A parent running with its split's count: tell each child which moved keys still have events
    here (once per split)."""
    spec, state = runs.spec, runs.state
    split = _split.current(runs)
    if split is None or is_child(spec.shard, split) or state.lanes_handed == spec.shards or not keyed(spec):
        return
    state.lanes_handed = spec.shards
    state.lanes_sent = {}
    moved: dict[int, list[str]] = {c: [] for c in children_of(spec.shard, split, spec.shards)}
    busy = [key for key, queue in state.queues.items() if _external(runs, state.runs.get(queue[0]) if queue else None)]
    busy += [batch_lane_text(b.entry, b.partition) for b in state.batches.values()
             if (entry := spec.entry(b.entry)) is not None and entry.kind == "external"]
    for key in busy:
        lane = lane_of(key, spec.shards)
        if lane in moved:
            moved[lane].append(key)
            state.lanes_busy[key] = lane
    for child, keys in moved.items():
        chunks = _chunks(sorted(keys))
        for n, chunk in enumerate(chunks):
            state.lanes_sent[f"{child}/{n}"] = handover_digest(chunk, n, len(chunks))
            _notice(runs, child, LaneNotice(parent=spec.shard, kind="handover", keys=chunk, part=n, parts=len(chunks)),
                    f"handover\x1f{n}")


def _chunks(keys: list[str]) -> list[list[str]]:
    """``keys`` in parts of at most ``NOTICE_BYTES`` each (at least one part, maybe empty)."""
    chunks: list[list[str]] = [[]]
    size = 0
    for key in keys:
        if chunks[-1] and size + len(key) + 8 > NOTICE_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(key)
        size += len(key) + 8
    return chunks


def _external(runs: Ledger, run: RunRecord | None) -> bool:
    entry = runs.spec.entry(run.entry) if run is not None else None
    return entry is not None and entry.kind == "external"


def lane_done(runs: Ledger, queue_key: str) -> None:
    """A parent has nothing left of ``queue_key``, a queue key (its queue emptied) or a batch
    partition (its open batch closed, its run admitted): free it on its child."""
    child = runs.state.lanes_busy.pop(queue_key, None)
    if child is not None:
        _notice(runs, child, LaneNotice(parent=runs.spec.shard, kind="free", keys=[queue_key]), f"free\x1f{queue_key}")


def lanes_check(runs: Ledger, child: int, keys: list[str]) -> dict[str, Any]:
    """A parent's answer to a child that asks whether a notice it got is this parent's
    (``core.routing.notice_problem`` judges it): whether it handed its keys over for the shard
    count it runs on, the digest of each handover part it sent the child, which of ``keys`` it
    still runs."""
    state = runs.state
    prefix = f"{child}/"
    return {"handed": state.lanes_handed is not None and state.lanes_handed == runs.spec.shards,
            "handover": {k.removeprefix(prefix): d for k, d in state.lanes_sent.items() if k.startswith(prefix)},
            "busy": [k for k in keys if state.lanes_busy.get(k) == child]}


def noticed(runs: Ledger, notice: LaneNotice, now: datetime) -> list[str]:
    """A child applies its parent's notice; returns the keys it releases (their heads may start)."""
    state = runs.state
    before = set(state.queues) if state.lanes_awaited is not None else set(state.lanes_held)
    if notice.kind == "handover":
        if state.lanes_awaited is None or state.lanes_awaited != notice.parent:
            return []  # applied already (a repeat after the parent restarted), or not this child's parent
        state.lanes_held = sorted({*state.lanes_held, *notice.keys})
        state.lanes_parts = sorted({*state.lanes_parts, notice.part})
        if len(state.lanes_parts) < notice.parts:
            return []  # every key stays held until the last part came
        state.lanes_held = sorted(set(state.lanes_held) - set(state.lanes_freed))
        state.lanes_awaited = None
        state.lanes_freed = []
        state.lanes_parts = []
    elif state.lanes_awaited is not None:
        state.lanes_freed = sorted({*state.lanes_freed, *notice.keys})
        return []
    else:
        state.lanes_held = sorted(set(state.lanes_held) - set(notice.keys))
    return sorted(k for k in before if not held(runs, k))


def _notice(runs: Ledger, child: int, notice: LaneNotice, what: str) -> None:
    keep(runs, SignalRun(workflow_id=shard_workflow(runs.spec.workflow, child), signal=LANES_SIGNAL,
                         payload=notice.model_dump(mode="json"), key=f"lanes\x1f{child}\x1f{what}"))
