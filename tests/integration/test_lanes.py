"""A sharded activation whose entry orders events by ``queue_by`` key (issue 21 item 2), on a real server.

Each delivery id is judged by its id's shard; each event is queued and run by its key's shard (its
lane, core.sharding). Through every path (one update each, ``deliver_many``, signals, grouped
deliveries) the runs of one key start in the order its shard took the events (for updates, the order
they were delivered in) and never overlap, a
redelivery that changes the key is a conflict, and no id runs twice.
"""

from __future__ import annotations

import asyncio
import pathlib
from collections import Counter
from datetime import datetime

from temporalio.worker import Worker

from tests.support.activation import KEYED_HOOKS, make_spec, unique
from tests.support.hostile import hook, run_started, still_serves
from tests.support.replay import assert_replays
from tests.support.runs import describe_or_none
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import DeliveryResult
from wf_initiation.core.sharding import lane_of, shard_of
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import ECHO_RUN_RELEASE_SIGNAL, ECHO_RUN_WORKFLOW, AdmitPending, DropPending, shard_workflow_id

SHARDS = 4
WORKFILE = KEYED_HOOKS
EVENTS = 5  # per key


def spec_for(tmp_path: pathlib.Path, name: str, task_queue: str, shards: int = SHARDS):  # noqa: ANN201
    return make_spec(tmp_path, WORKFILE.format(name=name), task_queue=task_queue, lifecycle_events=False,
                     scale={"shards": shards})


async def runs_of(client, name: str) -> dict[str, list[tuple[datetime, datetime | None]]]:  # noqa: ANN001
    """(start, close) of every run of workflow ``name``, by delivery id (the run key ends with it)."""
    found: dict[str, list[tuple[datetime, datetime | None]]] = {}
    async for wf in client.list_workflows(f"WorkflowType = '{ECHO_RUN_WORKFLOW}'"):
        if wf.id.startswith(f"{name}@"):
            found.setdefault(wf.id.rsplit("/", 1)[-1], []).append((wf.start_time, wf.close_time))
    return found


def keys_on_every_lane() -> list[str]:
    """One queue key per shard, so every shard is some key's lane."""
    chosen: dict[int, str] = {}
    for n in range(100):
        chosen.setdefault(lane_of(f'"k-{n}"', SHARDS), f"k-{n}")
    return [chosen[k] for k in range(SHARDS)]


async def test_each_key_runs_in_delivery_order_on_its_shard_through_every_path(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-11, EXT-3, EXT-4, EXT-8
    client = dev_env.client
    name = unique("lanes")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        assert (await wfi.activate(spec_for(tmp_path, name, task_queue))).outcome == "activated"
        grouped = WfiClient(client, task_queue=task_queue, group_deliveries=True)
        by_update, by_bulk, by_signal, by_group = keys_on_every_lane()
        ids = {k: [f"{k}-e{n}" for n in range(EVENTS)] for k in (by_update, by_bulk, by_signal, by_group)}
        homes = {shard_of("hook", i, SHARDS) for k, some in ids.items() for i in some if shard_of("hook", i, SHARDS)
                 != lane_of(f'"{k}"', SHARDS)}
        assert homes, "some ids are judged on another shard than their key's"

        def event(key: str, ident: str) -> dict:
            return hook(ident, k=key, sleep_seconds=0.4)

        async def one_by_one() -> list:
            return [await wfi.deliver(name, event(by_update, i)) for i in ids[by_update]]

        async def in_bulk() -> list:
            return await wfi.deliver_many(name, [(None, event(by_bulk, i)) for i in ids[by_bulk]])

        async def signalled() -> None:
            for i in ids[by_signal]:
                await wfi.signal_delivery(name, event(by_signal, i))

        async def grouped_one_by_one() -> list:
            return [await grouped.deliver(name, event(by_group, i)) for i in ids[by_group]]

        updates, bulk, _, group = await asyncio.gather(one_by_one(), in_bulk(), signalled(), grouped_one_by_one())
        for answers in (updates, bulk, group):
            assert [r.disposition.value for r in answers][:1] == ["accepted"], answers
            assert {r.disposition.value for r in answers[1:]} <= {"queued", "accepted"}, answers

        async def signals_taken() -> None:
            records = [await wfi.delivery(name, "hook", i) for i in ids[by_signal]]
            assert all(r is not None and r["disposition"] in ("accepted", "queued") for r in records), records
            # Signals reach the key's shard through their ids' shards: the key's order is the order the key's
            # shard took them (its records' seq), which may differ from the order they were sent.
            ids[by_signal] = [i for _, i in sorted(zip((r["seq"] for r in records), ids[by_signal]))]

        await assert_eventually(signals_taken, timeout=30)

        # A redelivery that moves an id to another key (another lane) is a conflict; the same one a duplicate.
        first = updates[0]
        moved = next(k for k in (f"m-{n}" for n in range(100))
                     if lane_of(f'"{k}"', SHARDS) != lane_of(f'"{by_update}"', SHARDS))
        conflict = await wfi.deliver(name, event(moved, ids[by_update][0]))
        assert conflict.disposition.value == "conflict", conflict
        again = await WfiClient(client, task_queue=task_queue).deliver(name, event(by_update, ids[by_update][0]),
                                                                       update_id="again")
        assert (again.disposition.value, again.run_key) == ("duplicate", first.run_key), again

        async def every_key_ran_in_order() -> None:
            runs = await runs_of(client, name)
            for key, some in ids.items():
                assert all(len(runs.get(i, [])) == 1 for i in some), (key, {i: runs.get(i) for i in some})
                spans = [runs[i][0] for i in some]
                assert all(close is not None for _, close in spans), (key, "not all ran yet")
                starts = [start for start, _ in spans]
                assert starts == sorted(starts), f"key {key}: runs started out of delivery order: {spans}"
                for (_, close), (start, _) in zip(spans, spans[1:]):
                    assert close is not None and start >= close, f"key {key}: runs overlapped: {spans}"
            assert moved not in {i.split("-e")[0] for i in runs}

        await assert_eventually(every_key_ran_in_order, timeout=90)
        summary = await wfi.summary(name)
        routed = sum(s["counters"].get("routed", 0) for s in summary["shards"])
        assert routed >= 1, summary["shards"]
        await still_serves(wfi, client, name, k="after")
    counted: Counter[str] = Counter()
    for i, spans in (await runs_of(client, name)).items():
        counted[i] += len(spans)
    assert not {i: n for i, n in counted.items() if n > 1}, "no id ran twice"
    for shard in range(SHARDS):
        await assert_replays(client, shard_workflow_id(name, shard))


BATCHED = """
name: {name}
on:
  http.request: {{}}
  as: hook
  batch: {{size: 3, partition_by: "{{{{ hook.body.p }}}}"}}
"""
LIMITED = """
name: {name}
on:
  http.request: {{}}
  as: hook
"""


async def test_batches_an_activation_wide_limit_and_operator_actions_hold_across_shards(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-6, BATCH-4, BATCH-5
    client = dev_env.client
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)

        # Each partition's events, whatever shard their ids are on, fill one batch: one run per batch.
        batched = unique("batched")
        await wfi.activate(make_spec(tmp_path, BATCHED.format(name=batched), task_queue=task_queue,
                                     lifecycle_events=False, scale={"shards": SHARDS}))
        ids = [f"b-{n}" for n in range(6)]
        answers = await wfi.deliver_many(batched, [(None, hook(i, p="north" if n % 2 else "south")) for n, i in enumerate(ids)])
        assert {a.disposition.value for a in answers} == {"batched"}, answers
        runs = {p: {a.run_key for n, a in enumerate(answers) if (n % 2 == 1) == (p == "north")} for p in ("north", "south")}
        assert all(len(keys) == 1 for keys in runs.values()), runs

        async def batches_ran() -> None:
            for keys in runs.values():
                [key] = keys
                assert await describe_or_none(client, key) is not None, f"batch run {key} not started yet"
                result = await client.get_workflow_handle(key).result()
                assert len(result["input"]["initiation"]["delivery_ids"]) == 3, result["input"]["initiation"]

        await assert_eventually(batches_ran, timeout=60)

        # max_concurrent_runs spans every run: shard 0 admits them all; a pending one is admitted by the operator.
        limited = unique("limited")
        await wfi.activate(make_spec(tmp_path, LIMITED.format(name=limited), task_queue=task_queue,
                                     lifecycle_events=False, scale={"shards": SHARDS}, max_concurrent_runs=1))
        held = [await wfi.deliver(limited, hook(f"h-{n}", hold=True)) for n in range(3)]
        assert [h.disposition.value for h in held] == ["accepted", "queued", "queued"], held
        admitted = await wfi.operate(limited, AdmitPending(run_key=held[2].run_key))
        assert admitted.ok, admitted
        await run_started(client, held[2].run_key)
        assert await describe_or_none(client, held[1].run_key) is None, "the other pending run still waits"
        for h in (held[0], held[2]):
            await client.get_workflow_handle(h.run_key).signal(ECHO_RUN_RELEASE_SIGNAL)
        await run_started(client, held[1].run_key)
        await client.get_workflow_handle(held[1].run_key).signal(ECHO_RUN_RELEASE_SIGNAL)
        for h in held:
            await client.get_workflow_handle(h.run_key).result()

        # A queue key's pending run is on the key's shard: the operator's action reaches it there.
        keyed = unique("keyed")
        await wfi.activate(spec_for(tmp_path, keyed, task_queue))
        key = next(k for k in (f"k-{n}" for n in range(100)) if lane_of(f'"{k}"', SHARDS) != 0)
        first = await wfi.deliver(keyed, hook("q-0", k=key, hold=True))
        waiting = await wfi.deliver(keyed, hook("q-1", k=key))
        assert (first.disposition.value, waiting.disposition.value) == ("accepted", "queued")
        dropped = await wfi.operate(keyed, DropPending(run_key=waiting.run_key))
        assert dropped.ok, dropped
        record = await wfi.delivery(keyed, "hook", "q-1")
        assert record is not None and record["disposition"] == "dropped", record
        await still_serves(wfi, client, limited, "after-limit")
    for name in (batched, limited, keyed):
        for shard in range(SHARDS):
            await assert_replays(client, shard_workflow_id(name, shard))


async def test_a_split_moves_queue_keys_only_after_their_earlier_events_ran(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-11, INIT-4 (each key's order across a split that moves it to another shard)
    client = dev_env.client
    name = unique("lanes-split")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(spec_for(tmp_path, name, task_queue, 2))
        candidates = [f"k-{n}" for n in range(100)]
        moving = [k for k in candidates if lane_of(f'"{k}"', 4) >= 2][:3]
        staying = [k for k in candidates if lane_of(f'"{k}"', 4) < 2][:1]
        keys = moving + staying
        sent: dict[str, list] = {k: [] for k in keys}
        for key in keys:  # the first run of each key is held: the next ones wait behind it on its shard
            sent[key].append(await wfi.deliver(name, hook(f"{key}-e0", k=key, hold=True)))
            for n in (1, 2):
                sent[key].append(await wfi.deliver(name, hook(f"{key}-e{n}", k=key, sleep_seconds=0.2)))
        assert all([r.disposition.value for r in rs] == ["accepted", "queued", "queued"] for rs in sent.values()), sent

        split = await wfi.activate(spec_for(tmp_path, name, task_queue, 4))
        assert "split from 2 into 4 shards" in (split.note or ""), split
        for key in keys:  # after the split: a moved key's events are taken by its new shard, behind the old ones
            for n in (3, 4):
                sent[key].append(await WfiClient(client, task_queue=task_queue).deliver(
                    name, hook(f"{key}-e{n}", k=key, sleep_seconds=0.2)))
        assert all(r.disposition.value == "queued" for rs in sent.values() for r in rs[3:]), sent

        async def move_shown() -> None:  # what `wfi state --summary` shows of the move
            parts = (await wfi.summary(name))["shards"]
            assert sum(p.get("lanes", {}).get("handed_over", 0) for p in parts[:2]) == len(moving), parts
            # A parent tells a child of a lane it hands over by signal: the child shows it held once that landed.
            assert sum(p.get("lanes", {}).get("held", 0) for p in parts[2:]) == len(moving), parts

        await assert_eventually(move_shown, timeout=30)
        for key in keys:
            handle = client.get_workflow_handle(sent[key][0].run_key)
            await assert_eventually(lambda h=handle: h.signal(ECHO_RUN_RELEASE_SIGNAL), timeout=30)

        async def every_key_ran_in_order() -> None:
            runs = await runs_of(client, name)
            for key, results in sent.items():
                spans = [runs.get(r.delivery_id, [None])[0] for r in results]
                assert all(span is not None and span[1] is not None for span in spans), (key, "not all ended yet")
                for n, ((_, closed), (started, _)) in enumerate(zip(spans, spans[1:])):
                    assert started >= closed, f"key {key}: e{n + 1} started before e{n} ended: {spans}"

        await assert_eventually(every_key_ran_in_order, timeout=90)
        summary = await wfi.summary(name)
        assert [s["shard"] for s in summary["shards"]] == [0, 1, 2, 3]
        await still_serves(wfi, client, name, k=moving[0])
    for shard in range(4):
        await assert_replays(client, shard_workflow_id(name, shard))


async def test_forged_routings_copies_and_notices_change_nothing_they_should_not(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # A raw Temporal client can send what only shards send each other: each is judged, none wedges.
    from tests.support.hostile import errors_of
    from wf_initiation.core.engine import SubscribeRequest
    from wf_initiation.wire import DELIVER_SIGNAL, DELIVER_UPDATE, LANES_SIGNAL, SUBSCRIBE_SIGNAL, DeliveryRequest, LaneClaim

    client = dev_env.client
    name = unique("lanes-forged")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(spec_for(tmp_path, name, task_queue))
        zero = client.get_workflow_handle(shard_workflow_id(name, 0))
        # A routing that names a shard the activation does not have: the delivery is judged as if it had none.
        far = hook("far-1", k="k-far")
        await zero.signal(DELIVER_SIGNAL, DeliveryRequest(payload=far, lane=LaneClaim(shards=SHARDS, shard=999)))

        async def far_taken() -> None:
            record = await wfi.delivery(name, "hook", "far-1")
            assert record is not None and record["disposition"] in ("accepted", "queued"), record

        await assert_eventually(far_taken, timeout=30)
        # A routing that names the wrong lane: that shard routes it on (a raw caller is told where).
        key = next(k for k in (f"w-{n}" for n in range(100)) if lane_of(f'"{k}"', SHARDS) != 2)
        wrong = await client.get_workflow_handle(shard_workflow_id(name, 2)).execute_update(
            DELIVER_UPDATE, DeliveryRequest(payload=hook("wrong-1", k=key), lane=LaneClaim(shards=SHARDS, shard=2)),
            result_type=DeliveryResult)
        assert (wrong.disposition.value, wrong.shard) == ("routed", lane_of(f'"{key}"', SHARDS)), wrong
        # A subscription copy sent to shard 0 (which keeps the originals) and a junk notice are recorded, not kept.
        await zero.signal(SUBSCRIBE_SIGNAL, SubscribeRequest(sub_id="forged", entry="hook", run_workflow_id="nobody",
                                                             replica=True))
        await zero.signal(LANES_SIGNAL, "junk")

        async def recorded() -> None:
            assert await errors_of(wfi, name, "subscription_refused"), "the copy is refused"
            assert await errors_of(wfi, name, "signal_refused"), "the junk notice is refused"

        await assert_eventually(recorded, timeout=30)
        assert (await wfi.state(name))["subscriptions"] == {}
        await still_serves(wfi, client, name, k="after-forged")


async def test_a_split_moves_batch_partitions_only_after_their_open_batches_closed(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: BATCH-3, BATCH-4 (a partition's batches start in order across a split that moves it)
    from wf_initiation.core.sharding import batch_lane_text

    workfile = """
name: {name}
on:
  http.request: {{}}
  as: hook
  batch: {{size: 2, max_wait: 4s, partition_by: "{{{{ hook.body.p }}}}"}}
"""
    client = dev_env.client
    name = unique("batch-split")

    def spec(shards: int):  # noqa: ANN202
        return make_spec(tmp_path, workfile.format(name=name), task_queue=task_queue, lifecycle_events=False,
                         scale={"shards": shards})

    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(spec(2))
        parts = [p for p in (f"p-{n}" for n in range(200)) if lane_of(batch_lane_text("hook", f'"{p}"'), 4) >= 2][:2]
        opened = {p: await wfi.deliver(name, hook(f"{p}-a", p=p)) for p in parts}  # open on the parent, 4 s to close
        assert {r.disposition.value for r in opened.values()} == {"batched"}
        split = await wfi.activate(spec(4))
        assert "split from 2 into 4 shards" in (split.note or ""), split
        later = {p: [await wfi.deliver(name, hook(f"{p}-b{n}", p=p)) for n in range(2)] for p in parts}
        assert all(r.disposition.value == "batched" for rs in later.values() for r in rs)

        async def ran_in_order() -> None:
            for p in parts:
                first = await describe_or_none(client, opened[p].run_key)
                second = await describe_or_none(client, later[p][0].run_key)
                assert first is not None and second is not None, (p, "not started yet")
                assert later[p][0].run_key != opened[p].run_key, "a new batch on the new shard"
                assert second.start_time >= first.start_time, f"partition {p}: the later batch started first"

        await assert_eventually(ran_in_order, timeout=60)
        # And the activation still takes new events: a full batch of a new partition starts its run.
        after = [await wfi.deliver(name, hook(f"after-{n}", p="other")) for n in range(2)]
        assert [r.disposition.value for r in after] == ["batched", "batched"] and after[0].run_key == after[1].run_key
        await run_started(client, after[0].run_key)
