"""`wfi.watch_runs` watches many running runs in a bounded number of calls (issue 18 item 6).

One long poll per running run used to count against the namespace's concurrent long-poll limit
(3,000 running runs failed 47 watch activities). The watcher asks the visibility store which of its
runs closed, a few describe calls at a time, and long-polls only the runs of a watch of at most two
(so the end of a lone run or a queue's head is learned at once). These tests count every RPC the
watching client makes, in flight at once, per RPC: on a real dev server.
"""

from __future__ import annotations

import asyncio
import pathlib
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from tests.support.activation import make_spec, unique
from tests.support.hostile import HOOK, hook, still_serves
from tests.support.waits import assert_eventually
from wf_initiation.activities._watch import DESCRIBE_CONCURRENCY, LONG_POLLS, PATIENCE, RunWatcher
from wf_initiation.activities.runs import RunActivities
from wf_initiation.client import WfiClient
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import ECHO_RUN_RELEASE_SIGNAL, RunOutcome, WatchedRun, WatchRequest

LONG_POLL = "long poll"  # get_workflow_execution_history waiting for a new event
LIST = "list_workflow_executions"
DESCRIBE = "describe_workflow_execution"
WATCHERS = 8  # workflows/activation.py MAX_WATCHERS: watch activities of one activation at once


@workflow.defn(name="test.Held")
class Held:
    """Runs until told how to end: ``complete``, ``fail``, ``terminate`` (by the test) or ``continue``
    (continues as new, then waits again)."""

    def __init__(self) -> None:
        self._end: str | None = None

    @workflow.run
    async def run(self, generation: int) -> str:
        await workflow.wait_condition(lambda: self._end is not None)
        if self._end == "fail":
            raise ApplicationError("asked to fail", non_retryable=True)
        if self._end == "continue" and generation == 0:
            workflow.continue_as_new(1)
        return "done"

    @workflow.signal
    def end(self, how: str) -> None:
        self._end = how


class CallCounter:
    """Counts the RPCs a real client makes: in flight now, the most in flight at once, and in all."""

    def __init__(self) -> None:
        self.now: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.total: Counter[str] = Counter()

    @contextmanager
    def call(self, rpc: str) -> Iterator[None]:
        self.now[rpc] += 1
        self.total[rpc] += 1
        self.most[rpc] = max(self.most[rpc], self.now[rpc])
        try:
            yield
        finally:
            self.now[rpc] -= 1


async def counted_client(env) -> tuple[Client, CallCounter]:
    """A client of its own to the test's server whose every RPC is counted."""
    client = await Client.connect(env.client.service_client.config.target_host, data_converter=env.client.data_converter)
    counter = CallCounter()
    service = client.service_client
    rpc_call = service._rpc_call

    async def counted(rpc: str, req: Any, *args: Any, **kwargs: Any) -> Any:
        long_poll = rpc == "get_workflow_execution_history" and getattr(req, "wait_new_event", False)
        with counter.call(LONG_POLL if long_poll else rpc):
            return await rpc_call(rpc, req, *args, **kwargs)

    service._rpc_call = counted  # type: ignore[method-assign]
    return client, counter


async def watch(activities: RunActivities, keys: list[str], max_wait: float = 30.0) -> list[RunOutcome]:
    request = WatchRequest(runs=[WatchedRun(run_key=k) for k in keys], max_wait_seconds=max_wait)
    return await ActivityEnvironment().run(activities.watch_runs, request)


async def test_many_runs_are_watched_in_bounded_calls_and_a_missing_run_fails_no_other_watch(dev_env, task_queue: str) -> None:
    # proves: TRIG-14
    client, counter = await counted_client(dev_env)
    activities = RunActivities(client)
    prefix = unique("held")
    keys = [f"{prefix}-{i}" for i in range(300)] + [f"{prefix}-it's"]  # an id a query cannot name
    missing = f"{prefix}-no-such-run"
    async with Worker(dev_env.client, task_queue=task_queue, workflows=[Held], max_concurrent_workflow_tasks=50,
                      workflow_runner=UnsandboxedWorkflowRunner()):  # this module imports what the sandbox refuses
        handles = {k: await dev_env.client.start_workflow(Held.run, 0, id=k, task_queue=task_queue) for k in keys}
        first = await watch(activities, [*keys, missing])
        assert first == [RunOutcome(run_key=missing, status="terminated")], "only the missing run is reported"

        ends = {keys[0]: "complete", keys[1]: "fail", keys[2]: "terminate", keys[3]: "continue", keys[-1]: "complete"}
        ends.update({k: "complete" for k in keys[100:200]})
        for key, how in ends.items():
            if how == "terminate":
                await handles[key].terminate("test")
            else:
                await handles[key].signal(Held.end, how)
        expected = {k: {"complete": "completed", "fail": "failed", "terminate": "terminated"}[how]
                    for k, how in ends.items() if how != "continue"}
        seen: dict[str, str] = {}
        while len(seen) < len(expected):
            for outcome in await watch(activities, [k for k in keys if k not in seen]):
                seen[outcome.run_key] = outcome.status
        assert seen == expected, "each ended run with its outcome; a run that continued as new is still running"

        await handles[keys[3]].signal(Held.end, "complete")  # the continued run ends now
        assert await watch(activities, [keys[3]]) == [RunOutcome(run_key=keys[3], status="completed")]
        for key in keys:
            if key not in seen and key != keys[3]:
                await handles[key].terminate("test over")

    assert counter.most[LONG_POLL] <= LONG_POLLS, "no long poll per run: the oldest two at most"
    assert counter.most[LIST] == 1, counter.most
    assert 1 <= counter.most[DESCRIBE] <= DESCRIBE_CONCURRENCY, counter.most


async def test_the_sweeps_of_many_watches_on_one_client_go_in_one_query(dev_env, task_queue: str) -> None:
    # proves: TRIG-14
    # A sharded activation has watches on every shard: each sweeping with a query of its own made
    # the visibility store the bottleneck of run starts past a few shards (bench_shards.py).
    client, counter = await counted_client(dev_env)
    keys = [unique("held") for _ in range(WATCHERS * 5)]
    async with Worker(dev_env.client, task_queue=task_queue, workflows=[Held], workflow_runner=UnsandboxedWorkflowRunner()):
        handles = [await dev_env.client.start_workflow(Held.run, 0, id=k, task_queue=task_queue) for k in keys]
        ending = {keys[n]: ("complete" if n % 2 else "fail") for n in range(0, len(keys), 4)}  # two in each watch
        for key, how in ending.items():
            await handles[keys.index(key)].signal(Held.end, how)
        watchers = [RunWatcher(client, keys[n:n + 5]) for n in range(0, len(keys), 5)]
        rounds = 0
        for _ in range(100):  # until the visibility store lists every ending (it lags the server a little)
            before = counter.total[LIST]
            await asyncio.gather(*(w.sweep() for w in watchers))
            rounds += 1
            assert counter.total[LIST] - before == 1, "the eight sweeps asked together: one query"
            if sum(len(w.watching) for w in watchers) == len(keys) - len(ending):
                break
            await asyncio.sleep(0.1)
        outcomes = {k: f.result() for w in watchers for k, f in w.outcomes.items() if f.done()}
        assert outcomes == {k: "completed" if how == "complete" else "failed" for k, how in ending.items()}
        for handle in handles:
            if handle.id not in ending:
                await handle.terminate("test over")
    assert counter.most[LIST] == 1, "one query in flight at a time"



async def test_first_looks_sweeping_apart_share_a_query_and_ask_nothing_else(dev_env, task_queue: str) -> None:
    # proves: TRIG-14
    # The first looks of eight shards sweep once a second, each at its own moment: each query waits
    # up to PATIENCE for the others', so they share one; a first look asks no count, list or
    # describe about its runs' existence; an impatient sweep goes at once and takes them along.
    client, counter = await counted_client(dev_env)
    keys = [unique("look") for _ in range(WATCHERS * 2)]
    async with Worker(dev_env.client, task_queue=task_queue, workflows=[Held], workflow_runner=UnsandboxedWorkflowRunner()):
        handles = [await dev_env.client.start_workflow(Held.run, 0, id=k, task_queue=task_queue) for k in keys]
        looks = [RunWatcher(client, keys[n:n + 2], first_look=True) for n in range(0, len(keys), 2)]

        async def staggered(n: int, watcher: RunWatcher) -> int:
            await asyncio.sleep(n * 0.03)  # over twice the gap between queries, within the patience
            return await watcher.sweep(check_existence=True)

        assert 0.03 * WATCHERS < PATIENCE
        before = dict(counter.total)
        assert await asyncio.gather(*(staggered(n, w) for n, w in enumerate(looks))) == [0] * WATCHERS
        asked = {rpc: n - before.get(rpc, 0) for rpc, n in counter.total.items() if n != before.get(rpc, 0)}
        assert asked == {LIST: 1}, "one query for the eight first looks, and no existence check"

        prompt = RunWatcher(client, keys[:1])  # a watch something waits on does not wait for company
        before = dict(counter.total)
        patient = asyncio.create_task(looks[1].sweep())
        await asyncio.sleep(0.05)
        began = asyncio.get_running_loop().time()
        await asyncio.gather(prompt.sweep(), patient)
        assert asyncio.get_running_loop().time() - began < PATIENCE / 2
        assert counter.total[LIST] - before.get(LIST, 0) == 1, "the prompt sweep took the patient one along"
        for handle in handles:
            await handle.terminate("test over")


@pytest.mark.slow
async def test_an_activation_with_400_running_runs_learns_every_ending_in_bounded_calls(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: TRIG-14
    runs = 400
    client, counter = await counted_client(dev_env)
    name = unique("many")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)],
                      max_concurrent_workflow_tasks=50):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(make_spec(tmp_path, HOOK.format(name=name, extra=""), task_queue=task_queue))
        results = await wfi.deliver_many(name, [(None, hook(f"e{i}", hold=True)) for i in range(runs)])
        run_keys = [r.run_key for r in results]
        assert len(set(run_keys)) == runs and None not in run_keys

        async def all_running() -> None:
            state = await wfi.state(name)
            assert sum(1 for r in state["runs"].values() if r["status"] == "running") == runs, "not all running yet"

        await assert_eventually(all_running, timeout=300, interval=1.0)
        await asyncio.gather(*(client.get_workflow_handle(k).signal(ECHO_RUN_RELEASE_SIGNAL) for k in run_keys))

        async def all_ended() -> None:
            state = await wfi.state(name)
            assert state["runs"] == {}, f"{len(state['runs'])} runs not reported ended yet"

        await assert_eventually(all_ended, timeout=300, interval=1.0)
        assert counter.most[LONG_POLL] <= WATCHERS * LONG_POLLS, "no long poll per run: two per watch at most"
        assert counter.most[LIST] <= WATCHERS, counter.most
        assert counter.most[DESCRIBE] <= WATCHERS * DESCRIBE_CONCURRENCY, counter.most
        await still_serves(wfi, client, name, ident=f"normal-{uuid.uuid4().hex[:6]}")


async def test_a_server_without_visibility_listing_is_watched_by_bounded_describes(ts_env, task_queue: str) -> None:
    # proves: TRIG-14
    client, counter = await counted_client(ts_env)
    activities = RunActivities(client)
    keys = [unique("held") for _ in range(40)]
    async with Worker(ts_env.client, task_queue=task_queue, workflows=[Held], workflow_runner=UnsandboxedWorkflowRunner()):
        handles = [await ts_env.client.start_workflow(Held.run, 0, id=k, task_queue=task_queue) for k in keys]
        for handle in handles[:10]:
            await handle.signal(Held.end, "complete")
        seen: dict[str, str] = {}
        while len(seen) < 10:
            seen.update((o.run_key, o.status) for o in await watch(activities, [k for k in keys if k not in seen]))
        assert seen == {k: "completed" for k in keys[:10]}
        for handle in handles[10:]:
            await handle.terminate("test over")
    assert counter.most[LONG_POLL] <= LONG_POLLS and counter.most[DESCRIBE] <= DESCRIBE_CONCURRENCY, counter.most
    assert counter.total[LIST] >= 1, "the listing was tried"


async def test_a_lone_run_is_learned_from_its_long_poll_without_a_visibility_query(dev_env, task_queue: str) -> None:
    # proves: TRIG-14
    client, counter = await counted_client(dev_env)
    activities = RunActivities(client)
    key, missing = unique("held"), unique("held-missing")
    async with Worker(dev_env.client, task_queue=task_queue, workflows=[Held], workflow_runner=UnsandboxedWorkflowRunner()):
        handle = await dev_env.client.start_workflow(Held.run, 0, id=key, task_queue=task_queue)
        assert await watch(activities, [missing]) == [RunOutcome(run_key=missing, status="terminated")]
        watching = asyncio.create_task(watch(activities, [key]))

        async def long_polling() -> None:
            assert counter.now[LONG_POLL] >= 1, "the watch is not yet waiting on the run's history"

        await assert_eventually(long_polling, timeout=30)
        assert not watching.done(), "a running run is not reported"
        await handle.signal(Held.end, "fail")
        assert await watching == [RunOutcome(run_key=key, status="failed")]
    assert counter.total[LIST] == 0, "the long polls answered before any sweep (a sweep lists twice at first)"


async def test_a_first_look_reports_every_ending_at_once_and_never_long_polls(dev_env, task_queue: str) -> None:
    # proves: EXT-5
    # Gathered runs (core.engine.Dispatcher): nothing awaits their endings at once, so a first look
    # reports them together, once every run ended (or at its max_wait), rather than at the first
    # ending: one activity and one workflow task for the lot.
    client, counter = await counted_client(dev_env)
    activities = RunActivities(client)
    keys = [unique("look") for _ in range(2)]
    async with Worker(dev_env.client, task_queue=task_queue, workflows=[Held], workflow_runner=UnsandboxedWorkflowRunner()):
        handles = [await dev_env.client.start_workflow(Held.run, 0, id=k, task_queue=task_queue) for k in keys]
        request = WatchRequest(runs=[WatchedRun(run_key=k) for k in keys], first_look=True, max_wait_seconds=30,
                               first_sweep_seconds=0.2)
        looking = asyncio.create_task(ActivityEnvironment().run(activities.watch_runs, request))
        await handles[0].signal(Held.end, "complete")
        await asyncio.sleep(2.0)  # several sweeps found the first ending
        assert not looking.done(), "a first look does not report at the first ending"
        await handles[1].signal(Held.end, "fail")
        outcomes = await asyncio.wait_for(looking, timeout=30)
        assert sorted((o.run_key, o.status) for o in outcomes) == sorted(zip(keys, ["completed", "failed"]))
        # and what max_wait found, when a run still goes
        other = unique("look-long")
        await dev_env.client.start_workflow(Held.run, 0, id=other, task_queue=task_queue)
        short = WatchRequest(runs=[WatchedRun(run_key=other), WatchedRun(run_key=keys[0])], first_look=True,
                             max_wait_seconds=1.5, first_sweep_seconds=0.2)
        assert await ActivityEnvironment().run(activities.watch_runs, short) == [RunOutcome(run_key=keys[0], status="completed")]
    assert counter.total[LONG_POLL] == 0, "a first look only sweeps"
