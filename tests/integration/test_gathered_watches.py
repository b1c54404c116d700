"""Runs started while a first look at new runs is out wait for the next look (``core.engine.Dispatcher``).

When nothing awaits a run's ending at once (no queue key, overlap policy, concurrency cap, schedule
or lifecycle events: ``Runs.endings_awaited``), an ending only starts its id's retention. A watch
activity per start (and a workflow task per watch) was then what a run-starting delivery paid on
top of the design floor, most of all across shards (bench/bench_shards.py). Here, on a real dev
server, runs started one after another share a few watches, and every ending still reaches the
activation within a first look's wait.
"""

from __future__ import annotations

import asyncio
import pathlib
import time
import uuid

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.hostile import HOOK, hook, still_serves
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import FIRST_LOOK_WAIT
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import ECHO_RUN_RELEASE_SIGNAL
from wf_initiation.wire.names import workflow_id_for

RUNS = 10


async def _activities(client: Client, name: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    async for event in client.get_workflow_handle(workflow_id_for(name)).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            kind = event.activity_task_scheduled_event_attributes.activity_type.name
            counts[kind] = counts.get(kind, 0) + 1
    return counts


async def _until_running(wfi: WfiClient, name: str, run_key: str) -> None:
    """Until the activation records the run as running (its start activity reported)."""

    async def running() -> None:
        assert (await wfi.state(name))["runs"][run_key]["status"] == "running"

    await assert_eventually(running, timeout=30, interval=0.05)

async def test_runs_started_one_after_another_share_watches_and_every_ending_arrives(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-5
    client = dev_env.client
    name = unique("gathered")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(make_spec(tmp_path, HOOK.format(name=name, extra=""), task_queue=task_queue,
                                     lifecycle_events=False))
        keys = []
        for i in range(RUNS):  # one start activity each: the next is delivered once the run is running
            result = await wfi.deliver(name, hook(f"held-{i}", hold=True))
            keys.append(result.run_key)
            await _until_running(wfi, name, result.run_key)
        released = time.monotonic()
        await asyncio.gather(*(client.get_workflow_handle(k).signal(ECHO_RUN_RELEASE_SIGNAL) for k in keys))

        async def all_ended() -> None:
            assert (await wfi.state(name))["runs"] == {}, "an ending was not learned"

        await assert_eventually(all_ended, timeout=60, interval=0.2)
        took = time.monotonic() - released
        counts = await _activities(client, name)
        assert counts["wfi.start_runs"] >= RUNS, counts
        assert counts["wfi.watch_runs"] <= RUNS // 2, f"a watch per start or nearly: {counts}"
        # A gathered run is looked at once the first look is back (at most FIRST_LOOK_WAIT) and its
        # ending found at the next sweep; the margin is the machine's.
        assert took < FIRST_LOOK_WAIT + 20, f"the endings took {took:.1f} s to arrive"
        summary = await wfi.summary(name)
        assert summary["counters"]["runs_started"] == RUNS
        await still_serves(wfi, client, name, ident=f"normal-{uuid.uuid4().hex[:6]}")


async def test_a_run_queued_behind_a_key_is_started_as_soon_as_its_head_ends(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: TRIG-14
    # The head's ending is awaited (a run waits behind it): the head is watched at once and long-polled,
    # never gathered behind a first look that would come back only after its wait.
    client = dev_env.client
    name = unique("awaited")
    extra = '  queue_by: "{{ hook.body.k }}"'
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(make_spec(tmp_path, HOOK.format(name=name, extra=extra), task_queue=task_queue,
                                     lifecycle_events=False))
        other = await wfi.deliver(name, hook("other", hold=True, k="b"))  # a first look, out for a while
        head = await wfi.deliver(name, hook("head", hold=True, k="a"))
        queued = await wfi.deliver(name, hook("queued", hold=True, k="a"))

        async def head_running() -> None:
            runs = (await wfi.state(name))["runs"]
            assert runs[head.run_key]["status"] == "running" and runs[queued.run_key]["status"] == "pending"

        await assert_eventually(head_running, timeout=30, interval=0.05)
        began = time.monotonic()
        await client.get_workflow_handle(head.run_key).signal(ECHO_RUN_RELEASE_SIGNAL)

        async def next_started() -> None:
            assert (await wfi.state(name))["runs"][queued.run_key]["status"] == "running"

        await assert_eventually(next_started, timeout=30, interval=0.05)
        assert time.monotonic() - began < FIRST_LOOK_WAIT, "the queued run waited for a gathered look"
        await client.get_workflow_handle(other.run_key).signal(ECHO_RUN_RELEASE_SIGNAL)
        await client.get_workflow_handle(queued.run_key).signal(ECHO_RUN_RELEASE_SIGNAL)
        await still_serves(wfi, client, name, ident=f"normal-{uuid.uuid4().hex[:6]}", k="c")


async def test_a_run_deleted_during_a_first_look_is_reported_by_the_watch_after_it(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-5
    # A first look never asks whether its runs exist (activities._watch): a run deleted while it is
    # out is found closed (terminated) while the store still lists it, or else comes back still going
    # at FIRST_LOOK_WAIT and the watch that follows finds it gone: either way it is reported ended.
    client = dev_env.client
    name = unique("deleted")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(make_spec(tmp_path, HOOK.format(name=name, extra=""), task_queue=task_queue,
                                     lifecycle_events=False))
        result = await wfi.deliver(name, hook("doomed", hold=True))
        await _until_running(wfi, name, result.run_key)
        await client.workflow_service.delete_workflow_execution(DeleteWorkflowExecutionRequest(  # terminates it
            namespace=client.namespace, workflow_execution=WorkflowExecution(workflow_id=result.run_key)))
        began = time.monotonic()

        async def ended() -> None:
            assert result.run_key not in (await wfi.state(name))["runs"], "the deleted run is still held"

        await assert_eventually(ended, timeout=60, interval=0.2)
        assert time.monotonic() - began < FIRST_LOOK_WAIT + 30, "not within the first look's wait and the next watch"
        assert (await wfi.summary(name))["counters"]["runs_started"] == 1
        await still_serves(wfi, client, name, ident=f"normal-{uuid.uuid4().hex[:6]}")
