"""An activation that grows itself (issue 35 item 3; core/engine/_growth.py): shard 0 asks every shard how
full it is at each check and, once the fullest has passed ``scale.grow_at``, decides one growth to
twice its shards (the split ``wfi activate`` makes), recorded with its reason; never while a split
goes on or a shard is not running, never past ``max_shards``; carried across continue-as-new. And the
binding: a grown spec has the id a deployment at that count gives, which ``wfi activate`` keeps."""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.activation import make_spec
from tests.support.engine import Driver, drive
from wf_initiation.core.activation import ActivationSpec, Split
from wf_initiation.core.engine import Engine, GrowShards, MeasureShards, ShardFill, decode_state, initial_state
from wf_initiation.errors import DiagnosticError

T0 = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
WORKFILE = 'name: grows\non:\n  http.request: {}\n  as: hook\n  queue_by: "{{ hook.body.k }}"\n'


def grows(tmp_path: pathlib.Path, shards: int = 2, max_shards: int = 4) -> ActivationSpec:
    return make_spec(tmp_path, WORKFILE, task_queue="q", scale={"shards": shards, "grow_at": 0.5, "max_shards": max_shards})


def shard_zero(spec: ActivationSpec) -> Driver:
    return drive(Engine(spec.shard_part(), initial_state(spec.shard_part(), T0)))


def fills(*values: float | None, splitting: int | None = None) -> list[ShardFill]:
    return [ShardFill(shard=k, running=v is not None, fill=v, splitting=k == splitting) for k, v in enumerate(values)]


def commands(zero: Driver) -> list[object]:
    return [c for c in zero.take_commands() if isinstance(c, MeasureShards | GrowShards)]


def measure_at(zero: Driver, now: datetime) -> None:
    zero.tick(now)
    assert commands(zero) == [MeasureShards(shards=zero.spec.shards)], "every shard is asked at each check"


def test_shard_zero_measures_every_shard_each_check_and_grows_once_the_fullest_passes_grow_at(tmp_path: pathlib.Path) -> None:
    zero = shard_zero(grows(tmp_path))
    zero.tick(T0)
    assert commands(zero) == [] and zero.next_wakeup() == T0 + MINUTE
    measure_at(zero, T0 + MINUTE)
    zero.tick(T0 + 2 * MINUTE)
    assert commands(zero) == [], "no second measure while one is out"
    zero.shards_measured(fills(0.3, 0.4), T0 + 2 * MINUTE)
    assert commands(zero) == [] and zero.growth()["fills"] == {"0": 0.3, "1": 0.4}
    assert "grows to 4 shards when the fullest shard passes 50%" in zero.growth()["next"]
    assert "now 40% on shard 1" in zero.growth()["next"]

    measure_at(zero, T0 + 3 * MINUTE)
    zero.shards_measured(fills(0.3, 0.6), T0 + 3 * MINUTE)
    assert commands(zero) == [GrowShards(to=4, reason="shard 1 is 60% full, past grow_at 50%")]
    [logged] = [a for a in zero.state.operator_log if a.action == "grow"]
    assert logged.detail.startswith("from 2 to 4 shards: shard 1 is 60% full") and logged.action_id == "auto-grow-2-to-4"
    assert zero.growth()["growing"] == 4 and "growing to 4 shards" in zero.growth()["next"]
    zero.tick(T0 + 10 * MINUTE)
    assert commands(zero) == [] and zero.next_wakeup() is None, "one growth at a time: no measure while it goes on"

    grown = grows(tmp_path).grown(4).model_copy(update={"split": Split(from_shards=2)})
    zero.rebind(grown.shard_part(), T0 + 11 * MINUTE)  # the split's last step: shard 0 switches
    assert zero.growth()["growing"] is None and zero.growth()["grown"] == 1
    measure_at(zero, T0 + 20 * MINUTE)


def test_a_growth_waits_while_a_split_goes_on_or_a_shard_is_not_running_and_stops_at_max_shards(
    tmp_path: pathlib.Path,
) -> None:
    zero = shard_zero(grows(tmp_path))
    zero.tick(T0)
    measure_at(zero, T0 + MINUTE)
    zero.shards_measured(fills(0.9, 0.2, splitting=1), T0 + MINUTE)
    assert commands(zero) == [] and "once the split going on has drained (shard(s) 1" in zero.growth()["next"]
    measure_at(zero, T0 + 2 * MINUTE)
    zero.shards_measured(fills(0.9, 0.2, splitting=1), T0 + 2 * MINUTE)
    assert [e.kind for e in zero.state.errors].count("growth_waits") == 1, "recorded once while the reason holds"
    measure_at(zero, T0 + 3 * MINUTE)
    zero.shards_measured(fills(0.9, None), T0 + 3 * MINUTE)
    assert commands(zero) == [] and "shard(s) 1 are not running: `wfi activate` starts them again" in zero.growth()["next"]

    at_max = shard_zero(grows(tmp_path, shards=4, max_shards=4))
    at_max.tick(T0)
    measure_at(at_max, T0 + MINUTE)
    at_max.shards_measured(fills(0.9, 0.9, 0.9, 0.9), T0 + MINUTE)
    assert commands(at_max) == [] and "max_shards (4) shards: it grows no further" in at_max.growth()["next"]


def test_shard_zero_still_draining_its_own_split_does_not_grow(tmp_path: pathlib.Path) -> None:
    spec = grows(tmp_path, shards=2, max_shards=8)
    zero = shard_zero(spec)
    zero.rebind(spec.grown(4).model_copy(update={"split": Split(from_shards=2)}).shard_part(), T0)
    zero.tick(T0)
    measure_at(zero, T0 + MINUTE)
    zero.shards_measured(fills(0.9, 0.1, 0.1, 0.1), T0 + MINUTE)
    assert commands(zero) == [] and "shard(s) 0 still take part in it" in zero.growth()["next"]


def test_a_refused_growth_is_recorded_and_measured_again_at_the_next_check(tmp_path: pathlib.Path) -> None:
    zero = shard_zero(grows(tmp_path))
    zero.tick(T0)
    measure_at(zero, T0 + MINUTE)
    zero.shards_measured(fills(0.1, 0.7), T0 + MINUTE)
    assert commands(zero) == [GrowShards(to=4, reason="shard 1 is 70% full, past grow_at 50%")]
    zero.growth_refused(4, "shard(s) 1 still take part in the previous split", T0 + 2 * MINUTE)
    assert zero.growth()["growing"] is None and zero.next_wakeup() == T0 + 3 * MINUTE
    assert any(e.kind == "growth_refused" and "previous split" in e.message for e in zero.state.errors)
    measure_at(zero, T0 + 3 * MINUTE)
    zero.measure_failed("the server is unreachable", T0 + 3 * MINUTE)
    measure_at(zero, T0 + 4 * MINUTE)


def test_a_growth_under_way_is_carried_across_continue_as_new_and_issued_again(tmp_path: pathlib.Path) -> None:
    spec = grows(tmp_path)
    zero = shard_zero(spec)
    zero.tick(T0)
    measure_at(zero, T0 + MINUTE)
    zero.shards_measured(fills(0.8, 0.1), T0 + MINUTE)
    assert len(commands(zero)) == 1
    following = drive(Engine(spec.shard_part(), decode_state(zero.encode_state())))
    following.resume(T0 + 2 * MINUTE)
    assert commands(following) == [GrowShards(to=4, reason="shard 0 is 80% full, past grow_at 50%")], \
        "the split is idempotent: a run that left it unfinished has it done again"
    measuring = shard_zero(spec)
    measuring.tick(T0)
    measure_at(measuring, T0 + MINUTE)
    again = drive(Engine(spec.shard_part(), decode_state(measuring.encode_state())))
    again.resume(T0 + 2 * MINUTE)
    measure_at(again, T0 + 2 * MINUTE)  # the previous run's measure never reports here: asked again


def test_other_shards_and_activations_without_grow_at_decide_nothing(tmp_path: pathlib.Path) -> None:
    spec = grows(tmp_path)
    one = drive(Engine(spec.as_shard(1).shard_part(), initial_state(spec.as_shard(1).shard_part(), T0)))
    one.tick(T0 + 10 * MINUTE)
    assert commands(one) == [] and one.growth() is None
    plain = shard_zero(make_spec(tmp_path, WORKFILE, task_queue="q", scale={"shards": 2}))
    plain.tick(T0 + 10 * MINUTE)
    assert commands(plain) == [] and plain.growth() is None and plain.next_wakeup() is None


def test_a_grown_binding_has_the_id_of_a_deployment_at_that_count_and_wfi_activate_keeps_it(tmp_path: pathlib.Path) -> None:
    spec = grows(tmp_path)
    at_four = make_spec(tmp_path, WORKFILE, task_queue="q", scale={"shards": 4, "grow_at": 0.5, "max_shards": 4})
    assert spec.grown(4).activation_id == at_four.activation_id != spec.activation_id
    assert spec.for_running(4) == spec.grown(4), "an activation that grew keeps its shards"
    assert spec.for_running(2) is spec and spec.for_running(8) is spec, "past max_shards: the spec as it is (refused)"
    plain = make_spec(tmp_path, WORKFILE, task_queue="q", scale={"shards": 2})
    assert plain.for_running(4) is plain, "without grow_at a smaller scale.shards is refused as ever"


@pytest.mark.parametrize(("scale", "problem"), [
    ({"shards": 2, "grow_at": 0.8}, "needs scale.max_shards"),
    ({"shards": 2, "max_shards": 8}, "set grow_at"),
    ({"shards": 4, "grow_at": 0.8, "max_shards": 2}, "below scale.shards"),
    ({"shards": 2, "grow_at": 0.8, "max_shards": 6}, "power of two"),
    ({"shards": 2, "grow_at": 1.5, "max_shards": 8}, "less than 1"),
])
def test_growth_settings_are_refused_with_the_fix(tmp_path: pathlib.Path, scale: dict, problem: str) -> None:
    with pytest.raises((DiagnosticError, ValueError), match=problem):
        make_spec(tmp_path, WORKFILE, task_queue="q", scale=scale)


def test_the_operator_page_of_shard_zero_shows_each_shard_s_fill_and_the_next_step_in_utc(tmp_path: pathlib.Path) -> None:
    zero = shard_zero(grows(tmp_path))
    zero.tick(T0)
    measure_at(zero, T0 + MINUTE)
    zero.shards_measured(fills(0.12, 0.41), T0 + MINUTE)
    page = zero.markdown()
    assert ("**grows itself** (scale.grow_at 50%, at most 4 shards) · fill per shard at 2026-12-06 09:01:00 UTC: "
            "0 12% · 1 41% · next: grows to 4 shards when the fullest shard passes 50% of its capacity (now 41% on "
            "shard 1); next check 2026-12-06 09:02:00 UTC") in page, page
