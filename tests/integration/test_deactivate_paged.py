"""Deactivating an activation with more running runs than Temporal lets one workflow have pending
activities (issue 32, item 4): the runs are cancelled in pages (``core.engine.Dispatcher``), and
``wfi deactivate --wait`` shows how far that got, as a backfill's progress is shown.

Temporal's default limit is 2,000 pending activities per workflow. Starting 2,100 runs takes long on
a 2-core machine, so this test runs a dev server of its own with the limit lowered to 50
(``limit.numPendingActivities.error=50``) and deactivates 120 running runs: more than twice the
limit, which one activity per run (the behaviour before the pages) could never get past: the
server refused the activation's workflow task every time (``PendingActivitiesLimitExceeded``).
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import subprocess
import sys

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.support.activation import unique
from tests.support.replay import assert_replays
from tests.support.runs import describe_or_none
from tests.support.temporal import DEV_SERVER_ARGS, binary, converter
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import workflow_id_for
from wf_initiation.wire.search_attributes import ALL as SEARCH_ATTRIBUTES

WFI = (sys.executable, "-c", "import sys; from wf_initiation.cli import main; sys.exit(main(sys.argv[1:]))")
PENDING_ACTIVITIES_LIMIT = 50
RUNS = 120


@pytest.fixture
async def limited_env():
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=binary("temporal"), search_attributes=list(SEARCH_ATTRIBUTES), data_converter=converter(),
        dev_server_extra_args=[*DEV_SERVER_ARGS, "--dynamic-config-value",
                               f"limit.numPendingActivities.error={PENDING_ACTIVITIES_LIMIT}"])
    try:
        yield env
    finally:
        await env.shutdown()


def _deployment(tmp_path: pathlib.Path, address: str, task_queue: str, name: str) -> pathlib.Path:
    workfile = tmp_path / "hook.workfile.yaml"
    workfile.write_text(f"name: {name}\non:\n  http.request: {{path: /hooks}}\n  as: hook\n")
    path = tmp_path / "deployment.yaml"
    path.write_text(json.dumps({
        "temporal": {"address": address, "namespace": "default", "task_queue": task_queue},
        "workflows": {name: {"workfile": str(workfile), "run": {"workflow_type": "wfi.EchoRun", "task_queue": task_queue}}},
    }))
    return path


async def wfi_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(subprocess.run, [*WFI, *args], capture_output=True, text=True, timeout=170)


async def running(client: Client, name: str) -> int:
    return (await client.count_workflows(f"WfiWorkflow = '{name}' AND ExecutionStatus = 'Running' "
                                         f"AND WorkflowType = 'wfi.EchoRun'")).count


async def test_cancelling_more_running_runs_than_the_pending_activities_limit_goes_in_pages_with_progress(
        limited_env, tmp_path: pathlib.Path) -> None:
    client, name, task_queue = limited_env.client, unique("deact-paged"), unique("tq")
    deployment = str(_deployment(tmp_path, client.service_client.config.target_host, task_queue, name))
    target = ("--workflow", name, "--deployment", deployment)
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        assert (await wfi_cli("activate", str(tmp_path / "hook.workfile.yaml"), "--deployment", deployment)).returncode == 0
        wfi = WfiClient(client, task_queue=task_queue)
        results = await wfi.deliver_many(name, [("hook", {"delivery_id": f"h{i}", "method": "POST", "body": {"hold": True}})
                                                for i in range(RUNS)])
        keys = [r.run_key for r in results]
        assert len(set(keys)) == RUNS and None not in keys

        async def all_running() -> None:
            assert (await wfi.summary(name))["runs_running"] == RUNS
            assert await running(client, name) == RUNS

        await assert_eventually(all_running, timeout=120)

        waited = await wfi_cli("deactivate", "--cancel-queued", "--running", "cancel", "--wait", "--timeout", "150", *target)
        assert waited.returncode == 0, waited.stdout + waited.stderr
        assert f"{name}: deactivated at" in waited.stdout and f"{RUNS} running run(s) cancelled" in waited.stdout
        shown = [line for line in waited.stdout.splitlines() if "; cancel: " in line]
        assert shown, f"no progress of the cancellations shown:\n{waited.stdout}"
        assert all(f" of {RUNS} (" in line for line in shown), shown
        for key in keys[:: RUNS // 6]:
            assert (await client.get_workflow_handle(key).describe()).status == WorkflowExecutionStatus.CANCELED
        final = await wfi._handle(name).result()
        assert final.deactivation["controls_applied"] == RUNS and len(final.deactivation["controlled"]) == RUNS

        async def nothing_running() -> None:
            assert await running(client, name) == 0

        await assert_eventually(nothing_running, timeout=30)

        # Activated again, it takes a normal delivery and starts its run.
        assert (await wfi_cli("activate", str(tmp_path / "hook.workfile.yaml"), "--deployment", deployment)).returncode == 0
        fresh = await wfi.deliver(name, {"delivery_id": "after", "method": "POST", "body": {}}, entry="hook")
        assert fresh.disposition == "accepted"

        async def its_run_completed() -> None:
            desc = await describe_or_none(client, fresh.run_key)
            assert desc is not None and desc.status == WorkflowExecutionStatus.COMPLETED

        await assert_eventually(its_run_completed, timeout=60)
    await assert_replays(client, workflow_id_for(name))
