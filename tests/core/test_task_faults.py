"""workflows/_tasks.py on a plain event loop: what a task nobody awaits raises is kept and raised by
the activation's loop as a TaskFault (not a FailureError: it fails the workflow task, never the
activation); cancellations are not faults; runs of an earlier build only log it. The same on a real
server, ending with the activation going on: tests/integration/test_executor_faults.py."""

from __future__ import annotations

import asyncio
import logging

import pytest
from temporalio.exceptions import ActivityError, CancelledError, FailureError, RetryState

from wf_initiation.workflows import _tasks
from wf_initiation.workflows._tasks import TaskFault, Tasks


async def _raise(exc: BaseException) -> None:
    raise exc


async def _settle(tasks: list[asyncio.Task[None]]) -> None:
    await asyncio.wait(tasks)
    await asyncio.sleep(0)  # done callbacks run on the next loop iteration


async def test_the_first_fault_is_kept_with_its_cause_and_wakes_the_loop() -> None:
    pokes: list[bool] = []
    tasks = Tasks(fails_task=lambda: True, poke=lambda: pokes.append(True))
    first, second = RuntimeError("injected bug"), KeyError("k")
    await _settle([tasks.spawn(_raise(first), "start runs"), tasks.spawn(_raise(second), "watch runs")])
    with pytest.raises(TaskFault, match="^start runs failed: RuntimeError: injected bug. This is a bug") as raised:
        tasks.check()
    assert raised.value.__cause__ is first and pokes == [True, True]
    assert not isinstance(raised.value, FailureError), "a FailureError would fail the activation, not its task"


async def test_cancellations_and_clean_endings_are_not_faults() -> None:
    tasks = Tasks(fails_task=lambda: True, poke=lambda: pytest.fail("nothing to wake the loop for"))
    cancelled_activity = ActivityError("cancelled", scheduled_event_id=1, started_event_id=2, identity="w",
                                       activity_type="a", activity_id="1", retry_state=RetryState.CANCEL_REQUESTED)
    cancelled_activity.__cause__ = CancelledError("cancelled")
    sleeping = tasks.spawn(asyncio.Event().wait(), "deadline")  # never ends by itself: cancelled below
    done = [tasks.spawn(asyncio.sleep(0), "publish lifecycle"), tasks.spawn(_raise(cancelled_activity), "poll p")]
    sleeping.cancel()
    await _settle([sleeping, *done])
    tasks.check()
    assert tasks.fault is None


async def test_a_run_of_an_earlier_build_logs_the_fault_and_goes_on(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # workflow.logger needs a workflow's event loop; its records go to the same place.
    monkeypatch.setattr(_tasks.workflow, "logger", logging.getLogger("temporalio.workflow"))
    tasks = Tasks(fails_task=lambda: False, poke=lambda: pytest.fail("an earlier build never woke the loop for it"))
    with caplog.at_level(logging.ERROR):
        await _settle([tasks.spawn(_raise(RuntimeError("old bug")), "signal run")])
    tasks.check()
    assert "signal run failed" in caplog.text and "old bug" in caplog.text
