"""Event delivery to waiting runs (INIT-8, INIT-9, INIT-10): the pure rules, then real Temporal."""

from __future__ import annotations

import pathlib
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from temporalio.client import Client, WorkflowHandle

from tests.support.engine import drive
from tests.support.waits import assert_eventually
from tests.support.activation import make_spec, unique
from tests.support.worker_proc import WorkerProcess
from wf_initiation.client import WfiClient
from wf_initiation.wire import SUBSCRIPTION_REFUSED
from wf_initiation.core.engine import Disposition, Engine, initial_state
from wf_initiation.core.engine import SignalRun, SubscribeRequest, UnsubscribeRequest
from wf_initiation.core.engine._offer import matches, select  # the correlation rules themselves
from wf_initiation.core.engine._types import Subscription
from wf_initiation.workflows.runapi import WaitForExample, WaitRequest

T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)

# Replies to a conversation: events of `reply` go to the run waiting on their thread; an event no
# run waits for starts no run either (`when` is false), so its identity is consumed as suppressed.
REPLIES = """
name: {name}
on:
  http.request: {{path: /hooks/replies}}
  as: reply
  when: "{{{{ reply.method == 'PUT' }}}}"
"""


def reply(delivery_id: str, thread: str, text: str = "hi", **body: Any) -> dict[str, Any]:
    return {"delivery_id": delivery_id, "method": "POST", "body": {"thread": thread, "text": text, **body}}


# ---------------------------------------------------------------------- pure rules
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


# ---------------------------------------------------------------------- real Temporal
async def activate_replies(wfi: WfiClient, tmp_path: pathlib.Path, task_queue: str) -> str:
    name = unique("replies")
    await wfi.activate(make_spec(tmp_path, REPLIES.format(name=name), task_queue=task_queue))
    return name


async def start_waiter(client: Client, task_queue: str, name: str, thread: str, **kwargs: Any) -> WorkflowHandle:
    request = WaitRequest(workflow=name, trigger="reply", match={"body.thread": thread}, **kwargs)
    return await client.start_workflow(WaitForExample.run, request, id=f"waiter-{thread}-{uuid.uuid4().hex[:6]}",
                                       task_queue=task_queue)


async def subscribed(wfi: WfiClient, name: str, handles: list[WorkflowHandle]) -> None:
    """Wait until the activation holds a subscription of every one of these runs."""

    async def check() -> None:
        runs = {s["run_workflow_id"] for s in (await wfi.state(name))["subscriptions"].values()}
        assert {h.id for h in handles} <= runs, f"not subscribed yet: {runs}"

    await assert_eventually(check)


async def test_a_waiting_run_receives_a_matching_event_accepted_while_it_waits(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: INIT-8, INIT-10
    name = await activate_replies(wfi, tmp_path, task_queue)
    waiter = await start_waiter(dev_env.client, task_queue, name, "t1")
    await subscribed(wfi, name, [waiter])
    result = await wfi.deliver(name, reply("r1", "t1", "the answer"), entry="reply")
    assert result.disposition == Disposition.DELIVERED and result.run_key is None, "a delivered event starts no run"
    outcome = await waiter.result()
    assert outcome["received"] == [reply("r1", "t1", "the answer")] and outcome["timed_out"] is None
    record = await wfi.delivery(name, "reply", "r1")
    assert record is not None and record["disposition"] == "delivered" and waiter.id in record["detail"]
    state = await wfi.state(name)
    assert state["subscriptions"] == {} and state["unacked"] == {} and state["runs"] == {}


async def test_an_event_accepted_before_the_subscription_is_never_delivered_to_it(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: INIT-8, INIT-9
    name = await activate_replies(wfi, tmp_path, task_queue)
    early = await wfi.deliver(name, reply("r-early", "t1", "too early"), entry="reply")
    assert early.disposition == Disposition.SUPPRESSED
    waiter = await start_waiter(dev_env.client, task_queue, name, "t1")
    await subscribed(wfi, name, [waiter])
    again = await wfi.deliver(name, reply("r-early", "t1", "too early"), entry="reply", update_id="resend-early")
    assert again.disposition == Disposition.DUPLICATE and again.retained == Disposition.SUPPRESSED, (
        "the unmatched disposition consumed the delivery id")
    assert (await wfi.deliver(name, reply("r-late", "t1", "in time"), entry="reply")).disposition == Disposition.DELIVERED
    assert (await waiter.result())["received"] == [reply("r-late", "t1", "in time")]


async def test_two_waiting_runs_with_different_correlations_each_get_only_theirs(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: INIT-8, INIT-10
    name = await activate_replies(wfi, tmp_path, task_queue)
    a = await start_waiter(dev_env.client, task_queue, name, "ta")
    b = await start_waiter(dev_env.client, task_queue, name, "tb")
    await subscribed(wfi, name, [a, b])
    results = [await wfi.deliver(name, reply(i, t), entry="reply") for i, t in (("1", "tb"), ("2", "tc"), ("3", "ta"))]
    assert [r.disposition for r in results] == [Disposition.DELIVERED, Disposition.SUPPRESSED, Disposition.DELIVERED]
    assert (await a.result())["received"] == [reply("3", "ta")]
    assert (await b.result())["received"] == [reply("1", "tb")]


async def test_of_two_runs_waiting_on_one_correlation_the_earlier_gets_the_first_event(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: INIT-10
    name = await activate_replies(wfi, tmp_path, task_queue)
    first = await start_waiter(dev_env.client, task_queue, name, "t1")
    await subscribed(wfi, name, [first])
    second = await start_waiter(dev_env.client, task_queue, name, "t1")
    await subscribed(wfi, name, [first, second])
    for i in ("1", "2"):
        assert (await wfi.deliver(name, reply(i, "t1"), entry="reply")).disposition == Disposition.DELIVERED
    assert (await first.result())["received"] == [reply("1", "t1")]
    assert (await second.result())["received"] == [reply("2", "t1")]


async def test_a_wait_times_out_and_its_subscription_ends(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    name = await activate_replies(wfi, tmp_path, task_queue)
    waiter = await start_waiter(dev_env.client, task_queue, name, "t1", timeout_seconds=1.0)
    outcome = await waiter.result()
    assert outcome["received"] == [] and "matched within" in outcome["timed_out"]
    assert (await wfi.deliver(name, reply("late", "t1"), entry="reply")).disposition == Disposition.SUPPRESSED
    assert (await wfi.state(name))["subscriptions"] == {}


async def test_a_wait_for_an_unknown_trigger_fails_the_run_with_the_entries_to_choose_from(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    name = await activate_replies(wfi, tmp_path, task_queue)
    handle = await dev_env.client.start_workflow(
        WaitForExample.run, WaitRequest(workflow=name, trigger="replyy"), id=unique("waiter"), task_queue=task_queue)
    with pytest.raises(Exception) as failure:
        await handle.result()
    cause = failure.value.cause  # type: ignore[attr-defined]
    assert cause.type == SUBSCRIPTION_REFUSED and "'replyy'" in cause.message and "reply" in cause.message


async def test_waiting_runs_get_their_events_across_a_worker_sigkill_after_acceptance(
    dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: INIT-7, INIT-8, INIT-10
    address = dev_env.client.service_client.config.target_host
    wfi = WfiClient(dev_env.client, task_queue=task_queue)
    async with WorkerProcess(address, task_queue) as worker:
        name = await activate_replies(wfi, tmp_path, task_queue)
        waiters = [await start_waiter(dev_env.client, task_queue, name, t, waits=2) for t in ("ta", "tb")]
        await subscribed(wfi, name, waiters)
        first = [await wfi.deliver(name, reply(f"{t}-1", t), entry="reply") for t in ("tb", "ta")]
        worker.kill()  # accepted and recorded as delivered; the runs have not necessarily seen them
        assert [r.disposition for r in first] == [Disposition.DELIVERED] * 2
        worker.start()
        await subscribed(wfi, name, waiters)  # each run took its first event and waits again
        second = [await wfi.deliver(name, reply(f"{t}-2", t), entry="reply") for t in ("ta", "tb")]
        worker.kill()
        assert [r.disposition for r in second] == [Disposition.DELIVERED] * 2
        worker.start()
        for handle, t in zip(waiters, ("ta", "tb")):
            assert (await handle.result())["received"] == [reply(f"{t}-1", t), reply(f"{t}-2", t)]
        assert (await wfi.state(name))["unacked"] == {}
