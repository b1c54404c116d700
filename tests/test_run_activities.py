"""The start and watch activities on a real dev server: outcomes from close events, and the lifecycle
events they publish themselves (identical when republished, so a retry is a duplicate downstream)."""

from __future__ import annotations

import pathlib
import uuid
from datetime import datetime, timezone

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from activities.runs import RunActivities, RunToStart, StartRunsRequest, WatchedRun, WatchRequest, _close_status
from tests.conftest import assert_eventually
from tests.support.activation import make_spec, unique
from tests.test_lifecycle import DOWNSTREAM, listed_as_subscriber
from wfi.client import WfiClient
from wfi.plugin import WfiPlugin
from workfile.engine._subscriptions import lifecycle_event_id
from workfile.runinput import Causation, Initiation, RunInput, TriggerInfo


def run_input(workflow: str, run_key: str, **body) -> RunInput:
    return RunInput(
        trigger=TriggerInfo(name="kick", connector="http.request", kind="external"),
        bindings={"kick": {"delivery_id": run_key, "method": "POST", "body": body}},
        initiation=Initiation(activation_id=f"{workflow}@test", workflow=workflow, run_key=run_key,
                              accepted_at=datetime(2026, 11, 30, tzinfo=timezone.utc),
                              causation=Causation(depth=0, chain=[])),
    )


def start_request(workflow: str, task_queue: str, *runs: RunToStart, settle: float = 0.0) -> StartRunsRequest:
    return StartRunsRequest(workflow_type="wfi.EchoRun", task_queue=task_queue, runs=list(runs),
                            publish_workflow=workflow, requested_at=datetime(2026, 11, 30, 12, tzinfo=timezone.utc),
                            settle_seconds=settle)


async def test_a_quick_run_ends_within_the_settle_window_and_a_republish_is_a_duplicate_downstream(
    dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: COMP-3, EXT-3
    client: Client = dev_env.client
    upstream, downstream = unique("up"), unique("down")
    activities = RunActivities(client)
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin()]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(make_spec(tmp_path, DOWNSTREAM.format(name=downstream, upstream=upstream), task_queue=task_queue))
        for connector in ("workflow.started", "workflow.completed"):
            await listed_as_subscriber(client, downstream, connector)
        run_key = f"{upstream}/kick/{uuid.uuid4().hex[:8]}"
        request = start_request(upstream, task_queue, RunToStart(run_key=run_key, input=run_input(upstream, run_key)),
                                settle=10.0)
        (first,) = await ActivityEnvironment().run(activities.start_runs, request)
        assert (first.terminal_status, first.published) == ("completed", True), first
        close_time = (await client.get_workflow_handle(run_key).describe()).close_time
        assert first.closed_at == close_time

        (again,) = await ActivityEnvironment().run(activities.start_runs, request)  # a retried activity
        assert (again.already_started, again.terminal_status, again.closed_at) == (True, "completed", close_time)

        async def one_accepted_one_duplicate_each() -> None:
            summary = await wfi.summary(downstream)
            assert summary["counters"].get("duplicates") == 2 and not summary["error_counts"].get("conflict"), summary
            for entry, transition in (("started", "started"), ("completed", "completed")):
                record = await wfi.delivery(downstream, entry, lifecycle_event_id(run_key, transition))
                assert record is not None and record["disposition"] == "accepted", (entry, record)

        await assert_eventually(one_accepted_one_duplicate_each)


async def test_without_settling_a_start_reports_the_run_running_and_the_watch_reports_its_end(
    dev_env, task_queue: str
) -> None:
    # proves: TRIG-14
    client: Client = dev_env.client
    activities = RunActivities(client)
    workflow = unique("held")
    run_key = f"{workflow}/kick/{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin()]):
        request = start_request(workflow, task_queue, RunToStart(run_key=run_key, input=run_input(workflow, run_key, hold=True)))
        (started,) = await ActivityEnvironment().run(activities.start_runs, request)
        assert started.terminal_status is None and started.run_id and started.published
        await client.get_workflow_handle(run_key).terminate(reason="the test ends it")
        watch = WatchRequest(runs=[WatchedRun(run_key=run_key, run_id=started.run_id)], max_wait_seconds=30)
        (outcome,) = await ActivityEnvironment().run(activities.watch_runs, watch)
    assert (outcome.run_key, outcome.status, outcome.published) == (run_key, "terminated", False)
    assert outcome.closed_at == (await client.get_workflow_handle(run_key).describe()).close_time


def _event(kind: EventType.ValueType, **attributes) -> HistoryEvent:
    event = HistoryEvent(event_type=kind)
    for field, value in attributes.items():
        getattr(event, field).new_execution_run_id = value
    return event


def test_close_events_map_to_outcomes_and_a_chain_is_followed() -> None:
    # proves: TRIG-14
    assert _close_status(_event(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED)) == ("completed", None)
    assert _close_status(_event(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED)) == ("terminated", None)
    assert _close_status(_event(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED)) == ("cancelled", None)
    assert _close_status(_event(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT)) == ("timed_out", None)
    retried = _event(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED, workflow_execution_failed_event_attributes="r2")
    assert _close_status(retried) == ("failed", "r2")
    continued = _event(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
                       workflow_execution_continued_as_new_event_attributes="r3")
    assert _close_status(continued) == (None, "r3")
