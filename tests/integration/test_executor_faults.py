"""A bug in one of the activation's call tasks (workflows/_executor.py, started through workflows/_tasks.py) on a real dev server: it fails
the workflow task with its cause instead of ending unseen, the activation stays open, and a worker
without the bug goes on from the last completed task with nothing lost."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus

from tests.support.activation import make_spec, unique
from tests.support.hostile import HOOK, hook, run_started, still_serves, task_failures
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import Engine
from wf_initiation.errors import TemporalUnavailable
from wf_initiation.wire import workflow_id_for


async def test_a_bug_in_a_call_task_fails_the_workflow_task_and_a_fixed_worker_records_the_run(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path, monkeypatch,
) -> None:
    client = dev_env.client
    name = unique("fault")
    await wfi.activate(make_spec(tmp_path, HOOK.format(name=name, extra=""), task_queue=task_queue))
    broken = True
    original = Engine.run_started

    def run_started_with_a_bug(self: Engine, *args: Any, **kwargs: Any) -> Any:
        if broken:
            raise RuntimeError("injected bug")
        return original(self, *args, **kwargs)

    # The workflow sandbox passes wf_initiation.core through: the worker's activations see this.
    monkeypatch.setattr(Engine, "run_started", run_started_with_a_bug)
    first = await wfi.deliver(name, hook("first"))
    assert first.disposition.value == "accepted", first
    await run_started(client, first.run_key)  # the start activity did its part

    async def task_failed() -> None:
        failures = await task_failures(client, name)
        assert any("start runs failed: RuntimeError: injected bug" in f for f in failures), failures

    await assert_eventually(task_failed)
    description = await client.get_workflow_handle(workflow_id_for(name)).describe()
    assert description.status == WorkflowExecutionStatus.RUNNING, "a bug fails the task, never the activation"
    with pytest.raises(TemporalUnavailable, match="the activation's workflow task is failing: `temporal workflow describe"):
        # The server answers no query meanwhile: an operator's `wfi state` is told why and where to look.
        await WfiClient(client, task_queue=task_queue, max_attempts=2).state(name, settle=1)

    broken = False  # the fixed build: the server's next attempt replays and goes on

    async def recorded() -> None:
        state = await wfi.state(name, settle=1)
        runs = [r for r in [*state["runs"].values(), *state["recent_runs"]] if r["run_key"] == first.run_key]
        assert runs and runs[0].get("started_at"), f"the run's start is not recorded yet: {runs}"

    await assert_eventually(recorded, timeout=90)
    await still_serves(wfi, client, name)
