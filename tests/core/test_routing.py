"""Every routing verdict of a sharded activation (core.routing, issue 33 item 1, issue 32 item 1): a
pure function of the spec and the request, table by table, and the checks of what shards tell
each other."""

from __future__ import annotations

import pathlib

import pytest

from tests.support.activation import make_spec
from wf_initiation.core.activation import ActivationSpec, Split
from wf_initiation.core.routing import (
    Route,
    Verdict,
    busy_in_split,
    copy_problem,
    drained_problem,
    handover_digest,
    home_of,
    lane_route,
    notice_problem,
    route,
    split_refusal,
)
from wf_initiation.core.sharding import shard_of

WORKFILE = 'name: r\non:\n  http.request: {}\n  as: hook\n'
SHARDS = 4


@pytest.fixture
def spec(tmp_path: pathlib.Path) -> ActivationSpec:
    return make_spec(tmp_path, WORKFILE, task_queue="q", scale={"shards": SHARDS})


def ident_on(shard: int) -> str:
    return next(i for i in (f"d-{n}" for n in range(1000)) if shard_of("hook", i, SHARDS) == shard)


def verdict(spec: ActivationSpec, shard: int, ident: str, *, claim: tuple[int, int] | None = None,
            key_lane: int | None = None, answered: bool = True, prior_shards: int | None = None,
            split: Split | None = None) -> Route:
    return route(spec, shard, None, {"delivery_id": ident}, claim=claim, key_lane=lambda: key_lane,
                 answered=lambda: answered, prior_shards=prior_shards, split=split)


def test_a_delivery_is_taken_by_its_home_and_sent_there_from_any_other_shard(spec: ActivationSpec) -> None:
    ident = ident_on(2)
    assert home_of({"hook": "delivery_id"}, None, {"delivery_id": ident}, SHARDS) == 2
    assert verdict(spec, 2, ident) == Route(Verdict.TAKE, 2)
    assert verdict(spec, 1, ident) == Route(Verdict.ELSEWHERE, 2)


def test_a_lane_claim_is_taken_only_by_the_lane_its_key_names(spec: ActivationSpec) -> None:
    ident = ident_on(1)
    assert verdict(spec, 3, ident, claim=(SHARDS, 3), key_lane=3) == Route(Verdict.TAKE, 3, laned=True)
    assert verdict(spec, 2, ident, claim=(SHARDS, 3), key_lane=3) == Route(Verdict.ELSEWHERE, 3)
    forged = verdict(spec, 3, ident, claim=(SHARDS, 3), key_lane=None)
    assert (forged.verdict, forged.shard) == (Verdict.FORGED, 1) and "orders no events by key" in forged.reason
    # Shard 0 may be a subscription copy's lane: the engine takes it only for a subscription it holds.
    assert verdict(spec, 0, ident, claim=(SHARDS, 0), key_lane=None).verdict is Verdict.TAKE
    # A claim made with another shard count is stale: the id's home takes it.
    assert verdict(spec, 3, ident, claim=(2, 3), key_lane=None) == Route(Verdict.ELSEWHERE, 1)


def test_a_split_child_asks_its_parent_about_an_id_it_does_not_hold(spec: ActivationSpec) -> None:
    ident = ident_on(3)
    split = Split(from_shards=2)
    assert verdict(spec, 3, ident, answered=False, split=split) == Route(Verdict.ASK_PARENT, 1)
    assert verdict(spec, 3, ident, answered=True, split=split) == Route(Verdict.TAKE, 3)
    assert verdict(spec, 3, ident, answered=False, prior_shards=SHARDS, split=split) == Route(Verdict.TAKE, 3)


def test_a_split_is_refused_with_its_reason_once_for_the_client_and_the_shards() -> None:
    assert split_refusal(2, 4, from_shards=None, busy=[]) is None
    assert "never merged into fewer" in (split_refusal(4, 2, from_shards=None, busy=[]) or "")
    assert "previous split" in (split_refusal(2, 4, from_shards=2, busy=[3]) or "")
    assert "must say so" in (split_refusal(2, 4, from_shards=-1, busy=[]) or "")


def test_a_drained_signal_holds_only_when_the_parent_itself_says_so() -> None:
    split = Split(from_shards=2)
    assert drained_problem({"split": {"from_shards": 2, "drained": True}}, split) is None
    assert "has not drained" in (drained_problem({"split": {"from_shards": 2}}, split) or "")
    assert "no split" in (drained_problem({"shards": 4}, split) or "")
    assert "could not be asked" in (drained_problem(None, split) or "")


def test_a_lane_notice_holds_only_as_the_parent_sent_it() -> None:
    keys = ['"a"', '"b"']
    answer = {"handed": True, "handover": {"0": handover_digest(keys, 0, 1)}, "busy": ['"a"']}
    assert notice_problem("handover", list(reversed(keys)), 0, 1, answer) is None
    assert "not the handover" in (notice_problem("handover", [], 0, 1, answer) or "")
    assert notice_problem("free", ['"b"'], 0, 1, answer) is None
    assert "still runs" in (notice_problem("free", ['"a"'], 0, 1, answer) or "")
    assert "no handover" in (notice_problem("free", ['"b"'], 0, 1, {**answer, "handed": False}) or "")


def test_a_subscription_copy_holds_only_while_shard_zero_holds_the_original() -> None:
    assert copy_problem("subscribe", "s-1", {"held": ["s-1"]}) is None
    assert "holds no subscription" in (copy_problem("subscribe", "s-1", {"held": []}) or "")
    assert copy_problem("unsubscribe", "s-1", {"held": []}) is None
    assert "still holds" in (copy_problem("unsubscribe", "s-1", {"held": ["s-1"]}) or "")
    assert copy_problem("subscribe", "s-1", "shard 0 could not be asked") == "shard 0 could not be asked"


def test_a_routed_event_goes_on_to_its_lane_with_the_claim_the_lane_checks(spec: ActivationSpec) -> None:
    assert lane_route(1, 3, SHARDS) == Route(Verdict.ELSEWHERE, 3, claim=(SHARDS, 3), reason="pass on to its queue key's shard")
    assert lane_route(3, 3, SHARDS) == Route(Verdict.TAKE, 3, laned=True, claim=(SHARDS, 3))
    ident = ident_on(1)
    claimed = lane_route(1, 3, SHARDS).claim
    assert verdict(spec, 3, ident, claim=claimed, key_lane=3).verdict is Verdict.TAKE, "the lane takes what it was routed"


def test_only_the_shards_still_in_a_split_of_the_current_count_are_busy() -> None:
    answers = [{"shards": 2, "split": {"from_shards": 1, "drained": False}},
               {"shards": 4, "split": {"from_shards": 2, "drained": False}},  # switched already: the split being made
               {"shards": 2, "split": {"from_shards": 1, "drained": True}}, None, {"shards": 2}]
    assert busy_in_split(answers, 2) == [0]
