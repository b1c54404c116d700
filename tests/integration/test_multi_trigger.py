"""One activation with a schedule, a webhook and a poll entry, each with an `into` projection, on the
time-skipping server: every run's input has exactly the firing binding, null for the others, the
firing entry's `trigger.name` and the projected bindings; a projection fault starts no run and is
recorded; equal queue keys of different entries share one queue."""

from __future__ import annotations

import pathlib
from datetime import timedelta
from typing import Any

import pytest
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from tests.support.activation import make_spec, unique
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import Disposition
from wf_initiation.wire import OperatorRequest

WORKFILE = """
name: {name}
on:
  - time.schedule: {{cron: "0 * * * *", timezone: UTC}}
    as: tick
    into:
      post: {{title: "{{{{ tick.scheduled_at }}}}", source: schedule}}
  - http.request: {{path: /posts}}
    as: hook
    queue_by: "{{{{ hook.body.topic }}}}"
    into:
      post: {{title: "{{{{ hook.body.title | upper }}}}", source: webhook}}
  - sheet.row_added: {{sheet: calendar}}
    as: row
    queue_by: "{{{{ row.topic }}}}"
    into:
      post: {{title: "{{{{ row.title }}}}", source: sheet}}
"""
ENTRIES = {"tick", "hook", "row"}


@pytest.fixture
def wfi(ts_wfi: WfiClient) -> WfiClient:
    """This module's activations run on the test's time-skipping server."""
    return ts_wfi


async def run_input(ts_env: WorkflowEnvironment, run_key: str) -> dict[str, Any]:
    async def finished() -> dict[str, Any]:
        try:
            return (await ts_env.client.get_workflow_handle(run_key).result())["input"]
        except RPCError as exc:
            raise AssertionError(f"run {run_key} not started yet: {exc}") from exc

    return await assert_eventually(finished)


def assert_fired(received: dict[str, Any], entry: str, post: dict[str, Any]) -> None:
    assert received["trigger"]["name"] == entry
    assert set(received["bindings"]) == ENTRIES
    assert received["bindings"][entry] is not None
    assert all(received["bindings"][other] is None for other in ENTRIES - {entry})
    assert received["into"] == {"post": post}


async def test_each_kind_of_entry_fires_alone_with_its_name_and_its_projection(
    wfi: WfiClient, ts_env: WorkflowEnvironment, ts_activate, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: TRIG-7, TRIG-18, TRIG-19, CAP-3, BATCH-6, BATCH-7
    name = unique("posts")
    (tmp_path / "calendar.csv").write_text("title,topic\nfrom the sheet,s1\n")
    spec = make_spec(tmp_path, WORKFILE.format(name=name), task_queue=task_queue,
                     connections={"sheets": {"connector": "sheet", "dir": str(tmp_path)}},
                     poll={"interval": "10m"})
    await ts_activate(spec)
    hook = await wfi.deliver(name, {"delivery_id": "h1", "method": "POST", "body": {"title": "hello", "topic": "w1"}},
                             entry="hook")
    assert hook.disposition == Disposition.ACCEPTED
    assert_fired(await run_input(ts_env, hook.run_key), "hook", {"title": "HELLO", "source": "webhook"})

    async def row_run() -> str:
        event = await wfi.delivery(name, "row", "1")
        assert event is not None and event["run_key"], f"row 1 not polled yet: {event}"
        return event["run_key"]

    row = await run_input(ts_env, await assert_eventually(row_run))
    assert_fired(row, "row", {"title": "from the sheet", "source": "sheet"})
    assert row["bindings"]["row"]["title"] == "from the sheet"

    fault = await wfi.deliver(name, {"delivery_id": "h2", "method": "POST", "body": {"topic": "w1"}}, entry="hook")
    assert (fault.disposition, fault.run_key) == (Disposition.PROJECTION_FAULT, None)
    again = await wfi.deliver(name, {"delivery_id": "h2", "method": "POST", "body": {"topic": "w1"}}, entry="hook",
                              update_id="again-h2")
    assert (again.disposition, again.retained) == (Disposition.DUPLICATE, Disposition.PROJECTION_FAULT)
    await ts_env.sleep(timedelta(hours=1))
    tick_key = await assert_eventually(lambda: scheduled_run(wfi, name))
    tick = await run_input(ts_env, tick_key)
    assert_fired(tick, "tick", {"title": tick["bindings"]["tick"]["scheduled_at"], "source": "schedule"})

    state = await wfi.state(name)
    assert [e["delivery_id"] for e in state["errors"] if e["kind"] == "projection_fault"] == ["h2"]
    assert state["counters"]["runs_started"] == 3


async def scheduled_run(wfi: WfiClient, name: str) -> str:
    occurrences = (await wfi.state(name))["schedules"]["tick"]["occurrences"]
    keys = [o["run_key"] for o in occurrences if o["run_key"]]
    assert keys, f"no scheduled occurrence admitted yet: {occurrences}"
    return keys[0]


async def test_equal_queue_keys_of_two_entries_share_one_queue(
    wfi: WfiClient, ts_env: WorkflowEnvironment, ts_activate, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: TRIG-12, TRIG-11, TRIG-14
    name = unique("shared")
    csv = tmp_path / "calendar.csv"
    csv.write_text("title,topic\n")
    spec = make_spec(tmp_path, WORKFILE.format(name=name), task_queue=task_queue,
                     connections={"sheets": {"connector": "sheet", "dir": str(tmp_path)}},
                     poll={"interval": "10m"})
    await ts_activate(spec)
    held = await wfi.deliver(name, {"delivery_id": "q1", "method": "POST",
                                    "body": {"title": "first", "topic": "shared", "hold": True}}, entry="hook")
    assert held.disposition == Disposition.ACCEPTED
    csv.write_text("title,topic\nsecond,shared\nthird,other\n")
    await wfi.operate(name, OperatorRequest(action="poll_now", entry="row", action_id=unique("poll")))

    async def polled() -> dict[str, Any]:
        rows = {ident: await wfi.delivery(name, "row", ident) for ident in ("1", "2")}
        assert all(rows.values()), f"rows not polled yet: {rows}"
        return rows

    rows = await assert_eventually(polled)
    assert rows["1"]["disposition"] == "queued", "same key as the held webhook run: it waits (TRIG-12)"
    assert rows["2"]["disposition"] == "accepted", "a different key is unconstrained"
    other = await run_input(ts_env, rows["2"]["run_key"])
    assert other["bindings"]["row"]["title"] == "third"
    state = await wfi.state(name)
    assert state["runs"][rows["1"]["run_key"]]["status"] == "pending"
    await ts_env.client.get_workflow_handle(held.run_key).signal("release")
    second = await run_input(ts_env, rows["1"]["run_key"])
    assert_fired(second, "row", {"title": "second", "source": "sheet"})
