"""Event delivery to waiting runs (INIT-8, INIT-9, INIT-10) with real Temporal (the pure rules, in the
engine: tests/core/test_subscriptions_engine.py)."""

from __future__ import annotations

import pathlib
import uuid
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from tests.support.activation import make_spec, unique
from tests.support.replies import REPLIES, reply
from tests.support.waits import assert_eventually
from tests.support.worker_proc import WorkerProcess
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import Disposition
from wf_initiation.wire import SUBSCRIPTION_REFUSED
from wf_initiation.workflows.runapi import WaitForExample, WaitRequest


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


async def test_runs_waiting_on_a_sharded_entry_get_events_whatever_shard_their_ids_are_on(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: INIT-8, INIT-10 (a sharded activation: shard 0 selects among its subscriptions, every shard offers)
    from tests.support.replay import assert_replays
    from wf_initiation.core.sharding import shard_of
    from wf_initiation.wire import STATE_QUERY, shard_workflow_id

    shards = 4
    name = unique("replies-sharded")
    await wfi.activate(make_spec(tmp_path, REPLIES.format(name=name), task_queue=task_queue, scale={"shards": shards}))
    first = await start_waiter(dev_env.client, task_queue, name, "t1")
    await subscribed(wfi, name, [first])
    second = await start_waiter(dev_env.client, task_queue, name, "t1")
    await subscribed(wfi, name, [first, second])

    async def copied() -> None:
        parts = (await wfi.summary(name))["shards"]
        assert all(p["counters"].get("subscription_copies", 0) >= 2 for p in parts[1:]), parts

    await assert_eventually(copied)
    away = [i for i in (f"r-{n}" for n in range(100)) if shard_of("reply", i, shards) != 0][:3]
    results = [await wfi.deliver(name, reply(i, "t1"), entry="reply") for i in away]
    assert [r.disposition for r in results] == [Disposition.DELIVERED, Disposition.DELIVERED, Disposition.SUPPRESSED]
    assert (await first.result())["received"] == [reply(away[0], "t1")], "the earlier subscription gets the first event"
    assert (await second.result())["received"] == [reply(away[1], "t1")]
    record = await wfi.delivery(name, "reply", away[0])
    assert record is not None and record["disposition"] == "delivered" and first.id in record["detail"], record

    async def copies_dropped() -> None:
        for k in range(shards):
            state = await wfi._query(name, STATE_QUERY, shard=k)
            assert state["subscriptions"] == {}, (k, state["subscriptions"])

    await assert_eventually(copies_dropped)
    for k in range(shards):
        await assert_replays(dev_env.client, shard_workflow_id(name, k))
