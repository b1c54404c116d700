"""A split's child started again from its recovered state takes its parent's word from the parent's
state (core/engine/recovery.py): the keys the parent still runs stay held, every other key runs."""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime, timedelta

from tests.support.activation import make_spec
from tests.support.hostile import hook
from wf_initiation.core.activation import Split
from wf_initiation.core.engine import Disposition, Engine, initial_state
from wf_initiation.core.engine import recovery as lanes
from wf_initiation.core.sharding import lane_of

T0 = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
WORKFILE = 'name: laned\non:\n  http.request: {}\n  as: hook\n  queue_by: "{{ hook.body.k }}"\n'


def child_engine(tmp_path: pathlib.Path) -> tuple[Engine, list[str]]:
    """Shard 2 of 4, new in a split from 2 (its parent is shard 0), holding two moved keys' events."""
    spec = make_spec(tmp_path, WORKFILE, task_queue="q", scale={"shards": 4})
    part = spec.model_copy(update={"split": Split(from_shards=2)}).as_shard(2).shard_part()
    engine = Engine(part, initial_state(part, T0))
    keys = [k for k in (f"k-{n}" for n in range(200)) if lane_of(f'"{k}"', 4) == 2][:2]
    for n, key in enumerate(keys):
        result = engine.deliver("hook", hook(f"e-{n}", k=key), T0, lane=True).value
        assert result.disposition is Disposition.QUEUED, "held for the parent's handover"
    return engine, keys


def starting(engine: Engine) -> int:
    return sum(1 for r in engine._machine.state.runs.values() if r.status == "starting")


def test_a_child_that_missed_its_handover_and_frees_takes_them_from_its_parent_s_state(tmp_path: pathlib.Path) -> None:
    engine, (busy, free) = child_engine(tmp_path)
    assert lanes.awaits_parent(engine)
    assert lanes.rejoin(engine, 0, None, {}, T0) is None and starting(engine) == 0, "no handover yet: nothing changes"
    held = lanes.rejoin(engine, 0, 4, {f'"{busy}"': 2, '"other"': 3}, T0 + timedelta(seconds=1))
    assert held == [f'"{busy}"'] and starting(engine) == 1, "the key the parent no longer runs starts; the busy one waits"
    assert lanes.rejoin(engine, 0, 4, {}, T0 + timedelta(seconds=2)) == [] and starting(engine) == 2
    assert not lanes.awaits_parent(engine)
    assert lanes.rejoin(engine, 0, 4, {}, T0 + timedelta(seconds=3)) == [] and starting(engine) == 2, "idempotent"
