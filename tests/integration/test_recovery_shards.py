"""A terminated shard comes back whole (issue 32 item 2), on a real dev server.

A split's child shard, terminated while its parent still ran the earlier events of a queue key that
moved to it, misses the parent's *free* of that key (a signal to a closed workflow fails). Started
again by ``wfi activate``, it recovers its complete state from its history (wf_initiation/_recovery.py)
and takes its parent's word from the parent's state (core/engine/recovery.py): the key's events run,
in order; every id it took is ``duplicate`` when redelivered. While it is closed, ``wfi state
--summary`` names it with the command that starts it again.
"""

from __future__ import annotations

import pathlib
from datetime import datetime
from typing import Any

from temporalio.client import WorkflowExecutionStatus
from temporalio.worker import Worker

from tests.support.activation import KEYED_HOOKS, make_spec, unique
from tests.support.hostile import hook, still_serves
from tests.support.ingress import deployment_with, served
from tests.support.replay import assert_replays
from tests.support.waits import assert_eventually
from wf_initiation.cli.state import render_state
from wf_initiation.client import WfiClient
from wf_initiation.core.sharding import lane_of, shard_of
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import ECHO_RUN_RELEASE_SIGNAL, ECHO_RUN_WORKFLOW, shard_workflow_id


def spec_for(tmp_path: pathlib.Path, name: str, task_queue: str, shards: int) -> Any:
    return make_spec(tmp_path, KEYED_HOOKS.format(name=name), task_queue=task_queue, lifecycle_events=False,
                     scale={"shards": shards})


def ident_on(shard: int, prefix: str) -> str:
    """A delivery id whose shard (of 4) is ``shard``."""
    return next(f"{prefix}-{n}" for n in range(1000) if shard_of("hook", f"{prefix}-{n}", 4) == shard)


async def spans(client: Any, name: str) -> dict[str, tuple[datetime, datetime | None]]:
    """(start, close) of each run of workflow ``name``, by delivery id; more than one run of an id fails."""
    found: dict[str, list[tuple[datetime, datetime | None]]] = {}
    async for wf in client.list_workflows(f"WorkflowType = '{ECHO_RUN_WORKFLOW}'"):
        if wf.id.startswith(f"{name}@"):
            found.setdefault(wf.id.rsplit("/", 1)[-1], []).append((wf.start_time, wf.close_time))
    assert all(len(runs) == 1 for runs in found.values()), ("an id ran twice", found)
    return {ident: runs[0] for ident, runs in found.items()}


async def test_a_terminated_child_shard_is_started_again_whole_and_its_moved_key_runs_in_order(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-11, EXT-3
    client, name = dev_env.client, unique("shard-back")
    key = next(f"k-{n}" for n in range(100) if lane_of(f'"k-{n}"', 4) >= 2)  # moves to a new shard at the split
    child = lane_of(f'"{key}"', 4)
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(spec_for(tmp_path, name, task_queue, 2))
        sent = [hook(f"{key}-e0", k=key, hold=True)] + [hook(f"{key}-e{n}", k=key, sleep_seconds=0.2) for n in (1, 2)]
        order = [await wfi.deliver(name, payload) for payload in sent]  # e0 runs on the parent, held
        assert "split from 2 into 4" in ((await wfi.activate(spec_for(tmp_path, name, task_queue, 4))).note or "")
        # After the split the key's events are the child's; e3's id is the child's own too.
        sent += [hook(ident_on(child, f"{key}-e3"), k=key), hook(f"{key}-e4", k=key)]
        order += [await WfiClient(client, task_queue=task_queue).deliver(name, payload) for payload in sent[3:]]
        assert [r.disposition.value for r in order] == ["accepted", "queued", "queued", "queued", "queued"], order

        handle = client.get_workflow_handle(shard_workflow_id(name, child))
        await handle.terminate(reason="operator pressed terminate")
        summary = await wfi.summary(name)
        stopped = summary.get("shards_not_running", [])
        assert [(s["shard"], s["status"]) for s in stopped] == [(child, "terminated")], summary
        assert stopped[0]["restart"].startswith("wfi activate"), stopped
        assert f"shard {child}: NOT RUNNING (terminated" in render_state(summary, None)
        served_by = deployment_with(tmp_path, {name: KEYED_HOOKS.format(name=name)}, task_queue=task_queue,
                                    ingress={"default_auth": {"scheme": "none"}})
        async with served(served_by, client) as s:
            ready = (await s.http.get("/readyz")).json()
        listed = ready.get("shards_not_running", {}).get(name, [])
        assert [(x["shard"], x["status"]) for x in listed] == [(child, "terminated")], ready

        # The parent runs the key's earlier events meanwhile; its free of the key cannot reach the child.
        await client.get_workflow_handle(order[0].run_key).signal(ECHO_RUN_RELEASE_SIGNAL)

        async def parent_done() -> None:
            ran = await spans(client, name)
            assert all(ran.get(r.delivery_id, (None, None))[1] is not None for r in order[:3]), ran

        await assert_eventually(parent_done, timeout=60)
        again = await WfiClient(client, task_queue=task_queue).activate(spec_for(tmp_path, name, task_queue, 4))
        assert f"shard(s) {child} started again" in (again.note or ""), again
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        assert "shards_not_running" not in await wfi.summary(name)

        async def in_order() -> None:
            ran = await spans(client, name)
            got = [ran.get(r.delivery_id) for r in order]
            assert all(span is not None and span[1] is not None for span in got), ("not all ran yet", got)
            for n, ((_, closed), (started, _)) in enumerate(zip(got, got[1:])):  # type: ignore[misc]
                assert started >= closed, f"e{n + 1} started before e{n} ended: {got}"

        await assert_eventually(in_order, timeout=90)
        for payload, first in zip(sent, order):
            redelivered = await wfi.deliver(name, payload, update_id=f"{first.delivery_id}-again")
            assert (redelivered.disposition.value, redelivered.run_key) == ("duplicate", first.run_key), redelivered
        await spans(client, name)  # still one run per id
        await still_serves(wfi, client, name, ident_on(child, "after-back"), k=key)
    for shard in range(4):
        await assert_replays(client, shard_workflow_id(name, shard))
