"""An activation that grows itself (issue 35 item 3), on a real server.

With a small capacity per shard and a check every second, deliveries fill the shards of an activation
deployed with ``scale: {shards: 2, grow_at: 0.3, max_shards: 4}`` until shard 0 decides to grow: it
doubles its shards by the split ``wfi activate`` makes, recorded in the operator log with its reason,
while deliveries go on. No delivery is lost or run twice, a queue key's events run one at a time in
order across the move of their key, ids taken before are still answered as duplicates, the activation
grows no further than ``max_shards``, and ``wfi activate`` of the same deployment keeps the grown count.
"""

from __future__ import annotations

import asyncio
import pathlib
from datetime import timedelta

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.hostile import hook, still_serves
from tests.support.replay import assert_replays
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import _growth, _intake
from wf_initiation.core.limits import BYTES_PER_LIVE_RECORD, STATE_BASE_BYTES
from wf_initiation.core.sharding import lane_of
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import ECHO_RUN_WORKFLOW, shard_workflow_id

WORKFILE = """
name: {name}
on:
  http.request: {{}}
  as: hook
  when: "{{{{ hook.body.go }}}}"
  queue_by: "{{{{ hook.body.k }}}}"
"""
SMALL = STATE_BASE_BYTES + 300 * BYTES_PER_LIVE_RECORD  # about 300 retained ids per shard
SCALE = {"shards": 2, "grow_at": 0.3, "max_shards": 4}


@pytest.fixture
def grows_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    # The activation runs outside the sandbox: patching the engine's modules patches the activation.
    monkeypatch.setattr(_intake, "CAPACITY_BYTES", SMALL)
    monkeypatch.setattr(_growth, "GROW_CHECK_EVERY", timedelta(seconds=1))


def spec_for(tmp_path: pathlib.Path, name: str, task_queue: str, **scale: int | float):  # noqa: ANN201
    return make_spec(tmp_path, WORKFILE.format(name=name), task_queue=task_queue, lifecycle_events=False,
                     scale={**SCALE, **scale})


async def runs_of(client: Client, name: str) -> dict[str, list]:
    """(start, close) of every run of workflow ``name``, by delivery id (the run key ends with it)."""
    found: dict[str, list] = {}
    async for wf in client.list_workflows(f"WorkflowType = '{ECHO_RUN_WORKFLOW}'"):
        if wf.id.startswith(f"{name}@"):
            found.setdefault(wf.id.rsplit("/", 1)[-1], []).append((wf.start_time, wf.close_time))
    return found


async def shards_now(client: Client, task_queue: str, name: str) -> int:
    return await WfiClient(client, task_queue=task_queue).shards(name)  # a fresh routing each time


async def test_an_activation_past_grow_at_doubles_its_shards_by_the_split_and_loses_or_doubles_nothing(
    dev_env, task_queue: str, tmp_path: pathlib.Path, grows_fast: None,
) -> None:
    # proves: EXT-3, EXT-4, EXT-11, INIT-4
    client = dev_env.client
    name = unique("grows")
    key = next(k for k in (f"k-{n}" for n in range(100)) if lane_of(f'"{k}"', 4) >= 2)  # its lane moves at the split
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        assert (await wfi.activate(spec_for(tmp_path, name, task_queue))).outcome == "activated"
        keyed: list = []

        async def deliver_keyed() -> None:  # as a sender does: a deferred delivery is sent again later
            ident = f"{key}-e{len(keyed)}"

            async def taken() -> None:
                result = await wfi.deliver(name, hook(ident, go=True, k=key, sleep_seconds=0.3))
                assert result.disposition.value in ("accepted", "queued"), result
                keyed.append(result)

            await assert_eventually(taken, timeout=60, interval=1)

        for _ in range(3):
            await deliver_keyed()
        assert [r.disposition.value for r in keyed] == ["accepted", "queued", "queued"], keyed

        filled: list[str] = []
        stop = asyncio.Event()

        async def fill() -> None:  # suppressed ids: each is kept (capacity) until its retention ends
            n = 0
            while not stop.is_set():
                batch = [f"fill-{n + i}" for i in range(25)]
                results = await wfi.deliver_many(name, [(None, hook(i, go=False, k="f")) for i in batch])
                assert {r.disposition.value for r in results} <= {"suppressed", "deferred"}, results
                filled.extend(i for i, r in zip(batch, results) if r.disposition.value == "suppressed")
                n += 25
                if n % 100 == 0:  # a keyed event now and then, while it grows
                    await deliver_keyed()
                await asyncio.sleep(0.25)  # a steady rate: the shards fill in seconds, not at once

        filler = asyncio.create_task(fill())

        async def grown() -> None:
            assert await shards_now(client, task_queue, name) == 4

        await assert_eventually(grown, timeout=180, interval=1)
        stop.set()
        await filler
        await deliver_keyed()

        state = await wfi.state(name)
        [grow] = [a for a in state["operator_log"] if a["action"] == "grow"]
        assert grow["detail"].startswith("from 2 to 4 shards: shard ") and "past grow_at 30%" in grow["detail"], grow

        async def ran_in_order() -> None:
            runs = await runs_of(client, name)
            assert all(len(runs.get(r.delivery_id, [])) == 1 for r in keyed), ("one run each", runs)
            spans = [runs[r.delivery_id][0] for r in keyed]
            assert all(span[1] is not None for span in spans), ("not all ended yet", spans)
            for n, ((_, closed), (started, _)) in enumerate(zip(spans, spans[1:])):
                assert started >= closed, f"e{n + 1} started before e{n} ended: {spans}"
            assert set(runs) == {r.delivery_id for r in keyed}, "suppressed ids never ran"

        await assert_eventually(ran_in_order, timeout=120)
        again = await wfi.deliver_many(name, [(None, hook(i, go=False, k="f")) for i in filled[:100]])
        assert {r.disposition.value for r in again} == {"duplicate"}, "ids taken before the growth are still known"
        repeat = await wfi.deliver(name, hook(keyed[0].delivery_id, go=True, k=key, sleep_seconds=0.3), update_id="again")
        assert (repeat.disposition.value, repeat.run_key) == ("duplicate", keyed[0].run_key)

        summary = await wfi.summary(name)
        assert [s["shard"] for s in summary["shards"]] == [0, 1, 2, 3]
        assert all(isinstance(s["capacity"], float) for s in summary["shards"]), "each shard's fill"
        assert summary["growth"]["grown"] == 1 and summary["growth"]["max_shards"] == 4

        async def no_further() -> None:  # the fullest shard is still past grow_at: it says why it stays
            growth = (await wfi.summary(name))["growth"]
            assert "grows no further" in growth["next"] or "once the split going on has drained" in growth["next"], growth

        await assert_eventually(no_further, timeout=60)
        assert await shards_now(client, task_queue, name) == 4

        again_activated = await wfi.activate(spec_for(tmp_path, name, task_queue))  # the deployment still says 2
        assert again_activated.outcome == "unchanged", again_activated
        assert await shards_now(client, task_queue, name) == 4, "wfi activate keeps the shards it grew to"
        await still_serves(wfi, client, name, go=True, k="after")
    assert all(len(spans) == 1 for spans in (await runs_of(client, name)).values()), "every delivery ran once at most"
    for shard in (0, 1, 3):
        await assert_replays(client, shard_workflow_id(name, shard))
