"""Event delivery to waiting runs (INIT-8, INIT-9, INIT-10): the pure rules, in the engine (the same with
real Temporal: tests/integration/test_subscriptions.py)."""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.support.activation import make_spec
from tests.support.engine import drive
from tests.support.replies import REPLIES, reply
from wf_initiation.core.engine import Disposition, Engine, SignalRun, SubscribeRequest, UnsubscribeRequest, initial_state
from wf_initiation.core.engine._offer import matches, select  # the correlation rules themselves
from wf_initiation.core.engine._types import Subscription

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def sub(sub_id: str, seq: int, match: dict[str, Any], entry: str = "reply", expires_at: datetime | None = None) -> Subscription:
    return Subscription(sub_id=sub_id, entry=entry, run_workflow_id=f"run-{sub_id}", match=match, created_at=T0,
                        expires_at=expires_at, seq=seq)


def test_correlation_compares_dotted_paths_as_json_values() -> None:
    payload = {"body": {"thread": "t1", "n": 1, "tags": ["a", "b"], "meta": {"x": 1, "y": 2}}}
    assert matches({}, payload)
    assert matches({"body.thread": "t1", "body.n": 1.0}, payload), "1 == 1.0 as JSON values"
    assert matches({"body.meta": {"y": 2, "x": 1}}, payload), "key order is irrelevant"
    assert matches({"body.tags.1": "b"}, payload)
    assert not matches({"body.thread": "t2"}, payload)
    assert not matches({"body.missing": None}, payload), "an absent path never matches, not even null"
    assert not matches({"body.n": True}, payload), "true is not 1"


def test_selection_takes_the_earliest_registered_active_match() -> None:
    subs = [sub("late", 7, {"body.thread": "t1"}), sub("early", 3, {"body.thread": "t1"}),
            sub("other", 1, {"body.thread": "t2"}), sub("expired", 2, {}, expires_at=T0),
            sub("other-entry", 0, {}, entry="mail")]
    chosen = select(subs, "reply", {"body": {"thread": "t1"}}, T0)
    assert chosen is not None and chosen.sub_id == "early"
    assert select(subs, "reply", {"body": {"thread": "t9"}}, T0) is None


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 1000)), max_size=12),
       st.sampled_from(["a", "b", "c", "d"]))
def test_the_selected_subscription_matches_and_no_earlier_one_does(specs: list[tuple[str, int]], thread: str) -> None:
    subs = [sub(f"s{i}", seq, {"t": t}) for i, (t, seq) in enumerate(specs)]
    chosen = select(subs, "reply", {"t": thread}, T0)
    matching = [s for s in subs if s.match["t"] == thread]
    assert (chosen is None) == (not matching)
    if chosen is not None:
        assert chosen.match["t"] == thread and chosen.seq == min(s.seq for s in matching)


def engine_for(tmp_path: pathlib.Path) -> Engine:
    spec = make_spec(tmp_path, REPLIES.format(name="pure-replies"), task_queue="unused")
    return drive(Engine(spec, initial_state(spec, T0)))


def subscribe_req(sub_id: str, thread: str, expires_at: datetime | None = None, entry: str = "reply") -> SubscribeRequest:
    return SubscribeRequest(sub_id=sub_id, entry=entry, run_workflow_id=f"run-{sub_id}", match={"body.thread": thread},
                            expires_at=expires_at)


def test_an_event_is_matched_only_against_subscriptions_active_at_its_acceptance(tmp_path: pathlib.Path) -> None:
    # proves: INIT-8, INIT-9
    engine = engine_for(tmp_path)
    before = engine.deliver("reply", reply("d1", "t1"), T0)
    assert before.disposition == Disposition.SUPPRESSED
    engine.subscribe(subscribe_req("s1", "t1"), T0)
    assert not [c for c in engine.take_commands() if isinstance(c, SignalRun)], "the earlier event is not held for it"
    again = engine.deliver("reply", reply("d1", "t1"), T0)
    assert again.disposition == Disposition.DUPLICATE and again.retained == Disposition.SUPPRESSED
    after = engine.deliver("reply", reply("d2", "t1"), T0)
    assert after.disposition == Disposition.DELIVERED and after.run_key is None
    (signal,) = [c for c in engine.take_commands() if isinstance(c, SignalRun)]
    assert signal.workflow_id == "run-s1" and signal.payload["delivery_id"] == "d2"
    assert engine.state.subscriptions == {}, "a satisfied subscription ends"
    assert engine.deliver("reply", reply("d3", "t1"), T0).disposition == Disposition.SUPPRESSED


def test_an_unconfirmed_delivery_is_reissued_from_state_until_the_signal_succeeds(tmp_path: pathlib.Path) -> None:
    # proves: INIT-7, INIT-10
    engine = engine_for(tmp_path)
    engine.subscribe(subscribe_req("s1", "t1"), T0)
    engine.deliver("reply", reply("d1", "t1"), T0)
    carried = engine.state.model_copy(deep=True)  # what continue-as-new or a replay after a crash starts from
    restarted = drive(Engine(engine.spec, carried))
    restarted.resume(T0)  # a new workflow run re-issues what was not confirmed
    (again,) = restarted.take_commands()
    assert isinstance(again, SignalRun) and again.payload["delivery_id"] == "d1"
    restarted.command_done(again.key or "", None, T0)
    assert restarted.state.unacked == {}
    restarted.resume(T0)
    assert restarted.take_commands() == [], "nothing left to re-issue"


def test_unsubscribe_answers_with_an_end_notice_unless_a_delivery_is_on_its_way(tmp_path: pathlib.Path) -> None:
    engine = engine_for(tmp_path)
    engine.subscribe(subscribe_req("s1", "t1"), T0)
    engine.subscribe(subscribe_req("s2", "t2"), T0)
    engine.deliver("reply", reply("d1", "t1"), T0)
    engine.take_commands()
    engine.unsubscribe(UnsubscribeRequest(sub_id="s1", run_workflow_id="run-s1"), T0)
    engine.unsubscribe(UnsubscribeRequest(sub_id="s2", run_workflow_id="run-s2"), T0)
    notices = [c.payload for c in engine.take_commands() if isinstance(c, SignalRun)]
    assert notices == [{"sub_id": "s2", "kind": "ended", "entry": "reply", "delivery_id": None, "payload": None,
                        "reason": "cancelled", "message": None}]
    assert engine.state.subscriptions == {}


def test_a_subscription_expires_at_its_deadline_and_is_refused_for_a_non_event_entry(tmp_path: pathlib.Path) -> None:
    engine = engine_for(tmp_path)
    engine.subscribe(subscribe_req("s1", "t1", expires_at=T0 + timedelta(minutes=5)), T0)
    assert engine.next_wakeup() == T0 + timedelta(minutes=5)
    engine.tick(T0 + timedelta(minutes=5))
    assert engine.state.subscriptions == {}
    assert engine.deliver("reply", reply("d1", "t1"), T0 + timedelta(minutes=6)).disposition == Disposition.SUPPRESSED
    engine.subscribe(subscribe_req("s2", "t1", entry="nope"), T0)
    ended = [c.payload for c in engine.take_commands() if isinstance(c, SignalRun)]
    assert [(e["sub_id"], e["reason"]) for e in ended] == [("s1", "expired"), ("s2", "refused")]
    assert "no external or poll trigger entry 'nope'" in ended[1]["message"] and "reply" in ended[1]["message"]
