"""A shard's part in a split of its activation (core.sharding, "splitting"), kept in the engine's state.

A split from N shards begins with an activation of the binding on more shards whose spec names it
(``ActivationSpec.split``, ``from_shards`` N). The engine takes it into its state the first time it
sees it (:func:`adopt`) and keeps its progress there (``EngineState.split``), carried across
continue-as-new with everything else:

- a parent (a shard below N) records the last acceptance before the split (``seq``); its drain
  check (:func:`drain`) sets ``drain_after`` once no id it held then has a run still going, then
  ``drained`` once that instant has passed, and names the children to tell;
- a child (N or above) judges a new id with its parent's answer until the parent confirms it has
  drained (:func:`parent_drained`); its record is kept, ended, so the spec that named the split
  (carried with every run) is never taken for a new one.

The shell only waits between checks (:class:`DrainCheck`) and signals the children named. A run
begun before the engine kept the split carried its progress in the spec (``seq``, ``drain_after``,
``drained``): the first run of this build takes it from there.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from ..activation import Split
from ..sharding import children_of, drain_step, is_child
from ._ledger import Ledger

DRAIN_CHECK_MIN = timedelta(seconds=2)
DRAIN_CHECK_MAX = timedelta(minutes=10)
"""How often a split's parent checks whether the ids it held at the split have expired: a quarter
of ``dedup_retention``, within these bounds."""


@dataclasses.dataclass(frozen=True, slots=True)
class DrainCheck:
    """How a split's parent checks its drain: every ``every``, the ids it held expiring ``retention``
    after their runs ended (fixed for the checks of one workflow run)."""

    every: timedelta
    retention: timedelta


def adopt(ledger: Ledger) -> None:
    """Take the split the spec names into the state, unless the state has it already (the same
    ``from_shards``): a parent records the last acceptance before it (``seq``), unless the spec
    carries the progress of a run begun before the engine kept it."""
    named, state = ledger.spec.split, ledger.state
    if named is None or (state.split is not None and state.split.from_shards == named.from_shards):
        return
    if named.seq is None and not is_child(ledger.spec.shard, named):
        named = named.model_copy(update={"seq": state.seq})
    state.split = named


def current(ledger: Ledger) -> Split | None:
    """This shard's part in a split now: None when it takes part in none, or is a child whose
    parent has drained (it judges new ids alone); a parent's drained split stays (``drained``)."""
    split = ledger.state.split
    if split is None or (split.drained and is_child(ledger.spec.shard, split)):
        return None
    return split


def unreleased_through(ledger: Ledger, seq: int) -> bool:
    """Whether a dedup entry accepted at or before ``seq`` still waits for its run to end."""
    return any(r.seq <= seq and r.released_at is None for r in ledger.state.events.values())


def drain_check(ledger: Ledger) -> DrainCheck | None:
    """How this shard checks its drain, or None when it is no split's parent still draining."""
    split = current(ledger)
    if split is None or split.drained or is_child(ledger.spec.shard, split):
        return None
    retention = ledger.spec.policies.dedup_retention
    return DrainCheck(every=min(max(retention / 4, DRAIN_CHECK_MIN), DRAIN_CHECK_MAX), retention=retention)


def drain(ledger: Ledger, check: DrainCheck, now: datetime) -> list[int]:
    """One drain check of a split's parent (``core.sharding.drain_step``): its progress recorded;
    the children to tell when it has drained now (they ask it, then judge new ids alone), else []."""
    split, spec = ledger.state.split, ledger.spec
    if split is None or split.seq is None or split.drained or is_child(spec.shard, split):
        return []
    ledger.state.split = step = drain_step(split, unreleased_through(ledger, split.seq), now, check.retention)
    return children_of(spec.shard, split, spec.shards) if step.drained else []


def parent_drained(ledger: Ledger) -> None:
    """A child's parent confirmed it has drained: this shard judges new ids alone from now on."""
    split = ledger.state.split
    if split is not None and is_child(ledger.spec.shard, split):
        ledger.state.split = split.model_copy(update={"drained": True})
