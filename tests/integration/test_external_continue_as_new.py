"""Continue-as-new mid-stream: nothing accepted is lost or run twice; deliveries in the first task survive."""

from __future__ import annotations

import asyncio
import pathlib
from collections import defaultdict

from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.replay import assert_replays
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import Disposition
from wf_initiation.plugin import WfiPlugin


async def test_deliveries_across_several_continue_as_new_boundaries(dev_env, task_queue: str, tmp_path: pathlib.Path) -> None:
    # proves: INIT-7, EXT-3, EXT-8, EXT-11
    name = unique("can")
    spec = make_spec(tmp_path, f"""
        name: {name}
        on:
          http.request: {{}}
          queue_by: "{{{{ request.body.key }}}}"
    """, task_queue=task_queue, max_history_events=200)
    # The default workflow cache: with none, a query replays the run and can race its new events
    # (docs/incidents/2026-11-30-stale-query.md); the chain's replay is checked at the end instead.
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(dev_env.client, task_queue=task_queue)
        await wfi.activate(spec)
        acks: dict[str, set[str | None]] = defaultdict(set)

        async def updates(ids: range) -> None:
            for i in ids:
                r = await wfi.deliver(name, {"delivery_id": f"u{i}", "method": "POST", "body": {"key": f"k{i % 3}"}})
                assert r.disposition in (Disposition.ACCEPTED, Disposition.QUEUED, Disposition.DUPLICATE)
                acks[f"u{i}"].add(r.run_key)

        async def signals(ids: range) -> None:
            for i in ids:
                await wfi.signal_delivery(name, {"delivery_id": f"s{i}", "method": "POST", "body": {"key": f"k{i % 3}"}})

        async def bulk() -> None:
            results = await wfi.deliver_many(name, [(None, {"delivery_id": f"b{i}", "method": "POST", "body": {"key": "k9"}})
                                                    for i in range(60)])
            assert {r.disposition for r in results} <= {Disposition.ACCEPTED, Disposition.QUEUED}

        await asyncio.gather(updates(range(0, 80)), updates(range(80, 160)), signals(range(60)), bulk())
        # Redeliver everything: all duplicates, whichever run of the chain receives them.
        again = await wfi.deliver_many(name, [(None, {"delivery_id": f"u{i}", "method": "POST", "body": {"key": f"k{i % 3}"}})
                                              for i in range(160)])
        assert {r.disposition for r in again} <= {Disposition.DUPLICATE, Disposition.ACCEPTED, Disposition.QUEUED}

        async def settled() -> dict:
            state = await wfi.state(name, include_events=True)
            assert not state["runs"], f"{len(state['runs'])} runs still open"
            return state

        state = await assert_eventually(settled, timeout=180, interval=1.0)
    desc = await wfi._handle(name).describe()
    runs_in_chain = 0
    async for _ in dev_env.client.list_workflows(f'WorkflowId = "{desc.id}"'):
        runs_in_chain += 1
    assert runs_in_chain >= 3, f"the stream crossed at least two continue-as-new boundaries ({runs_in_chain} runs)"
    events = state["events"]
    expected = {f"u{i}" for i in range(160)} | {f"s{i}" for i in range(60)} | {f"b{i}" for i in range(60)}
    assert {e.split("\x1f")[1] for e in events} == expected, "no delivery, signal or bulk, was lost"
    for d in acks:
        assert acks[d] == {events[f"request\x1f{d}"]["run_key"]}
    run_keys = {e["run_key"] for e in events.values()}
    assert len(run_keys) == len(expected), "one run per event"
    started = {}
    async for wf in dev_env.client.list_workflows(f'WfiActivation = "{spec.activation_id}" AND WorkflowType = "wfi.EchoRun"'):
        started[wf.id] = wf.start_time
    assert set(started) == run_keys
    for key in ("k0", "k1", "k2", "k9"):
        ordered = sorted((e["seq"], started[e["run_key"]]) for e in events.values() if _key(e) == key)
        assert [s for _, s in ordered] == sorted(s for _, s in ordered), f"queue {key} ran out of acceptance order"
    await assert_replays(dev_env.client, desc.id)


def _key(event: dict) -> str:
    d = event["delivery_id"]
    return "k9" if d.startswith("b") else f"k{int(d[1:]) % 3}"
