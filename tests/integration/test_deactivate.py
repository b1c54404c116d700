"""Deactivating an activation on a real dev server (docs/lifecycle.md): each flag with queued runs,
an open batch, a poll and a schedule in flight; deliveries refused meanwhile; ``action_id``
once-only; re-activation from the final state; the ``wfi deactivate`` command."""

from __future__ import annotations

import asyncio
import json
import pathlib
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.replay import assert_replays, assert_replays_history, replay_failure
from tests.support.runs import describe_or_none
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import Disposition
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import DeactivatedResult, DeactivateRequest, OperatorRequest, workflow_id_for
from wf_initiation.workflows.runapi import WaitForExample, WaitRequest

WFI = (sys.executable, "-c", "import sys; from wf_initiation.cli import main; sys.exit(main(sys.argv[1:]))")

# Every kind of work an activation holds: a queue (hook), a batch (order), a poll (task) and a
# schedule (tick). Runs are wfi.EchoRun on the test's queue; `hold: true` keeps one running.
WORKFILE = """
name: {name}
inputs:
  team: {{default: blue}}
on:
  - http.request: {{path: /hooks}}
    as: hook
    queue_by: "{{{{ hook.body.key }}}}"
  - http.request: {{path: /orders}}
    as: order
    batch: {{size: 5, max_wait: {max_wait}}}
  - sheet.row_added: {{sheet: tasks, id_column: task, connection: sheets}}
    as: task
  - time.schedule: {{interval: 1s}}
    as: tick
"""


def spec_for(tmp_path: pathlib.Path, task_queue: str, name: str, *, max_wait: str = "1h", **settings: Any):
    connections = {"sheets": {"connector": "sheet", "dir": str(tmp_path)}}
    return make_spec(tmp_path, WORKFILE.format(name=name, max_wait=max_wait), task_queue=task_queue,
                     connections=connections, poll={"interval": "200ms"}, late_after="30s", **settings)


def hook(ident: str, key: str = "k", **body: Any) -> dict[str, Any]:
    return {"delivery_id": ident, "method": "POST", "body": {"key": key, **body}}


def write_sheet(tmp_path: pathlib.Path, rows: list[tuple[str, str]]) -> None:
    (tmp_path / "tasks.csv").write_text("task,hold\n" + "".join(f"{t},{h}\n" for t, h in rows))


async def status_of(client: Client, run_key: str) -> WorkflowExecutionStatus | None:
    desc = await describe_or_none(client, run_key)
    return desc.status if desc is not None else None


async def until_status(client: Client, run_key: str, want: WorkflowExecutionStatus) -> None:
    async def check() -> None:
        assert await status_of(client, run_key) == want

    await assert_eventually(check, timeout=60)


async def busy(wfi: WfiClient, client: Client, name: str, tmp_path: pathlib.Path) -> dict[str, str]:
    """h1 running (held), h2 queued behind it, o1 in an open batch, t1 (held) polled, the schedule firing."""
    write_sheet(tmp_path, [("t1", "yes")])
    h1 = await wfi.deliver(name, hook("h1", hold=True), entry="hook")
    h2 = await wfi.deliver(name, hook("h2"), entry="hook")
    o1 = await wfi.deliver(name, hook("o1"), entry="order")
    assert (h1.disposition, h2.disposition, o1.disposition) == (Disposition.ACCEPTED, Disposition.QUEUED, Disposition.BATCHED)

    async def in_flight() -> dict[str, Any]:
        state = await wfi.state(name, include_events=True)
        assert state["events"].get("task\x1ft1", {}).get("run_key"), "t1 not polled yet"
        assert state["schedules"]["tick"]["counts"].get("admitted", 0) >= 1, "no occurrence yet"
        return state

    state = await assert_eventually(in_flight, timeout=60)
    t1 = state["events"]["task\x1ft1"]["run_key"]
    for key in (h1.run_key, t1):
        await until_status(client, key, WorkflowExecutionStatus.RUNNING)
    return {"h1": h1.run_key, "h2": h2.run_key, "o1": o1.run_key, "t1": t1}


def no_occurrence_after(final: DeactivatedResult, state: dict[str, Any]) -> None:
    requested = datetime.fromisoformat(final.deactivation["requested_at"].replace("Z", "+00:00"))
    fired = [o for o in state["schedules"]["tick"]["occurrences"] if o["fired_at"]]
    assert fired and all(datetime.fromisoformat(o["fired_at"].replace("Z", "+00:00")) <= requested for o in fired)


async def open_workflows(client: Client, name: str) -> int:
    return (await client.count_workflows(f"WfiWorkflow = '{name}' AND ExecutionStatus = 'Running'")).count


async def no_open_workflows(client: Client, name: str) -> None:
    # Visibility trails the executions by a moment: a run that just completed may still count as running.
    assert await open_workflows(client, name) == 0


async def test_cancel_queued_drops_queued_work_terminates_running_runs_and_completes(
    dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: BATCH-5, POLL-10, SCHED-5
    client, name = dev_env.client, unique("deact-cancel")
    spec = spec_for(tmp_path, task_queue, name)
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(spec)
        keys = await busy(wfi, client, name, tmp_path)
        result = await wfi.deactivate(name, DeactivateRequest(queued="cancel", running="terminate", note="cleanup"))
        assert (result.ok, result.status, result.remaining["pending_runs"]) == (True, "deactivating", 0)
        final: DeactivatedResult = await asyncio.wait_for(wfi._handle(name).result(), 60)
        d = final.deactivation
        assert (d["dropped_runs"], d["dropped_batches"], d["left_running"], d["note"]) == (1, 1, 0, "cleanup")
        assert d["controlled"][keys["h1"]] == d["controlled"][keys["t1"]] == "terminate"
        for key in (keys["h1"], keys["t1"]):
            assert await status_of(client, key) == WorkflowExecutionStatus.TERMINATED
        assert await describe_or_none(client, keys["h2"]) is None, "the queued run never started"
        assert await describe_or_none(client, keys["o1"]) is None, "the open batch never became a run"
        # Replayed here first: the query below replays it in the worker, and a failure there names no event.
        await assert_replays_history(await wfi._handle(name).fetch_history(), name)
        state = await wfi.state(name, include_events=True)  # a completed workflow still answers queries
        assert state["summary"]["status"] == "deactivated"
        assert state["events"]["order\x1fo1"]["disposition"] == "dropped" == state["events"]["hook\x1fh2"]["disposition"]
        no_occurrence_after(final, state)

        async def nothing_open() -> None:
            assert await open_workflows(client, name) == 0
            deactivated = f"WorkflowId = '{workflow_id_for(name)}' AND WfiState = 'deactivated'"
            assert (await client.count_workflows(deactivated)).count == 1

        await assert_eventually(nothing_open, timeout=30)
        history = await wfi._handle(name).fetch_history()
    assert await replay_failure(history) is None


async def test_drain_finishes_queued_work_and_refuses_every_delivery_meanwhile(
    dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: BATCH-3, BATCH-4, TRIG-11, INIT-6, INIT-8
    client, name = dev_env.client, unique("deact-drain")
    spec = spec_for(tmp_path, task_queue, name, max_wait="3s")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(spec)
        keys = await busy(wfi, client, name, tmp_path)
        waiter = await client.start_workflow(WaitForExample.run, WaitRequest(workflow=name, trigger="hook",
                                             match={"body.key": "w"}), id=unique("waiter"), task_queue=task_queue)
        await assert_eventually(lambda: _subscribed(wfi, name, waiter.id), timeout=30)

        result = await wfi.deactivate(name, DeactivateRequest(queued="drain", action_id="drain-1"))
        assert result.status == "deactivating"
        assert (result.remaining["pending_runs"], result.remaining["open_batches"]) == (1, 1)
        refused = await wfi.deliver(name, hook("h3"), entry="hook")
        assert refused.disposition == Disposition.DEACTIVATED and "wfi activate" in refused.message
        [bulk] = await wfi.deliver_many(name, [("hook", hook("h4"))])
        assert bulk.disposition == Disposition.DEACTIVATED
        await wfi.signal_delivery(name, hook("h5"), entry="hook")
        poll_now = await wfi.operate(name, OperatorRequest(action="poll_now", entry="task"))
        assert not poll_now.ok and "deactivated" in poll_now.message
        write_sheet(tmp_path, [("t1", "yes"), ("t2", "")])  # never read: polling stopped
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(waiter.result(), 60)
        assert "deactivated" in str(failed.value.cause), "a waiting run's subscription ends as refused"
        assert (await wfi.summary(name))["status"] == "deactivating"

        started = await assert_eventually(lambda: _started(client, keys["o1"]), timeout=60)
        run_input = await client.get_workflow_handle(keys["o1"]).result()
        opened = datetime.fromisoformat(run_input["input"]["initiation"]["accepted_at"].replace("Z", "+00:00"))
        assert started - opened >= timedelta(seconds=3), "the open batch closed at its max_wait, not earlier"
        assert await status_of(client, keys["h2"]) is None, "h2 waits behind h1's key"
        for key in (keys["h1"], keys["t1"]):
            await client.get_workflow_handle(key).signal("release")
        final: DeactivatedResult = await asyncio.wait_for(wfi._handle(name).result(), 60)
        assert await status_of(client, keys["h2"]) == WorkflowExecutionStatus.COMPLETED, "the queued run ran"
        d = final.deactivation
        assert (d["dropped_runs"], d["dropped_batches"], d["controlled"], d["left_running"]) == (0, 0, {}, 0)
        assert d["refused"] == 3 and final.summary["counters"]["refused_deactivated"] == 3
        state = await wfi.state(name, include_events=True)
        assert "hook\x1fh3" not in state["events"], "a refused delivery is not retained (not accepted)"
        assert state["polls"]["task"]["cursor"] == "1", "no poll after the deactivation"
        no_occurrence_after(final, state)
        await assert_eventually(lambda: no_open_workflows(client, name), timeout=15)


async def _subscribed(wfi: WfiClient, name: str, run_id: str) -> None:
    subs = (await wfi.state(name))["subscriptions"].values()
    assert run_id in {s["run_workflow_id"] for s in subs}


async def _started(client: Client, run_key: str) -> datetime:
    desc = await describe_or_none(client, run_key)
    assert desc is not None
    return desc.start_time


async def test_an_action_id_applies_once_and_a_reactivation_resumes_from_the_final_state(
    dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: INIT-4, INIT-5, INIT-7, EXT-3, EXT-5, POLL-9, SCHED-8
    client, name = dev_env.client, unique("deact-again")
    # No wake-ahead: its local-activity holds every second would meet an eviction after each task here.
    settings = {"missed": {"policy": "catch_up", "bound": 100}, "schedule_wake_ahead": "0s"}
    spec = spec_for(tmp_path, task_queue, name, **settings)
    changed = spec_for(tmp_path, task_queue, name, **settings, inputs={"team": "red"})
    write_sheet(tmp_path, [("t1", "")])
    # The default workflow cache: with none, a query replays the run and can race its new events
    # (docs/incidents/2026-11-30-stale-query.md); the chain's replay is checked at the end instead.
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(spec)
        done = await wfi.deliver(name, hook("h0", key="other"), entry="hook")
        held = await wfi.deliver(name, hook("h1", hold=True), entry="hook")
        await until_status(client, done.run_key, WorkflowExecutionStatus.COMPLETED)
        await until_status(client, held.run_key, WorkflowExecutionStatus.RUNNING)
        await assert_eventually(lambda: _polled(wfi, name, "1"), timeout=60)
        first_run = (await wfi._handle(name).describe()).run_id

        first = await wfi.deactivate(name, DeactivateRequest(queued="drain", action_id="a1"))
        assert first.status == "deactivating"
        again = await wfi.deactivate(name, DeactivateRequest(queued="cancel", running="terminate", action_id="a1"))
        assert again == first, "the same action id never applies twice (here: the update id's answer)"
        assert await status_of(client, held.run_key) == WorkflowExecutionStatus.RUNNING
        escalated = await wfi.deactivate(name, DeactivateRequest(queued="cancel", running="terminate", action_id="a2"))
        assert "escalated" in escalated.message
        final: DeactivatedResult = await asyncio.wait_for(wfi._handle(name).result(), 60)
        assert await status_of(client, held.run_key) == WorkflowExecutionStatus.TERMINATED
        requested = datetime.fromisoformat(final.deactivation["requested_at"].replace("Z", "+00:00"))

        async def deactivated_for_a_while() -> None:  # the deactivated stretch under test spans instants
            assert datetime.now(UTC) - requested > timedelta(seconds=2.5)

        await assert_eventually(deactivated_for_a_while, timeout=10)
        before_reactivation = datetime.now(UTC)
        reactivated = await wfi.activate(changed)
        assert reactivated.previous == [spec.activation_id], "a changed binding: a rebind of the carried state"
        assert (await wfi._handle(name).describe()).run_id != first_run
        summary = await wfi.summary(name)
        assert (summary["status"], summary["activation_id"]) == ("active", changed.activation_id)
        # Counters carry over; the 1 s tick may already have started a run since the re-activation.
        assert summary["counters"]["runs_started"] >= final.summary["counters"]["runs_started"]
        assert summary["counters"]["deliveries"] == final.summary["counters"]["deliveries"]
        redelivered = await wfi.deliver(name, hook("h0", key="other"), entry="hook", update_id="h0-again")
        assert (redelivered.disposition, redelivered.run_key) == (Disposition.DUPLICATE, done.run_key), "dedup kept"
        once = await wfi.deactivate(name, DeactivateRequest(queued="cancel", action_id="a1"))
        assert (once.message, once.status) == ("already applied", "active"), "still once-only after re-activation"

        write_sheet(tmp_path, [("t1", ""), ("t2", "")])

        async def polled_and_ticked() -> dict[str, Any]:  # two ticks of the re-activated schedule, to look at
            state = await _polled(wfi, name, "2")
            assert len(_instants(state["schedules"]["tick"]["occurrences"], after=before_reactivation)) >= 2
            return state

        state = await assert_eventually(polled_and_ticked, timeout=60)
        assert [e["delivery_id"] for e in state["events"].values() if e["entry"] == "task"] == ["t1", "t2"]
        assert state["counters"]["runs_started"] >= summary["counters"]["runs_started"] + 1
        ticks = state["schedules"]["tick"]
        assert not ticks["counts"].get("caught_up") and not ticks["overflow"], "nothing of the deactivated time caught up"
        stretch = [t for t in _instants(ticks["occurrences"], after=requested + timedelta(seconds=1))
                   if t < before_reactivation]
        assert stretch == [], f"occurrences while deactivated were not admitted: {stretch}"
        await wfi.deactivate(name, DeactivateRequest(queued="cancel", running="terminate"))
        await asyncio.wait_for(wfi._handle(name).result(), 60)
        await assert_eventually(lambda: no_open_workflows(client, name), timeout=15)
    await assert_replays(client, workflow_id_for(name))


async def _polled(wfi: WfiClient, name: str, cursor: str) -> dict[str, Any]:
    state = await wfi.state(name, include_events=True)
    assert state["polls"]["task"]["cursor"] == cursor
    return state


def _instants(occurrences: list[dict[str, Any]], *, after: datetime) -> list[datetime]:
    instants = sorted(datetime.fromisoformat(o["utc"].replace("Z", "+00:00")) for o in occurrences)
    return [t for t in instants if t > after]


# ---------------------------------------------------------------------- the command line
def _deployment(tmp_path: pathlib.Path, address: str, task_queue: str, name: str) -> pathlib.Path:
    workfile = tmp_path / "hook.workfile.yaml"
    workfile.write_text(f"name: {name}\non:\n  http.request: {{path: /hooks}}\n  as: hook\n"
                        "  queue_by: \"{{ hook.body.key }}\"\n")
    path = tmp_path / "deployment.yaml"
    path.write_text(json.dumps({
        "temporal": {"address": address, "namespace": "default", "task_queue": task_queue},
        "workflows": {name: {"workfile": str(workfile), "run": {"workflow_type": "wfi.EchoRun", "task_queue": task_queue}}},
    }))
    return path


async def wfi_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(subprocess.run, [*WFI, *args], capture_output=True, text=True, timeout=120)


async def test_wfi_deactivate_settles_waits_and_says_what_happened(dev_env, task_queue: str, tmp_path: pathlib.Path) -> None:
    client, name = dev_env.client, unique("deact-cli")
    deployment = str(_deployment(tmp_path, client.service_client.config.target_host, task_queue, name))
    target = ("--workflow", name, "--deployment", deployment)
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        missing = await wfi_cli("deactivate", "--drain", "--workflow", "nobody", "--deployment", deployment)
        assert missing.returncode == 1 and "no activation of workflow 'nobody'" in missing.stderr
        assert (await wfi_cli("activate", str(tmp_path / "hook.workfile.yaml"), "--deployment", deployment)).returncode == 0
        wfi = WfiClient(client, task_queue=task_queue)
        held = await wfi.deliver(name, hook("h1", hold=True))
        usage = await wfi_cli("deactivate", *target)
        assert usage.returncode == 2 and "--drain --cancel-queued" in usage.stderr
        both = await wfi_cli("deactivate", "--drain", "--running", "terminate", *target)
        assert both.returncode == 2 and "--cancel-queued --running terminate" in both.stderr and "Traceback" not in both.stderr

        drain = await wfi_cli("deactivate", "--drain", "--action-id", "cli-1", *target, "--json")
        assert drain.returncode == 0, drain.stderr
        assert json.loads(drain.stdout)["outcome"] == "deactivating"
        refused = await wfi_cli("deliver", "--payload", json.dumps(hook("h2")), *target)
        assert refused.returncode == 1 and refused.stdout.startswith("deactivated") and "wfi activate" in refused.stdout
        waited = await wfi_cli("deactivate", "--cancel-queued", "--running", "terminate", "--wait", *target)
        assert waited.returncode == 0, waited.stderr
        assert f"{name}: deactivated at" in waited.stdout and "1 running run(s) terminated" in waited.stdout
        again = await wfi_cli("deactivate", "--drain", *target)
        assert again.returncode == 0 and f"{name}: already deactivated at" in again.stdout
        state = await wfi_cli("state", "--summary", "--json", *target)
        assert state.returncode == 0 and json.loads(state.stdout)["status"] == "deactivated"
        closed = await wfi_cli("deliver", "--payload", json.dumps(hook("h3")), *target)
        assert closed.returncode == 1 and "wfi activate" in closed.stderr and "Traceback" not in closed.stderr
        assert await status_of(client, held.run_key) == WorkflowExecutionStatus.TERMINATED

        back = await wfi_cli("activate", str(tmp_path / "hook.workfile.yaml"), "--deployment", deployment, "--json")
        assert back.returncode == 0, back.stderr
        accepted = await wfi_cli("deliver", "--payload", json.dumps(hook("h2")), *target)
        assert accepted.returncode == 0 and accepted.stdout.startswith("accepted")
        await wfi.deactivate(name, DeactivateRequest(queued="cancel", running="terminate"))
        await asyncio.wait_for(wfi._handle(name).result(), 60)
