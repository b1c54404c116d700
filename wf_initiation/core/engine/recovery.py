"""A split's child recovered from a closed run's history rejoins the lane handover (core/engine/_lanes.py).

Why: a parent's handover and frees are kept signals, but one sent while the child's workflow was
closed (terminated, failed, timed out) fails and is forgotten (counted ``notices_undeliverable``):
the child, started again, would hold those queue keys forever. So before the child starts again,
its recovered state takes the parent's word as the parent's own state says it now (``lanes_handed``,
``lanes_busy``, read by the client with a query of the parent): the keys the parent still runs stay
held, every other key is released, exactly as the notices would have done. Pure: state and the
parent's facts in, the keys released out.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from ._facade import Engine
from ._lanes import LaneNotice


def awaits_parent(engine: Engine) -> bool:
    """Whether this shard holds queue keys for a parent's word (a handover or frees)."""
    state = engine._machine.state
    return state.lanes_awaited is not None or bool(state.lanes_held)


def rejoin(engine: Engine, parent: int, handed: int | None, busy: Mapping[str, int], now: datetime) -> list[str] | None:
    """Apply what the parent's state says to this child: its handover when the parent handed over
    (``handed`` is the shard count it handed over at) and a free of every held key the parent no
    longer runs (``busy``: moved key -> the child it moved to). Returns the keys still held (the
    parent frees each when its events there end), or None when nothing changed: the parent has not
    handed over yet, and its handover reaches the new run."""
    state = engine._machine.state
    shard, shards = engine.spec.shard, engine.spec.shards
    still = sorted(k for k, child in busy.items() if child == shard)
    if state.lanes_awaited is not None:
        if state.lanes_awaited != parent or handed != shards:
            return None
        engine.lanes_noticed(LaneNotice(parent=parent, kind="handover", keys=still), now)
    freed = sorted(set(state.lanes_held) - set(still))
    if freed:
        engine.lanes_noticed(LaneNotice(parent=parent, kind="free", keys=freed), now)
    return list(state.lanes_held)
