"""`wfi.control_run` (issue 18 item 4): a cancel or terminate the activation decided is never dropped.

Only the server's definite answer that the run is not open (``NOT_FOUND``) is final; any other
error (the server unreachable, restarting) fails the attempt and the activity is retried, so under
``cancel_other`` / ``terminate_other`` the older run does end and the newer one does start.
"""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import ActivityEnvironment
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor, Worker

from tests.support.activation import make_spec, unique
from tests.support.hostile import HOOK, hook, run_started, still_serves
from tests.support.restart import connect
from tests.support.runs import describe_or_none
from tests.support.temporal import DEV_SERVER_ARGS, binary
from tests.support.waits import assert_eventually
from tests.support.worker_proc import DevServerProcess, free_port
from wf_initiation.activities.runs import RunActivities
from wf_initiation.client import WfiClient
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import CONTROL_RUNS_ACTIVITY, ControlRequest

OUTAGE_S = 20.0  # the longest the outage lasts: the call must give up within it


class HeldControl(Interceptor):
    """Holds the first ``wfi.control_runs`` attempt (a page of runs to control) at its start until the test has stopped the server,
    and records how each attempt ended (its result, or the error it raised)."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.server_down = asyncio.Event()
        self.attempts: list[tuple[int, str]] = []

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Inbound(next, self)


class _Inbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, hold: HeldControl) -> None:
        super().__init__(next)
        self._hold = hold

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        if info.activity_type != CONTROL_RUNS_ACTIVITY:
            return await self.next.execute_activity(input)
        if info.attempt == 1:
            self._hold.started.set()
            await self._hold.server_down.wait()
        try:
            result = await self.next.execute_activity(input)
        except Exception as exc:
            self._hold.attempts.append((info.attempt, f"raised {type(exc).__name__}"))
            raise
        self._hold.attempts.append((info.attempt, f"returned {result}"))
        return result


@pytest.mark.crash
@pytest.mark.parametrize("overlap", ["cancel_other", "terminate_other"])
async def test_a_control_meeting_an_unreachable_server_is_retried_until_applied(tmp_path: pathlib.Path, overlap: str) -> None:
    server = DevServerProcess(binary("temporal"), str(tmp_path / "temporal.db"), free_port(), DEV_SERVER_ARGS)
    server.start()
    try:
        client = await connect(server.address)
        task_queue, name = unique("control"), unique("control")
        hold = HeldControl()
        async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)], interceptors=[hold]):
            wfi = WfiClient(client, task_queue=task_queue, max_attempts=400)
            await wfi.activate(make_spec(tmp_path, HOOK.format(name=name, extra=""), task_queue=task_queue, overlap=overlap))
            older = await wfi.deliver(name, hook("older", hold=True))
            await run_started(client, older.run_key)
            newer = await wfi.deliver(name, hook("newer"))
            assert newer.disposition.value in ("accepted", "queued"), newer
            await asyncio.wait_for(hold.started.wait(), timeout=60)
            # The call is made with the server gone and gives up within the outage (the client's own
            # retries last ~10 s); the server comes back only then, so the attempt's report reaches
            # it after the outage.
            _kill(server)
            hold.server_down.set()

            async def gave_up() -> None:
                assert hold.attempts, "the call has not given up yet"

            await assert_eventually(gave_up, timeout=OUTAGE_S)
            server.start()
            ended = WorkflowExecutionStatus.CANCELED if overlap == "cancel_other" else WorkflowExecutionStatus.TERMINATED
            await assert_eventually(_status_is(client, older.run_key, ended), timeout=120, interval=0.5)

            # The run ends when the server applies the control, a moment before the attempt that
            # asked for it returns and is recorded: wait for the record, not only for the run.
            async def applied() -> None:
                assert hold.attempts[-1][1] == "returned ['applied']", hold.attempts

            await assert_eventually(applied, timeout=30)
            assert hold.attempts[0] == (1, "raised RPCError"), hold.attempts
            await run_started(client, newer.run_key or "", timeout=120)
            await assert_eventually(_status_is(client, newer.run_key or "", WorkflowExecutionStatus.COMPLETED), timeout=60)
            await assert_eventually(lambda: _no_run_in_flight(wfi, name), timeout=60)  # the watcher reported both
            await still_serves(wfi, client, name)
    finally:
        server.stop()


def _kill(server: DevServerProcess) -> None:
    assert server.proc is not None
    server.proc.kill()
    server.proc.wait(timeout=30)


async def _no_run_in_flight(wfi: WfiClient, name: str) -> None:
    assert (await wfi.state(name))["runs"] == {}


def _status_is(client: Any, run_key: str, status: WorkflowExecutionStatus) -> Any:
    async def check() -> None:
        desc = await describe_or_none(client, run_key)
        assert desc is not None and desc.status == status, (run_key, desc and desc.status)

    return check


async def test_a_run_that_is_not_open_is_a_final_answer(dev_env) -> None:
    activities = RunActivities(dev_env.client)
    for action in ("cancel", "terminate"):
        request = ControlRequest(run_key=unique("no-such-run"), action=action, reason="r")
        answer = await ActivityEnvironment().run(activities.control_run, request)
        assert answer.startswith("not applied: the run is not open"), answer
