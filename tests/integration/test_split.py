"""Splitting a live activation into more shards (issue 21 item 4), on a real server.

While deliveries go on, ``wfi activate`` with a larger ``scale.shards`` starts the new shards, then
switches the old ones (core.sharding, "splitting"). A redelivery of an id taken before the split is
answered by the shard it now routes to with the old shard's entry (duplicate or conflict, never a
second run), whichever client sends it and however stale its routing; a parent drains once every id
it held at the split has expired, and its children then judge new ids alone.
"""

from __future__ import annotations

import asyncio
import pathlib
from collections import Counter

import pytest
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.hostile import hook, still_serves
from tests.support.replay import assert_replays
from tests.support.waits import assert_eventually, until_length
from wf_initiation.client import WfiClient
from wf_initiation.core.sharding import shard_of
from wf_initiation.errors import ActivationRefused
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import ECHO_RUN_WORKFLOW, DeactivateRequest, shard_workflow_id

WORKFILE = """
name: {name}
on:
  http.request: {{}}
  as: hook
  when: "{{{{ hook.body.go }}}}"
"""


def spec_for(tmp_path: pathlib.Path, name: str, task_queue: str, shards: int, **settings):  # noqa: ANN001, ANN201
    scale = {"scale": {"shards": shards}} if shards > 1 else {}
    return make_spec(tmp_path, WORKFILE.format(name=name), task_queue=task_queue, lifecycle_events=False, **scale, **settings)


async def runs_by_delivery(client, name: str) -> Counter[str]:  # noqa: ANN001
    """How many runs were started for each delivery id of workflow ``name`` (the run key ends with it)."""
    found: Counter[str] = Counter()
    async for wf in client.list_workflows(f"WorkflowType = '{ECHO_RUN_WORKFLOW}'"):
        if wf.id.startswith(f"{name}@"):
            found[wf.id.rsplit("/", 1)[-1]] += 1
    return found


async def test_a_live_activation_split_into_more_shards_keeps_dedup_and_runs_nothing_twice(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-3, EXT-4, EXT-8, INIT-4
    client = dev_env.client
    name = unique("split")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        assert (await wfi.activate(spec_for(tmp_path, name, task_queue, 2))).outcome == "activated"
        before = [f"d-{i}" for i in range(60)]
        first = {r.delivery_id: r for r in await asyncio.gather(*(wfi.deliver(name, hook(i, go=True)) for i in before))}
        assert {r.disposition.value for r in first.values()} == {"accepted"}
        stale = WfiClient(client, task_queue=task_queue)  # learns the routing of 2 shards now, keeps it
        assert await stale.shards(name) == 2
        grouped = WfiClient(client, task_queue=task_queue, group_deliveries=True)
        assert await grouped.shards(name) == 2

        # Deliveries go on during the split: new ids, and redeliveries of ids taken before it.
        during: list = []
        stop = asyncio.Event()

        async def traffic() -> None:
            n = 0
            while not stop.is_set():
                during.append(await stale.deliver(name, hook(f"n-{n}", go=True)))
                during.append(await grouped.deliver(name, hook(before[n % len(before)], go=True)))
                n += 1

        sender = asyncio.create_task(traffic())
        await until_length(during, 6)  # traffic flows when the split begins
        split = await wfi.activate(spec_for(tmp_path, name, task_queue, 8))
        assert split.outcome == "rebound" and "split from 2 into 8 shards" in (split.note or ""), split
        await until_length(during, len(during) + 20)  # traffic flows on the eight shards
        stop.set()
        await sender
        assert during and all(r.disposition.value in ("accepted", "duplicate") for r in during), during
        assert await wfi.shards(name) == 8

        # Every id taken before the split, through every path: answered with its first run.
        moved = [i for i in before if shard_of("hook", i, 8) >= 2]
        assert moved, "some ids moved to the new shards"
        again = await asyncio.gather(*(stale.deliver(name, hook(i, go=True), update_id=f"again-{i}") for i in before))
        assert [(r.disposition.value, r.run_key) for r in again] == [("duplicate", first[i].run_key) for i in before]
        bulk = await grouped.deliver_many(name, [(None, hook(i, go=True)) for i in before])
        assert {r.disposition.value for r in bulk} == {"duplicate"}
        assert [r.run_key for r in bulk] == [first[i].run_key for i in before]
        conflict = await wfi.deliver(name, hook(moved[0], go=True, changed=1))
        assert conflict.disposition.value == "conflict" and conflict.run_key == first[moved[0]].run_key

        # A signal sent to the old shard of a moved id is passed on with that shard's answer.
        await stale.signal_delivery(name, hook(moved[1], go=True))
        await stale.signal_delivery(name, hook("signalled-new", go=True))

        async def signalled() -> None:
            record = await wfi.delivery(name, "hook", "signalled-new")
            assert record is not None and record["disposition"] == "accepted"
            summary = await wfi.summary(name)
            assert summary["counters"].get("duplicates", 0) >= 2 * len(before) + 1

        await assert_eventually(signalled, timeout=30)

        summary = await wfi.summary(name)
        assert [s["shard"] for s in summary["shards"]] == list(range(8))
        children = [s for s in summary["shards"] if s["shard"] >= 2]
        assert all(s["split"]["from_shards"] == 2 for s in children), summary["shards"]
        # The moved ids were answered by their new shards, from their parents' entries.
        assert sum(s["counters"].get("duplicates", 0) for s in children) >= 2 * len(moved), summary["shards"]

        async def each_id_ran_once() -> None:
            runs = await runs_by_delivery(client, name)
            twice = {k: n for k, n in runs.items() if n > 1}
            assert not twice, f"ids run more than once: {twice}"
            assert set(before) <= set(runs) and "signalled-new" in runs

        await assert_eventually(each_id_ran_once, timeout=60)
        await still_serves(wfi, client, name, go=True)

        # Merging into fewer shards, and a second split while the first drains, are refused by name.
        with pytest.raises(ActivationRefused, match="never merged into fewer"):
            await wfi.activate(spec_for(tmp_path, name, task_queue, 4))
        with pytest.raises(ActivationRefused, match="previous split"):
            await wfi.activate(spec_for(tmp_path, name, task_queue, 16))
    for shard in (0, 1, 2, 7):
        await assert_replays(client, shard_workflow_id(name, shard))


async def test_a_split_drains_once_the_ids_held_before_it_expire(dev_env, task_queue: str, tmp_path: pathlib.Path) -> None:
    # proves: EXT-5
    client = dev_env.client
    name = unique("drain")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        assert (await wfi.activate(spec_for(tmp_path, name, task_queue, 1, dedup_retention="3s"))).outcome == "activated"
        before = [f"q-{i}" for i in range(20)]  # suppressed: released at once, expired 3 s later
        assert {r.disposition.value for r in await wfi.deliver_many(name, [(None, hook(i, go=False)) for i in before])} \
            == {"suppressed"}
        split = await wfi.activate(spec_for(tmp_path, name, task_queue, 2, dedup_retention="3s"))
        assert split.outcome == "rebound", split
        moved = next(i for i in before if shard_of("hook", i, 2) == 1)
        assert (await wfi.deliver(name, hook(moved, go=False))).disposition.value == "duplicate", "asked shard 0"

        async def drained() -> None:
            shards = {s["shard"]: s for s in (await wfi.summary(name))["shards"]}
            assert shards[0]["split"]["drained"] is True, shards[0]
            assert "split" not in shards[1], shards[1]

        await assert_eventually(drained, timeout=60)
        # Drained: shard 1 judges alone; every id of before the split has expired (new again).
        assert (await wfi.deliver(name, hook(moved, go=True))).disposition.value == "accepted"
        await still_serves(wfi, client, name, go=True)
        # And a second split may begin.
        assert "split from 2 into 4" in ((await wfi.activate(spec_for(tmp_path, name, task_queue, 4,
                                                                       dedup_retention="3s"))).note or "")
        await still_serves(wfi, client, name, "after-second-split", go=True)
    for shard in (0, 1, 3):
        await assert_replays(client, shard_workflow_id(name, shard))


async def test_a_deactivated_activation_activated_with_more_shards_is_split_from_its_state(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: INIT-4, EXT-3
    client = dev_env.client
    name = unique("split-again")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        assert (await wfi.activate(spec_for(tmp_path, name, task_queue, 2))).outcome == "activated"
        before = [f"e-{i}" for i in range(30)]
        first = {r.delivery_id: r for r in await wfi.deliver_many(name, [(None, hook(i, go=True)) for i in before])}
        await wfi.deactivate(name, DeactivateRequest(queued="drain"))
        await wfi.deactivated(name)
        with pytest.raises(ActivationRefused, match="never merged into fewer"):
            await wfi.activate(spec_for(tmp_path, name, task_queue, 1))
        again = await wfi.activate(spec_for(tmp_path, name, task_queue, 4))
        assert "split from 2 into 4 shards" in (again.note or ""), again
        assert any(shard_of("hook", i, 4) >= 2 for i in before)
        redelivered = await WfiClient(client, task_queue=task_queue).deliver_many(name, [(None, hook(i, go=True)) for i in before])
        assert [(r.disposition.value, r.run_key) for r in redelivered] == [("duplicate", first[i].run_key) for i in before]
        await still_serves(wfi, client, name, go=True)
