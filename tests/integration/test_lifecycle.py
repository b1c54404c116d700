"""Composition through lifecycle events (COMP-3, COMP-5, COMP-6) on a real Temporal dev server."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.converter import PayloadCodec
from temporalio.service import RPCError
from temporalio.testing import ActivityEnvironment

from tests.support.activation import make_spec, unique
from tests.support.waits import assert_eventually
from tests.support.worker_proc import WorkerProcess
from wf_initiation.activities import lifecycle
from wf_initiation.activities.lifecycle import subscribers_query
from wf_initiation.activities.runs import RunActivities
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import LIFECYCLE_SIGNAL, Disposition, LifecycleEvent, lifecycle_event_id
from wf_initiation.core.runinput import Initiation, RunInput, TriggerInfo
from wf_initiation.wire import (
    ECHO_RUN_WORKFLOW,
    PUBLISH_LIFECYCLE_ACTIVITY,
    START_RUNS_ACTIVITY,
    RunToStart,
    StartRunsRequest,
    WatchedRun,
    WatchRequest,
    workflow_id_for,
)

UPSTREAM = """
name: {name}
on:
  http.request: {{path: /hooks/{name}}}
  as: kick
"""

DOWNSTREAM = """
name: {name}
on:
  - workflow.started: {{workflow: {upstream}}}
    as: started
  - workflow.completed: {{workflow: {upstream}}}
    as: completed
  - workflow.failed: {{workflow: {upstream}}}
    as: failed
"""


def kick(delivery_id: str, **body: Any) -> dict[str, Any]:
    return {"delivery_id": delivery_id, "method": "POST", "body": body}


async def listed_as_subscriber(client: Client, workflow: str, connector: str) -> None:
    """Visibility is eventually consistent: wait until the activation is found by the publisher."""

    async def check() -> None:
        query = f"{subscribers_query(connector)} AND WorkflowId = '{workflow_id_for(workflow)}'"
        assert (await client.count_workflows(query)).count == 1, f"{workflow} not listed for {connector} yet"

    await assert_eventually(check)


async def run_status(client: Client, run_key: str) -> WorkflowExecutionStatus | None:
    try:
        return (await client.get_workflow_handle(run_key).describe()).status
    except RPCError as exc:
        raise AssertionError(f"{run_key} not started: {exc}") from exc


async def finished(client: Client, run_key: str) -> None:
    status = await run_status(client, run_key)
    assert status not in (None, WorkflowExecutionStatus.RUNNING), f"{run_key} still {status}"


def runs_of(state: dict[str, Any]) -> dict[str, str]:
    """run key -> entry of every run the activation started (running or recently ended)."""
    runs = [*state["runs"].values(), *state["recent_runs"]]
    return {r["run_key"]: r["entry"] for r in runs}


async def test_lifecycle_events_of_a_start_one_run_of_b_per_transition(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: COMP-1, COMP-3, COMP-5
    client: Client = dev_env.client
    a, b = unique("build"), unique("deploy")
    await wfi.activate(make_spec(tmp_path, DOWNSTREAM.format(name=b, upstream=a), task_queue=task_queue))
    await wfi.activate(make_spec(tmp_path, UPSTREAM.format(name=a), task_queue=task_queue))
    for connector in ("workflow.started", "workflow.completed", "workflow.failed"):
        await listed_as_subscriber(client, b, connector)
    ok = await wfi.deliver(a, kick("ok"))
    bad = await wfi.deliver(a, kick("bad", fail=True))
    for run in (ok, bad):
        await assert_eventually(lambda run=run: finished(client, run.run_key or ""))

    async def b_ran_four_times() -> dict[str, Any]:
        state = await wfi.state(b)
        entries = sorted(runs_of(state).values())
        assert entries == ["completed", "failed", "started", "started"], entries
        assert all(r["status"] not in ("starting", "running") for r in state["recent_runs"]) and not state["runs"]
        return state

    state = await assert_eventually(b_ran_four_times)
    completed_key = next(k for k, e in runs_of(state).items() if e == "completed")
    received = await client.get_workflow_handle(completed_key).query("received")
    payload = received["bindings"]["completed"]
    assert (payload["workflow"], payload["workflow_id"], payload["transition"], payload["outcome"]) == (
        a, ok.run_key, "completed", "completed")
    assert received["initiation"]["causation"] == {"depth": 1, "chain": [ok.run_key]}
    failed_key = next(k for k, e in runs_of(state).items() if e == "failed")
    failed = (await client.get_workflow_handle(failed_key).query("received"))["bindings"]["failed"]
    assert (failed["workflow_id"], failed["outcome"]) == (bad.run_key, "failed")

    # The start and watch activities published A's events themselves: no publish activity of A.
    a_history = await client.get_workflow_handle(workflow_id_for(a)).fetch_history()
    scheduled = {e.activity_task_scheduled_event_attributes.activity_type.name for e in a_history.events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED}
    assert START_RUNS_ACTIVITY in scheduled and PUBLISH_LIFECYCLE_ACTIVITY not in scheduled, scheduled

    # COMP-5: B's runs are their own executions; A's run was never signalled or re-entered.
    history = await client.get_workflow_handle(ok.run_key or "").fetch_history()
    kinds = {e.event_type for e in history.events}
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED not in kinds
    a_closed = (await client.get_workflow_handle(ok.run_key or "").describe()).close_time
    b_started = (await client.get_workflow_handle(completed_key).describe()).start_time
    assert a_closed is not None and b_started >= a_closed

    # A republished event (same run, same transition) is a duplicate: still one run per transition.
    event = LifecycleEvent(connector="workflow.completed", payload=payload)
    await client.get_workflow_handle(workflow_id_for(b)).signal(LIFECYCLE_SIGNAL, event)
    record = await wfi.delivery(b, "completed", lifecycle_event_id(ok.run_key or "", "completed"))
    assert record is not None and record["disposition"] == Disposition.ACCEPTED.value

    async def duplicate_counted() -> None:
        assert (await wfi.summary(b))["counters"].get("duplicates") == 1

    await assert_eventually(duplicate_counted)
    assert sorted(runs_of(await wfi.state(b)).values()) == ["completed", "failed", "started", "started"]


async def test_completion_of_a_starts_exactly_one_run_of_b_across_a_worker_restart(
    dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: COMP-3, COMP-5, INIT-7
    client: Client = dev_env.client
    address = client.service_client.config.target_host
    wfi = WfiClient(client, task_queue=task_queue)
    a, b = unique("build"), unique("deploy")
    async with WorkerProcess(address, task_queue) as worker:
        await wfi.activate(make_spec(tmp_path, DOWNSTREAM.format(name=b, upstream=a), task_queue=task_queue))
        await wfi.activate(make_spec(tmp_path, UPSTREAM.format(name=a), task_queue=task_queue))
        await listed_as_subscriber(client, b, "workflow.completed")
        run = await wfi.deliver(a, kick("one"))
        await assert_eventually(lambda: finished(client, run.run_key or ""))
        worker.kill()  # somewhere between A's completion and B's start: the publish is kept in A's state
        worker.start()

        async def one_completed_run() -> list[str]:
            keys = [k for k, e in runs_of(await wfi.state(b)).items() if e == "completed"]
            assert len(keys) == 1, keys
            return keys

        (key,) = await assert_eventually(one_completed_run, timeout=90)
        await assert_eventually(lambda: finished(client, key), timeout=60)

        async def a_published_everything() -> None:
            assert (await wfi.state(a))["unacked"] == {}

        await assert_eventually(a_published_everything, timeout=60)
        worker.kill()
        worker.start()
        assert (await wfi.state(a))["unacked"] == {}
        assert [k for k, e in runs_of(await wfi.state(b)).items() if e == "completed"] == [key]


CYCLE_A = """
name: {name}
on:
  - http.request: {{path: /hooks/{name}}}
    as: kick
  - workflow.completed: {{workflow: {other}}}
    as: upstream
"""
CYCLE_B = """
name: {name}
on:
  workflow.completed: {{workflow: {other}}}
  as: upstream
"""


async def test_an_a_b_a_cycle_stops_at_the_causation_bound_with_the_chain_recorded(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: COMP-6, COMP-5
    client: Client = dev_env.client
    a, b = unique("ping"), unique("pong")
    await wfi.activate(make_spec(tmp_path, CYCLE_A.format(name=a, other=b), task_queue=task_queue, max_causation_depth=3))
    await wfi.activate(make_spec(tmp_path, CYCLE_B.format(name=b, other=a), task_queue=task_queue, max_causation_depth=3))
    for name in (a, b):
        await listed_as_subscriber(client, name, "workflow.completed")
    first = await wfi.deliver(a, kick("go"), entry="kick")
    assert first.disposition == Disposition.ACCEPTED

    async def refused() -> dict[str, Any]:
        state = await wfi.state(a)
        errors = [e for e in state["errors"] if e["kind"] == "refused"]
        assert errors, "no refusal yet"
        return errors[0]

    error = await assert_eventually(refused, timeout=60)
    a_state, b_state = await wfi.state(a), await wfi.state(b)
    a_runs, b_runs = runs_of(a_state), runs_of(b_state)
    assert sorted(a_runs.values()) == ["kick", "upstream"] and list(b_runs.values()) == ["upstream", "upstream"]
    assert a_state["counters"]["runs_started"] == 2 and b_state["counters"]["runs_started"] == 2

    async def causation(run_key: str) -> dict[str, Any]:
        return (await client.get_workflow_handle(run_key).query("received"))["initiation"]["causation"]

    by_depth = {(await causation(k))["depth"]: k for k in [*a_runs, *b_runs]}
    assert sorted(by_depth) == [0, 1, 2, 3] and by_depth[0] == first.run_key
    chain = [by_depth[d] for d in range(4)]
    assert await causation(by_depth[3]) == {"depth": 3, "chain": chain[:3]}
    assert "causation depth 4 exceeds the bound 3 (COMP-6)" in error["message"]
    assert error["message"].endswith("chain: " + " -> ".join(chain)), "the error names the chain of runs"
    record = await wfi.delivery(a, "upstream", error["delivery_id"])
    assert record is not None and record["disposition"] == Disposition.REFUSED.value


async def test_the_composition_conformance_cases_fail_fast_without_a_worker(dev_env, tmp_path: pathlib.Path) -> None:
    from wf_initiation.conformance import Target, collect, run_cases

    address = dev_env.client.service_client.config.target_host
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(f"temporal: {{address: '{address}', namespace: default, task_queue: {unique('idle')}}}\n")
    target = Target.from_file(deployment, tmp_path / "work")
    report = await run_cases(target, collect(["wf_initiation.conformance.cases.composition"]), timeout=30)
    failed = [r for r in report.failures() if "no worker polls task queue" in r.message]
    assert len(failed) == 4, [(r.id, r.message[:80]) for r in report.failures()]


class CodecDown(PayloadCodec):
    """A payload codec that cannot encode (a key service that is down): every signal sent with it fails."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        raise RuntimeError("the codec's key service is down")

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


class CodecSlow(PayloadCodec):
    """A payload codec that takes 10 s per call (a key service far away): publishing runs past its budget."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        await asyncio.sleep(10.0)  # the slowness under test, nothing to wait on: past PUBLISH_BUDGET (2 s)
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


def run_of(workflow: str, run_key: str) -> RunToStart:
    return RunToStart(run_key=run_key, input=RunInput(
        trigger=TriggerInfo(name="kick", connector="http.request", kind="external"), bindings={"kick": kick(run_key)},
        initiation=Initiation(activation_id=f"{workflow}@0", workflow=workflow, run_key=run_key, accepted_at=datetime.now(UTC))))


@pytest.mark.parametrize("codec", [CodecDown, CodecSlow])
async def test_start_and_watch_activities_publish_what_they_learn_or_leave_it_to_the_activation(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path, codec: type[PayloadCodec],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: COMP-3
    monkeypatch.setattr(lifecycle, "PUBLISH_BUDGET", 2.0)  # the slow codec needs 10 s per signal
    client: Client = dev_env.client
    a, b = unique("build"), unique("deploy")
    await wfi.activate(make_spec(tmp_path, DOWNSTREAM.format(name=b, upstream=a), task_queue=task_queue))
    for connector in ("workflow.started", "workflow.completed"):
        await listed_as_subscriber(client, b, connector)
    down = Client(**{**client.config(), "data_converter": dataclasses.replace(client.data_converter, payload_codec=codec())})
    working, failing = RunActivities(client), RunActivities(client, publish_client=down)
    env = ActivityEnvironment()
    left_key, sent_key = unique(f"{a}-left"), unique(f"{a}-sent")

    async def start(activities: RunActivities, key: str) -> bool:
        request = StartRunsRequest(workflow_type=ECHO_RUN_WORKFLOW, task_queue=task_queue, runs=[run_of(a, key)],
                                   publish_started=True)
        [started] = await env.run(activities.start_runs, request)
        assert started.run_id is not None and started.error is None, "the run starts whatever the publishing does"
        await assert_eventually(lambda: finished(client, key))
        watched = await env.run(activities.watch_runs, WatchRequest(runs=[WatchedRun(run_key=key)], publish_for=a))
        assert [o.status for o in watched] == ["completed"], "the ending is reported whatever the publishing does"
        assert started.published == watched[0].published
        return started.published

    assert await start(failing, left_key) is False, "not published: the activation keeps the events and publishes them"
    assert await start(working, sent_key) is True

    async def b_received_the_published_ones() -> None:
        for transition, entry in (("started", "started"), ("completed", "completed")):
            record = await wfi.delivery(b, entry, lifecycle_event_id(sent_key, transition))
            assert record is not None and record["disposition"] == Disposition.ACCEPTED.value, (transition, record)

    await assert_eventually(b_received_the_published_ones)
    for transition in ("started", "completed"):
        assert await wfi.delivery(b, transition, lifecycle_event_id(left_key, transition)) is None
