"""A shard's part in a split is the engine's state (issue 33 item 1; core/engine/_split.py): a parent
records where it stood when the split began, its drain is the engine's decision (the shell only
waits between checks and tells the children named), a child's part ends when its parent drained,
and all of it is carried across continue-as-new by the engine's codec. Specs and states of runs
begun before (the progress rode in the spec) are taken over once."""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime, timedelta

from tests.support.activation import make_spec
from tests.support.engine import drive
from tests.support.hostile import hook
from wf_initiation.core.activation import ActivationSpec, Split
from wf_initiation.core.engine import Disposition, Engine, decode_state, initial_state

T0 = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
WORKFILE = 'name: split\non:\n  http.request: {}\n  as: hook\n  when: "{{ hook.body.go }}"\n'


def specs(tmp_path: pathlib.Path) -> tuple[ActivationSpec, ActivationSpec]:
    before = make_spec(tmp_path, WORKFILE, task_queue="q", scale={"shards": 2}, dedup_retention="1h")
    after = make_spec(tmp_path, WORKFILE, task_queue="q", scale={"shards": 4}, dedup_retention="1h")
    return before, after.model_copy(update={"split": Split(from_shards=2)})


def carried(engine: Engine, spec: ActivationSpec) -> Engine:
    """The engine of the next run after continue-as-new (the spec as the shell passes it on)."""
    following = Engine(spec, decode_state(engine.encode_state()))
    following.resume(T0)
    return following


def test_a_parent_records_where_it_stood_when_the_split_began_and_keeps_it_across_continue_as_new(
    tmp_path: pathlib.Path,
) -> None:
    before, after = specs(tmp_path)
    parent = drive(Engine(before.as_shard(1).shard_part(), initial_state(before.as_shard(1).shard_part(), T0)))
    for n in range(3):
        parent.deliver("hook", hook(f"d-{n}", go=False), T0)
    assert parent.split is None and parent.drain_check() is None
    parent.rebind(after.as_shard(1).shard_part(), T0)
    assert parent.split == Split(from_shards=2, seq=3), "the ids it held when the split began are those children ask about"
    assert parent.drain_check() is not None
    parent.deliver("hook", hook("d-9", go=False), T0)
    again = carried(parent.engine, after.as_shard(1).shard_part())
    assert again.split == Split(from_shards=2, seq=3), "carried by the state; the spec naming the split is not a new one"
    rebound = carried(parent.engine, after.model_copy(update={"split": None}).as_shard(1).shard_part())
    assert rebound.split == Split(from_shards=2, seq=3), "a rebind without a split keeps the split going on"


def test_a_parent_drains_by_the_engine_s_checks_and_names_its_children_once(tmp_path: pathlib.Path) -> None:
    # proves: EXT-5
    before, after = specs(tmp_path)
    parent = drive(Engine(before.shard_part(), initial_state(before.shard_part(), T0)))
    held = parent.deliver("hook", hook("d-1", go=True), T0)
    assert held.disposition is Disposition.ACCEPTED
    parent.rebind(after.shard_part(), T0)
    check = parent.drain_check()
    assert check is not None and check.every == timedelta(minutes=10) and check.retention == timedelta(hours=1)

    assert parent.drain(check, T0 + timedelta(minutes=15)) == [], "the run of an id held at the split still goes"
    assert parent.split.drain_after is None
    parent.run_started(held.run_key, "r-1", T0)
    parent.run_finished(held.run_key, "completed", T0 + timedelta(minutes=20))
    assert parent.drain(check, T0 + timedelta(minutes=30)) == []
    assert parent.split.drain_after == T0 + timedelta(minutes=90), "every id it held expires one retention later"
    assert parent.drain(check, T0 + timedelta(minutes=89)) == []
    assert parent.drain(check, T0 + timedelta(minutes=90)) == [2], "drained: its one child is told"
    assert parent.split.drained and parent.drain_check() is None
    assert parent.drain(check, T0 + timedelta(minutes=95)) == [], "told once"
    assert carried(parent.engine, after.shard_part()).split.drained, "a drained parent stays drained"


def test_a_child_judges_alone_once_its_parent_drained_and_the_spec_does_not_start_it_again(
    tmp_path: pathlib.Path,
) -> None:
    _, after = specs(tmp_path)
    part = after.as_shard(3).shard_part()
    child = drive(Engine(part, initial_state(part, T0)))
    assert child.split == Split(from_shards=2) and child.drain_check() is None, "a child drains nothing"
    child.split_parent_drained()
    assert child.split is None
    assert carried(child.engine, part).split is None, "the spec that named the split does not begin it again"


def test_a_new_split_after_a_drained_one_begins_again(tmp_path: pathlib.Path) -> None:
    _, after = specs(tmp_path)
    wider = make_spec(tmp_path, WORKFILE, task_queue="q", scale={"shards": 8}, dedup_retention="1h")
    part = after.as_shard(3).shard_part()
    shard = drive(Engine(part, initial_state(part, T0)))
    shard.split_parent_drained()
    shard.deliver("hook", hook("d-1", go=False), T0)
    shard.rebind(wider.model_copy(update={"split": Split(from_shards=4)}).as_shard(3).shard_part(), T0)
    assert shard.split == Split(from_shards=4, seq=1), "the child of the first split is a parent of the second"


def test_the_progress_a_run_of_an_earlier_build_carried_in_its_spec_is_taken_over_once(tmp_path: pathlib.Path) -> None:
    before, after = specs(tmp_path)
    parent = drive(Engine(before.shard_part(), initial_state(before.shard_part(), T0)))
    parent.deliver("hook", hook("d-1", go=False), T0)
    old_state = parent.engine.encode_state()  # no split in it: an earlier build kept the split in the spec
    progress = Split(from_shards=2, seq=7, drain_after=T0 + timedelta(hours=1))
    old_spec = after.model_copy(update={"split": progress}).shard_part()
    resumed = Engine(old_spec, decode_state(old_state))
    resumed.resume(T0)
    assert resumed.split == progress
    check = resumed.drain_check()
    assert check is not None and resumed.drain(check, T0 + timedelta(hours=1)).value == [2]
    child_spec = after.model_copy(update={"split": None}).as_shard(2).shard_part()  # a child whose parent drained
    child = Engine(child_spec, decode_state(old_state))
    child.resume(T0)
    assert child.split is None
