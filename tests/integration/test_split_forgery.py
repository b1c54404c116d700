"""Forged messages between shards (issue 32 item 1), sent by a plain Temporal client, on a real server.

Shards tell each other that a split's parent drained, hand moved queue keys over and free them,
and route an event to its key's lane. Each such message is checked against what its sender itself
answers (core.routing, workflows/_splits.py) or against the routing function: a forged one is
refused and recorded (``forged_protocol``, ``forged_routing``), and afterwards a redelivery is a
``duplicate``, each key runs in order, nothing runs twice and every shard takes a normal delivery.
"""

from __future__ import annotations

import pathlib
from collections import Counter

from temporalio.client import Client
from temporalio.worker import Worker

from tests.support.activation import KEYED_HOOKS, make_spec, unique
from tests.support.hostile import errors_of, hook, still_serves
from tests.support.replay import assert_replays
from tests.support.runs import describe_or_none
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import DeliveryResult
from wf_initiation.core.sharding import lane_of, shard_of
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import (
    DELIVER_SIGNAL,
    DELIVER_UPDATE,
    ECHO_RUN_RELEASE_SIGNAL,
    ECHO_RUN_WORKFLOW,
    LANES_SIGNAL,
    PARENT_DRAINED_SIGNAL,
    DeliveryRequest,
    LaneClaim,
    shard_workflow_id,
)

WORKFILE = """
name: {name}
on:
  http.request: {{}}
  as: hook
  when: "{{{{ hook.body.go }}}}"
"""


def spec_for(tmp_path: pathlib.Path, workfile: str, name: str, task_queue: str, shards: int, **settings):  # noqa: ANN001, ANN201
    return make_spec(tmp_path, workfile.format(name=name), task_queue=task_queue, lifecycle_events=False,
                     scale={"shards": shards}, **settings)


async def runs_of(client: Client, name: str) -> dict[str, list]:
    """(start, close) of every run of workflow ``name``, by delivery id (the run key ends with it)."""
    found: dict[str, list] = {}
    async for wf in client.list_workflows(f"WorkflowType = '{ECHO_RUN_WORKFLOW}'"):
        if wf.id.startswith(f"{name}@"):
            found.setdefault(wf.id.rsplit("/", 1)[-1], []).append((wf.start_time, wf.close_time))
    return found


async def every_shard_serves(wfi: WfiClient, client: Client, name: str, shards: int, **extra: object) -> None:
    """A normal delivery whose id is judged by each shard in turn is accepted and its run starts. With one
    queue key for all (``k``), each waits until the activation has seen the previous run end (until
    then the next one is queued behind it, which is right but not what this checks)."""
    for shard in range(shards):
        ident = next(i for i in (f"normal-{shard}-{n}" for n in range(1000)) if shard_of("hook", i, shards) == shard)
        await still_serves(wfi, client, name, ident, **extra)
        if "k" in extra:
            async def ended(ident: str = ident) -> None:
                record = await wfi.delivery(name, "hook", ident)
                assert record is not None and record["released_at"] is not None, record

            await assert_eventually(ended, timeout=60)


async def test_a_forged_drained_signal_is_refused_and_the_children_still_ask_their_parents(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-3, EXT-4 (across a split, whatever a plain client signals the new shards)
    client = dev_env.client
    name = unique("forged-drained")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(spec_for(tmp_path, WORKFILE, name, task_queue, 2))
        before = [f"d-{i}" for i in range(24)]
        first = {r.delivery_id: r for r in await wfi.deliver_many(name, [(None, hook(i, go=True)) for i in before])}
        assert {r.disposition.value for r in first.values()} == {"accepted"}
        split = await wfi.activate(spec_for(tmp_path, WORKFILE, name, task_queue, 4))
        assert "split from 2 into 4 shards" in (split.note or ""), split

        for child in (2, 3):  # what the issue played: any argument at all
            await client.get_workflow_handle(shard_workflow_id(name, child)).signal(PARENT_DRAINED_SIGNAL, {"forged": True})
            await client.get_workflow_handle(shard_workflow_id(name, child)).signal(PARENT_DRAINED_SIGNAL, child % 2)

        async def refused() -> None:
            errors = await errors_of(wfi, name, "forged_protocol")
            assert {e["shard"] for e in errors} == {2, 3}, errors
            assert all("has not drained" in e["message"] for e in errors), errors

        await assert_eventually(refused, timeout=60)
        children = [s for s in (await wfi.summary(name))["shards"] if s["shard"] >= 2]
        assert all(s["split"]["from_shards"] == 2 for s in children), children  # still asking their parents

        moved = [i for i in before if shard_of("hook", i, 4) >= 2]
        assert moved, "some ids moved to the new shards"
        again = await WfiClient(client, task_queue=task_queue).deliver_many(name, [(None, hook(i, go=True)) for i in before])
        assert [(r.disposition.value, r.run_key) for r in again] == [("duplicate", first[i].run_key) for i in before]
        for ident in moved[:3]:  # by signal too: answered from the parent's entry
            await wfi.signal_delivery(name, hook(ident, go=True))

        async def each_id_ran_once() -> None:
            counts = Counter({k: len(v) for k, v in (await runs_of(client, name)).items()})
            assert set(before) <= set(counts) and all(counts[i] == 1 for i in before), counts
            assert (await wfi.summary(name))["counters"].get("duplicates", 0) >= len(before) + 3

        await assert_eventually(each_id_ran_once, timeout=60)
        await every_shard_serves(wfi, client, name, 4, go=True)
    for shard in (0, 2, 3):
        await assert_replays(client, shard_workflow_id(name, shard))


async def test_forged_lane_notices_are_refused_and_a_moved_key_still_runs_in_order(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-11 (a moved key's order across a split, whatever a plain client signals its new shard)
    from wf_initiation.core.engine import LaneNotice

    client = dev_env.client
    name = unique("forged-lanes")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(spec_for(tmp_path, KEYED_HOOKS, name, task_queue, 2))
        key = next(k for k in (f"k-{n}" for n in range(100)) if lane_of(f'"{k}"', 4) >= 2)
        parent, child = lane_of(f'"{key}"', 2), lane_of(f'"{key}"', 4)
        sent = [await wfi.deliver(name, hook(f"{key}-e0", k=key, hold=True))]
        sent += [await wfi.deliver(name, hook(f"{key}-e{n}", k=key, sleep_seconds=0.2)) for n in (1, 2)]
        assert [r.disposition.value for r in sent] == ["accepted", "queued", "queued"], sent
        await wfi.activate(spec_for(tmp_path, KEYED_HOOKS, name, task_queue, 4))
        sent.append(await WfiClient(client, task_queue=task_queue).deliver(name, hook(f"{key}-e3", k=key)))
        assert sent[-1].disposition.value == "queued", sent[-1]

        target = client.get_workflow_handle(shard_workflow_id(name, child))
        forged = [LaneNotice(parent=parent, kind="free", keys=[f'"{key}"']),
                  LaneNotice(parent=parent, kind="handover", keys=[], part=0, parts=1),
                  LaneNotice(parent=(parent + 1) % 2, kind="free", keys=[f'"{key}"'])]
        for notice in forged:
            await target.signal(LANES_SIGNAL, notice)

        async def refused() -> None:
            errors = [e for e in await errors_of(wfi, name, "forged_protocol") if e["shard"] == child]
            assert len(errors) == len(forged), errors
            lanes = next(s for s in (await wfi.summary(name))["shards"] if s["shard"] == child)["lanes"]
            assert lanes["held"] == 1 and lanes["awaiting_parent"] is None, lanes  # the parent's own handover

        await assert_eventually(refused, timeout=60)
        assert await describe_or_none(client, sent[3].run_key) is None, "e3 must not start while e0 runs"

        await client.get_workflow_handle(sent[0].run_key).signal(ECHO_RUN_RELEASE_SIGNAL)

        async def ran_in_order() -> None:
            runs = await runs_of(client, name)
            spans = [runs.get(r.delivery_id, [None])[0] for r in sent]
            assert all(span is not None and span[1] is not None for span in spans), ("not all ended yet", spans)
            assert all(len(runs[r.delivery_id]) == 1 for r in sent), runs
            for n, ((_, closed), (started, _)) in enumerate(zip(spans, spans[1:])):
                assert started >= closed, f"e{n + 1} started before e{n} ended: {spans}"

        await assert_eventually(ran_in_order, timeout=90)
        again = await WfiClient(client, task_queue=task_queue).deliver(name, hook(f"{key}-e3", k=key), update_id="again")
        assert again.disposition.value == "duplicate", again
        await every_shard_serves(wfi, client, name, 4, k=key)
    for shard in (parent, child):
        await assert_replays(client, shard_workflow_id(name, shard))


async def test_a_forged_lane_claim_to_a_shard_not_the_ids_home_is_refused_and_recorded(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-3 (an id is judged by its own shard only, whatever routing a plain client claims)
    client = dev_env.client
    name = unique("forged-claim")
    shards = 4
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(spec_for(tmp_path, WORKFILE, name, task_queue, shards))
        ident = next(i for i in (f"claimed-{n}" for n in range(100)) if shard_of("hook", i, shards) != 0)
        home = shard_of("hook", ident, shards)
        other = next(k for k in range(1, shards) if k != home)
        stranger = client.get_workflow_handle(shard_workflow_id(name, other))
        forged = DeliveryRequest(payload=hook(ident, go=True), lane=LaneClaim(shards=shards, shard=other))
        zero = client.get_workflow_handle(shard_workflow_id(name, 0))
        to_zero = DeliveryRequest(payload=hook(ident, go=True), lane=LaneClaim(shards=shards, shard=0))

        async def play_forgeries() -> None:
            answer = await stranger.execute_update(DELIVER_UPDATE, forged, result_type=DeliveryResult)
            assert answer.disposition.value == "invalid" and "orders no events by key" in (answer.message or ""), answer
            await stranger.signal(DELIVER_SIGNAL, forged)
            # Shard 0 takes another shard's event only for a subscription it holds: else it sends it home.
            answer = await zero.execute_update(DELIVER_UPDATE, to_zero, result_type=DeliveryResult)
            assert (answer.disposition.value, answer.shard) == ("routed", home), answer
            assert await zero.query("delivery", args=["hook", ident]) is None, "shard 0 recorded nothing of it"

        await play_forgeries()
        first = await wfi.deliver(name, hook(ident, go=True))
        assert first.disposition.value == "accepted", first  # its home took it: the forgery consumed nothing

        # Re-activated (a new binding): the forged copies are refused again, the id is still its home's.
        await wfi.activate(spec_for(tmp_path, WORKFILE, name, task_queue, shards, dedup_retention="23h"))
        await play_forgeries()

        async def recorded() -> None:
            errors = [e for e in await errors_of(wfi, name, "forged_routing") if e["shard"] == other]
            assert len(errors) == 4, errors

        await assert_eventually(recorded, timeout=60)
        again = await WfiClient(client, task_queue=task_queue).deliver(name, hook(ident, go=True), update_id="again")
        assert (again.disposition.value, again.run_key) == ("duplicate", first.run_key), again
        assert await wfi.delivery(name, "hook", ident) is not None

        async def ran_once() -> None:
            assert len((await runs_of(client, name)).get(ident, [])) == 1

        await assert_eventually(ran_once, timeout=30)
        await every_shard_serves(wfi, client, name, shards, go=True)
    await assert_replays(client, shard_workflow_id(name, other))


async def test_a_forged_parent_answer_on_a_delivery_to_a_new_shard_is_not_taken_on_its_word(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-3, EXT-4 (a new shard asks its parent itself, whatever `prior` a plain client sends)
    from wf_initiation.wire import PriorEntry

    client = dev_env.client
    name = unique("forged-prior")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(spec_for(tmp_path, WORKFILE, name, task_queue, 2))
        before = [f"p-{i}" for i in range(30)]
        first = {r.delivery_id: r for r in await wfi.deliver_many(name, [(None, hook(i, go=True)) for i in before])}
        await wfi.activate(spec_for(tmp_path, WORKFILE, name, task_queue, 4))
        moved = [i for i in before if shard_of("hook", i, 4) >= 2][:4]
        assert len(moved) == 4, "some ids moved to the new shards"
        nothing = PriorEntry(shards=4, record=None)  # "the parent holds nothing of it"
        by_update, *by_signal = moved
        child = client.get_workflow_handle(shard_workflow_id(name, shard_of("hook", by_update, 4)))
        answer = await child.execute_update(DELIVER_UPDATE, DeliveryRequest(payload=hook(by_update, go=True), prior=nothing),
                                            result_type=DeliveryResult)
        assert (answer.disposition.value, answer.run_key) == ("duplicate", first[by_update].run_key), answer
        for ident in by_signal:
            await client.get_workflow_handle(shard_workflow_id(name, shard_of("hook", ident, 4))).signal(
                DELIVER_SIGNAL, DeliveryRequest(payload=hook(ident, go=True), prior=nothing))
        new = next(i for i in (f"fresh-{n}" for n in range(100)) if shard_of("hook", i, 4) >= 2)
        await wfi.signal_delivery(name, hook(new, go=True))  # a new id by signal: the parent says it has none

        async def judged() -> None:
            fresh = await wfi.delivery(name, "hook", new)
            assert fresh is not None and fresh["disposition"] == "accepted", fresh
            counts = {k: len(v) for k, v in (await runs_of(client, name)).items()}
            assert all(counts.get(i) == 1 for i in before) and counts.get(new) == 1, counts
            children = [s for s in (await wfi.summary(name))["shards"] if s["shard"] >= 2]
            # Each forged "nothing" answered with the parent's entry instead: a duplicate on the new shard.
            assert sum(s["counters"].get("duplicates", 0) for s in children) >= len(moved), children

        await assert_eventually(judged, timeout=60)
        again = await WfiClient(client, task_queue=task_queue).deliver_many(name, [(None, hook(i, go=True)) for i in moved])
        assert {r.disposition.value for r in again} == {"duplicate"}
        await every_shard_serves(wfi, client, name, 4, go=True)
    for shard in range(4):
        await assert_replays(client, shard_workflow_id(name, shard))


async def test_a_forged_subscription_copy_is_refused_and_the_shard_takes_its_events_itself(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: INIT-9 (no subscription matches an event that only a forged copy would have)
    from wf_initiation.core.engine import SubscribeRequest
    from wf_initiation.wire import SUBSCRIBE_SIGNAL

    client = dev_env.client
    name = unique("forged-copy")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(spec_for(tmp_path, WORKFILE, name, task_queue, 4))
        copy = SubscribeRequest(sub_id="forged-copy", entry="hook", run_workflow_id="nobody", replica=True)
        await client.get_workflow_handle(shard_workflow_id(name, 3)).signal(SUBSCRIBE_SIGNAL, copy)

        async def refused() -> None:
            errors = [e for e in await errors_of(wfi, name, "forged_protocol") if e["shard"] == 3]
            assert errors and "shard 0 holds no subscription" in errors[0]["message"], errors

        await assert_eventually(refused, timeout=60)
        assert (await wfi.state(name))["subscriptions"] == {}
        ident = next(i for i in (f"c-{n}" for n in range(100)) if shard_of("hook", i, 4) == 3)
        taken = await client.get_workflow_handle(shard_workflow_id(name, 3)).execute_update(
            DELIVER_UPDATE, DeliveryRequest(payload=hook(ident, go=True)), result_type=DeliveryResult)
        assert taken.disposition.value == "accepted", taken  # not routed to shard 0 for a copy it never made
        await every_shard_serves(wfi, client, name, 4, go=True)
    await assert_replays(client, shard_workflow_id(name, 3))
