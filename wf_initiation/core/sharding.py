"""One activation spread over several Temporal workflows: which shard takes an event (pure).

A workflow deployed with ``scale: {shards: N}`` is activated as N activation workflows, shard 0 with
the id every sender already knows (``wfi-activation:<workflow>``) and shard k with ``...#k``. Each
external delivery is taken by exactly one shard, chosen from its entry and delivery id alone
(:func:`shard_of`), so its dedup, conflict detection and disposition live in that shard whatever the
payload says; redelivering an id always reaches the shard that kept it. Everything else (schedules,
polls, lifecycle-event entries, subscriptions, operator actions) is shard 0's: their events have one
source, so nothing is gained by spreading them.

Entries that relate events to each other have each event *run* by one shard, its lane
(:func:`event_lane`): an entry with ``queue_by`` orders the events of one key, so the key's shard
(:func:`lane_of`) takes them; a ``batch`` collects the events of one partition, so the partition's
shard does; ``overlap`` other than ``allow``, ``max_concurrent_runs`` and a ``throttle`` span every
run, so shard 0 takes every such event (where schedules and polls run too). The id's shard (its *id-home*) still
judges the id first: dedup, conflict, validation, ``when`` and the keys are decided there; an event
admitted with a lane is recorded there as ``routed`` (the id is taken) and taken by the lane, which
queues, batches or admits it (``WfiClient`` sends it on; a signal is passed on by the id-home). A
redelivery that changes the key is a ``conflict`` at the id-home, before any lane sees it.
Capacity (docs/limits.md) is each shard's: N shards carry N times the delivery ids (an event routed
to another lane is kept by both, and a lane keeps every event it runs).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ._expr import ExpressionFault, canonical_key

if TYPE_CHECKING:
    from .activation import ActivationSpec, EntrySpec, Split

MAX_SHARDS = 256
"""Shards one activation may have (a power of two: a later split doubles them)."""


def shard_of(entry: str, delivery_id: str | None, shards: int) -> int:
    """The shard that takes an external delivery: SHA-256 of ``entry``, 0x1F, ``delivery_id`` (UTF-8),
    its first 8 bytes as a big-endian integer, modulo ``shards``. A delivery without an id goes to
    shard 0 (it is ``invalid`` anywhere). Fixed: clients, the ingress and every shard must agree,
    across versions (tests/core/test_sharding.py pins vectors)."""
    if shards <= 1 or delivery_id is None:
        return 0
    digest = hashlib.sha256(f"{entry}\x1f{delivery_id}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % shards


def lane_of(queue_key: str, shards: int) -> int:
    """The shard that queues and runs the events of ``queue_key`` (the canonical text of a ``queue_by``
    value): SHA-256 of 0x1E, ``queue_key`` (UTF-8), first 8 bytes big-endian, modulo ``shards``. Not
    by entry: equal keys of two entries share one queue (TRIG-12). Fixed like :func:`shard_of`
    (tests/core/test_sharding.py pins vectors)."""
    if shards <= 1:
        return 0
    digest = hashlib.sha256(f"\x1e{queue_key}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % shards


def delivery_shard(paths: Mapping[str, str | None], entry: str | None, payload: Any, shards: int) -> int:
    """The shard of a delivery to ``entry`` (None: the only external entry) of an activation whose
    external entries have these delivery-id ``paths``; 0 for an entry it does not have (shard 0
    answers what is wrong with the delivery). What clients and every shard compute alike."""
    if shards <= 1:
        return 0
    key = delivery_key(paths, entry, payload)
    return 0 if key is None else shard_of(key[0], key[1], shards)


def delivery_key(paths: Mapping[str, str | None], entry: str | None, payload: Any) -> tuple[str, str] | None:
    """(entry, delivery id) of a delivery to ``entry`` (None: the only external entry), or None when
    it has none (it is then invalid on any shard). The one key function of clients and shards."""
    name = entry if entry is not None else (next(iter(paths)) if len(paths) == 1 else None)
    if name is None or name not in paths:
        return None
    ident = delivery_identity(paths[name], payload)
    return None if ident is None else (name, ident)


def value_at(path: str | None, payload: Any) -> Any:
    """The value at a manifest's dotted ``delivery_id`` path, or None."""
    value: Any = payload
    for part in (path or "").split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def delivery_identity(path: str | None, payload: Any) -> str | None:
    """The delivery id at ``path`` as text (a string as it is, any other JSON value canonically);
    None when absent or not a JSON value. The dedup key and the shard are computed from it."""
    raw = value_at(path, payload)
    if raw is None or isinstance(raw, str):
        return raw
    try:
        return canonical_key(raw)
    except ExpressionFault:
        return None


def activation_wide(spec: ActivationSpec) -> bool:
    """Whether a policy spans every run of the activation (``overlap`` other than ``allow``,
    ``max_concurrent_runs``, a ``throttle``, keyed or not): then shard 0 takes every external event
    that could start a run, so the policy is kept in one place (a throttle's windows: shard 0's)."""
    policies = spec.policies
    return policies.overlap != "allow" or policies.max_concurrent_runs is not None or policies.throttle is not None


def batch_lane_text(entry: str, partition: str | None) -> str:
    """What a batch partition's lane is the hash of (:func:`lane_of`): never equal to a queue key's
    canonical JSON text (0x1D first)."""
    return f"\x1d{entry}\x1f{partition or ''}"


def event_lane(spec: ActivationSpec, entry: EntrySpec, queue_key: str | None, partition: str | None) -> int | None:
    """The shard that takes an admitted event of ``entry`` (None: its id's shard, as for an entry that
    relates no events to others): shard 0 under an activation-wide policy (where the schedules and
    polls run too), else the lane of its batch (entry and partition) or of its queue key."""
    if spec.shards <= 1 or entry.kind != "external":
        return None
    if activation_wide(spec):
        return 0
    if entry.batch:
        return lane_of(batch_lane_text(entry.name, partition), spec.shards)
    return lane_of(queue_key, spec.shards) if queue_key is not None else None


def sharding_problems(spec: ActivationSpec) -> list[str]:
    """Why this activation cannot be spread over ``spec.shards`` workflows (empty when it can)."""
    problems = []
    grow = spec.grow
    if grow is not None and (grow.max_shards > MAX_SHARDS or grow.max_shards & (grow.max_shards - 1)
                             or grow.max_shards < spec.shards):
        problems.append(f"scale.max_shards is {grow.max_shards}: it must be a power of two from the shards it runs "
                        f"on ({spec.shards}) to {MAX_SHARDS}")
    if spec.shards <= 1 and grow is None:
        return problems  # an activation that may grow is judged as the sharded one it may become
    if spec.shards > MAX_SHARDS or spec.shards & (spec.shards - 1):
        problems.append(f"scale.shards is {spec.shards}: it must be a power of two up to {MAX_SHARDS}")
    keyed_elsewhere = [e.name for e in spec.entries if e.kind != "external" and e.queue_by]
    keyed_external = [e.name for e in spec.entries if e.kind == "external" and e.queue_by]
    if keyed_elsewhere and keyed_external and not activation_wide(spec):
        problems.append(f"entries {', '.join(map(repr, keyed_elsewhere))} (schedule, poll or lifecycle) and external entries "
                        "both use queue_by: equal keys must share one queue (TRIG-12), but a sharded workflow runs an "
                        "external entry's keys on each key's shard and the others on shard 0; remove scale, or one "
                        "of the queue_by")
    return problems


# ---------------------------------------------------------------------------- splitting
# An activation on N shards is split into M (a multiple of N, both powers of two) while it runs.
# ``shard_of`` is the id's hash modulo the count, so an id of shard k under N is under M in shard
# k + j*N for some j: shards below N keep the ids that stay and take nothing that moved, and every
# id that moves goes to a new shard (a child) from exactly one old one (its parent, child % N).
# The parents switch to M first (from then on they refuse, or pass on, the ids that moved: what they
# hold of them is frozen), then the children judge a new id only with the parent's dedup entry for
# it (or its answer that it has none): a redelivery of an id the parent took before the split is a
# duplicate (or conflict) of that entry, never a second run. A parent has drained once every id it
# held at the split has expired; it tells its children, which then judge new ids alone.


def split_problem(current: int, wanted: int) -> str | None:
    """Why an activation running on ``current`` shards cannot be split into ``wanted`` (None: it can)."""
    if wanted < current:
        return (f"it has {current} shards and scale.shards is {wanted}: an activation is split into more shards, never "
                f"merged into fewer (the ids that shards {wanted}-{current - 1} hold would be forgotten, and a "
                f"redelivery of one within its retention would run again); keep scale.shards at {current} or more")
    if wanted % current:
        return f"{wanted} shards are not a multiple of the {current} it runs on"
    return None


def parent_of(shard: int, split: Split) -> int:
    """The shard that took, before the split, the ids a child ``shard`` takes."""
    return shard % split.from_shards


def is_child(shard: int, split: Split | None) -> bool:
    """Whether ``shard`` was created by the split and still judges new ids with its parent's answer."""
    return split is not None and shard >= split.from_shards


def children_of(shard: int, split: Split, shards: int) -> list[int]:
    """The shards that take the ids which moved away from parent ``shard``."""
    return list(range(shard + split.from_shards, shards, split.from_shards))


def drain_step(split: Split, unreleased_before_split: bool, now: datetime, retention: timedelta) -> Split:
    """A parent's split after a check: ``drain_after`` set once no id it held at the split has a run
    still going (each then expires within ``retention``), ``drained`` once that instant has passed."""
    if split.drained:
        return split
    if split.drain_after is None:
        return split if unreleased_before_split else split.model_copy(update={"drain_after": now + retention})
    return split.model_copy(update={"drained": True}) if now >= split.drain_after else split

