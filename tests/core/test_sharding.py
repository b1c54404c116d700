"""Which shard of a sharded activation takes a delivery (issue 21 item 2): a pure function with
fixed vectors, so clients, the ingress and every shard agree across versions."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest

from tests.support.activation import make_spec
from wf_initiation._shards import Routing, RoutingCache, combined_summary
from wf_initiation.core._diagnostics import DiagnosticError
from wf_initiation.core.sharding import (
    MAX_SHARDS,
    delivery_identity,
    delivery_shard,
    lane_of,
    shard_of,
    sharding_problems,
)
from wf_initiation.errors import CodecError, QueryFailed, TemporalUnavailable

# (entry, delivery id, shards) -> shard. Computed once (and checked with `printf 'request\x1fd-2' |
# sha256sum`): a change here re-routes the deliveries of every running sharded activation.
VECTORS = [
    ("request", "d-1", 2, 0),
    ("request", "d-1", 8, 0),
    ("request", "d-2", 8, 1),
    ("orders", "4f9c2", 64, 18),
    ("hook", "é-ü", 16, 6),
    ("request", "", 4, 1),
]

WORKFILE = 'name: {name}\non:\n  http.request: {{}}\n  as: hook\n{extra}'


@pytest.mark.parametrize(("entry", "ident", "shards", "expected"), VECTORS)
def test_the_route_of_a_delivery_is_fixed(entry: str, ident: str, shards: int, expected: int) -> None:
    assert shard_of(entry, ident, shards) == expected


def test_one_shard_and_a_delivery_without_an_id_go_to_shard_zero() -> None:
    assert shard_of("request", "anything", 1) == 0
    assert shard_of("request", None, 8) == 0


def test_routes_spread_over_every_shard() -> None:
    counts = [0] * 8
    for i in range(4000):
        counts[shard_of("request", f"id-{i}", 8)] += 1
    assert min(counts) > 400, counts


def test_the_identity_routed_is_the_identity_deduplicated() -> None:
    assert delivery_identity("delivery_id", {"delivery_id": "a"}) == "a"
    assert delivery_identity("delivery_id", {"delivery_id": 7}) == "7"
    assert delivery_identity("meta.id", {"meta": {"id": {"b": 1, "a": 2}}}) == '{"a":2,"b":1}'
    assert delivery_identity("delivery_id", {"other": 1}) is None
    paths = {"request": "delivery_id"}
    assert delivery_shard(paths, None, {"delivery_id": "d-2"}, 8) == 1, "the only external entry when none named"
    assert delivery_shard(paths, "missing", {"delivery_id": "d-2"}, 8) == 0
    assert Routing(shards=8, entries=paths).shard("request", {"delivery_id": "d-2"}) == 1


# (canonical queue key, shards) -> lane. Checked with `printf '\x1e"k-2"' | sha256sum` (first 8
# bytes e59a5b4c513ed292, modulo 8: 2): a change here moves the keys of running activations.
LANE_VECTORS = [
    ('"k-1"', 2, 1),
    ('"k-1"', 8, 3),
    ('"k-2"', 8, 2),
    ('"acme"', 64, 63),
    ('"é-ü"', 16, 15),
    ("7", 4, 3),
]


@pytest.mark.parametrize(("key", "shards", "expected"), LANE_VECTORS)
def test_the_lane_of_a_queue_key_is_fixed(key: str, shards: int, expected: int) -> None:
    assert lane_of(key, shards) == expected
    assert lane_of(key, 1) == 0


def test_a_sharded_workflow_refuses_only_what_no_shard_layout_can_hold(tmp_path: pathlib.Path) -> None:
    laned = make_spec(tmp_path, WORKFILE.format(name="k", extra='  queue_by: "{{ hook.body.k }}"\n'), task_queue="q",
                      scale={"shards": 4})
    assert sharding_problems(laned) == [], "queue_by: each key's events are taken by the key's lane"
    batched = make_spec(tmp_path, WORKFILE.format(name="q", extra="  batch: {size: 2, max_wait: 1m}\n"), task_queue="q",
                        scale={"shards": 4})
    assert sharding_problems(batched) == [], "each batch on its partition's lane"
    for wide in ({"overlap": "skip"}, {"max_concurrent_runs": 3}):
        spec = make_spec(tmp_path, WORKFILE.format(name="w", extra=""), task_queue="q", scale={"shards": 4}, **wide)
        assert sharding_problems(spec) == [], "every run admitted on shard 0"
    mixed = ('name: mixed\non:\n  - http.request: {}\n    as: hook\n    queue_by: "{{ hook.body.k }}"\n'
             '  - time.schedule: {cron: "0 9 * * *", timezone: UTC}\n    as: tick\n    queue_by: "{{ \'k\' }}"\n')
    with pytest.raises(DiagnosticError, match="TRIG-12"):
        make_spec(tmp_path, mixed, task_queue="q", scale={"shards": 2})
    with pytest.raises(DiagnosticError, match="power of two"):
        make_spec(tmp_path, WORKFILE.format(name="p", extra=""), task_queue="q", scale={"shards": 6})
    with pytest.raises(DiagnosticError):
        make_spec(tmp_path, WORKFILE.format(name="b", extra=""), task_queue="q", scale={"shards": MAX_SHARDS * 2})
    spec = make_spec(tmp_path, WORKFILE.format(name="fine", extra='  when: "{{ hook.body.go }}"\n'), task_queue="q",
                     scale={"shards": 4})
    assert spec.shards == 4 and sharding_problems(spec) == []


def test_a_shard_runs_the_external_entries_and_the_id_names_the_scale(tmp_path: pathlib.Path) -> None:
    mixed = """
name: mixed
on:
  - http.request: {}
    as: hook
  - time.schedule: {cron: "0 * * * *", timezone: UTC}
    as: tick
"""
    one = make_spec(tmp_path, mixed, task_queue="q")
    four = make_spec(tmp_path, mixed, task_queue="q", scale={"shards": 4})
    assert one.activation_id != four.activation_id, "the scale is part of the binding"
    assert make_spec(tmp_path, mixed, task_queue="q", scale={"shards": 1}).activation_id == one.activation_id, \
        "an unsharded binding hashes as before scale existed"
    assert [e.name for e in four.as_shard(0).shard_part().entries] == ["hook", "tick"]
    assert [e.name for e in four.as_shard(3).shard_part().entries] == ["hook"]
    assert four.as_shard(3).shard_part().activation_id == four.activation_id


def test_the_whole_activation_sums_its_shards() -> None:
    parts = [{"status": "active", "counters": {"deliveries": 3, "accepted": 2}, "error_counts": {}, "dedup_entries": 3,
              "runs_running": 1, "capacity": {"fill": 0.1}, "shard": 0, "schedules": {"tick": {}}},
             {"status": "active", "counters": {"deliveries": 5}, "error_counts": {"invalid": 1}, "dedup_entries": 5,
              "runs_running": 2, "capacity": {"fill": 0.3}, "shard": 1}]
    whole = combined_summary(parts)
    assert whole["counters"] == {"deliveries": 8, "accepted": 2} and whole["error_counts"] == {"invalid": 1}
    assert whole["dedup_entries"] == 8 and whole["runs_running"] == 3 and whole["capacity"] == {"fill": 0.3}
    assert whole["schedules"] == {"tick": {}} and [s["shard"] for s in whole["shards"]] == [0, 1]


def test_each_shard_s_page_says_which_shard_it_is(tmp_path: pathlib.Path) -> None:
    from datetime import UTC, datetime

    from wf_initiation.core.engine import Engine, initial_state

    spec = make_spec(tmp_path, WORKFILE.format(name="paged", extra=""), task_queue="q", scale={"shards": 4}).as_shard(2)
    page = Engine(spec.shard_part(), initial_state(spec.shard_part(), datetime(2026, 1, 1, tzinfo=UTC))).markdown()
    assert "**shard 2 of 4**" in page and "wfi state --workflow paged --summary" in page


async def test_a_delivery_goes_to_shard_zero_when_the_routing_cannot_be_asked_and_a_read_raises() -> None:
    # proves: EXT-8
    asked: list[str] = []
    answers: list[Any] = [TemporalUnavailable("task failed"), QueryFailed("stale", failure_type="StaleActivationError"),
                          {"shards": 4, "entries": {"hook": None}}]

    async def ask(workflow: str) -> dict[str, Any]:
        asked.append(workflow)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    cache = RoutingCache(ask)
    assert (await cache.get("w", fallback=True)).shards == 1, "unrouted: shard 0 takes it or passes it on"
    assert (await cache.get("w", fallback=True)).shards == 1
    assert (await cache.get("w", fallback=True)).shards == 4 and len(asked) == 3, "a failure is not kept"
    assert (await cache.get("w")).shards == 4 and len(asked) == 3, "an answer is kept"
    answers.append(TemporalUnavailable("down"))
    with pytest.raises(TemporalUnavailable):  # reads and deactivation must reach every shard
        await cache.get("other")
    answers.append(CodecError("no codec"))
    with pytest.raises(CodecError):  # what fails every call about the workflow fails the delivery too
        await cache.get("third", fallback=True)


async def test_a_one_shard_activation_is_routed_without_a_query() -> None:
    # proves: EXT-8
    asked: list[str] = []

    async def ask(workflow: str) -> dict[str, Any]:
        asked.append(workflow)
        return {"shards": 4, "entries": {"hook": None}}

    async def sharded(workflow: str) -> bool:  # the client describes shard 1's workflow id
        return workflow == "wide"

    cache = RoutingCache(ask, sharded)
    assert (await cache.get("narrow", fallback=True)).shards == 1 and asked == [], "no query for one shard"
    assert (await cache.get("wide", fallback=True)).shards == 4 and asked == ["wide"]
    cache.forget("narrow")  # after a misrouted update
    assert (await cache.get("narrow")).shards == 1



async def test_callers_routing_at_once_share_one_question() -> None:
    # proves: EXT-8
    # A bridge restarting under load: 16 first deliveries at once describe shard 1 and query shard 0
    # once, not 16 times (a query is a task on the busiest shard); a failure reaches each caller.
    asked: list[str] = []
    described: list[str] = []
    release = asyncio.Event()

    async def ask(workflow: str) -> dict[str, Any]:
        asked.append(workflow)
        await release.wait()
        if workflow == "down":
            raise QueryFailed("stale", failure_type="StaleActivationError")
        return {"shards": 4, "entries": {"hook": None}}

    async def sharded(workflow: str) -> bool:
        described.append(workflow)
        return True

    cache = RoutingCache(ask, sharded)
    callers = [asyncio.create_task(cache.get(w, fallback=True)) for w in ["wide"] * 16 + ["down"] * 3]
    await asyncio.sleep(0.01)
    callers[0].cancel()  # one caller giving up does not cancel the question for the others
    release.set()
    answers = await asyncio.gather(*callers[1:])
    assert [r.shards for r in answers] == [4] * 15 + [1] * 3, "the failure: shard 0 takes each of them"
    assert sorted(asked) == ["down", "wide"] and sorted(described) == ["down", "wide"]
    assert (await cache.get("down", fallback=True)).shards == 1 and asked.count("down") == 2, "a failure is asked again"


# ---------------------------------------------------------------------------- splitting
def test_a_split_moves_each_id_from_exactly_its_parent_and_only_to_new_shards() -> None:
    # proves: EXT-3
    from wf_initiation.core.activation import Split
    from wf_initiation.core.sharding import children_of, is_child, parent_of

    for before, after in ((1, 2), (2, 8), (4, 8), (8, 256)):
        split = Split(from_shards=before)
        for i in range(2000):
            old, new = shard_of("hook", f"id-{i}", before), shard_of("hook", f"id-{i}", after)
            if new != old:
                assert is_child(new, split) and parent_of(new, split) == old, (before, after, i)
                assert new in children_of(old, split, after)
            else:
                assert not is_child(new, split)
        assert sorted(c for k in range(before) for c in children_of(k, split, after)) == list(range(before, after))


def test_split_refusals_and_the_drain_of_a_parent() -> None:
    from datetime import UTC, datetime, timedelta

    from wf_initiation.core.activation import Split
    from wf_initiation.core.sharding import drain_step, split_problem

    assert split_problem(2, 8) is None and split_problem(1, 2) is None
    assert "never merged into fewer" in (split_problem(8, 2) or "")
    t0, day = datetime(2026, 12, 2, tzinfo=UTC), timedelta(hours=24)
    parent = Split(from_shards=2, seq=10)
    assert drain_step(parent, True, t0, day) == parent, "a run of an id held at the split is still going"
    waiting = drain_step(parent, False, t0, day)
    assert waiting.drain_after == t0 + day and not waiting.drained
    assert drain_step(waiting, False, t0 + day - timedelta(seconds=1), day) == waiting
    assert drain_step(waiting, False, t0 + day, day).drained
    assert drain_step(drain_step(waiting, False, t0 + day, day), False, t0, day).drained, "drained stays drained"


def test_routing_names_the_split_and_the_key_of_a_delivery() -> None:
    routing = Routing.from_answer({"shards": 8, "entries": {"hook": "delivery_id"}, "split": {"from_shards": 2}})
    assert routing.split_from == 2 and routing.key(None, {"delivery_id": "d-1"}) == ("hook", "d-1")
    assert routing.key("other", {"delivery_id": "d-1"}) is None and routing.key(None, {}) is None
    assert Routing.from_answer({"shards": 2, "entries": {}}).split_from is None
