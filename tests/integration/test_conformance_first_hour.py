"""The conformance kit's first hour (issue 31, item 6): against a worker that lacks the sample run
types a case names the missing type at once, and SIGINT/SIGTERM to `wfi conformance run` deactivate
what the running case started before it exits."""

from __future__ import annotations

import asyncio
import pathlib
import signal

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.worker import Worker

from tests.support.cli import WFI, cli_env
from tests.support.waits import assert_eventually
from wf_initiation.conformance import run_cases
from wf_initiation.conformance.cases import MODULES
from wf_initiation.conformance.kit import Target, collect
from wf_initiation.plugin import WfiPlugin

CASE = "external.every_disposition_of_a_delivery_is_returned_and_recorded"
SLOW_CASE = "batching.a_batch_closes_at_max_wait_after_its_first_event_and_never_before"  # waits 20 s or more


def deployment(dev_env, task_queue: str, tmp_path: pathlib.Path) -> pathlib.Path:
    address = dev_env.client.service_client.config.target_host
    path = tmp_path / "deployment.yaml"
    path.write_text(f"temporal: {{address: '{address}', namespace: default, task_queue: {task_queue}}}\n"
                    "capabilities: [wf.external-event-initiation]\n")
    return path


async def test_a_worker_without_the_sample_runs_is_named_with_the_missing_type(dev_env, task_queue: str,
                                                                               tmp_path: pathlib.Path) -> None:
    cases = collect(MODULES)
    target = Target.from_file(deployment(dev_env, task_queue, tmp_path), tmp_path / "work")
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin()]):  # no sample_runs
        report = await run_cases(target, cases, only={CASE}, timeout=120)
    [failed] = report.failures()
    assert failed.outcome == "failed" and failed.duration_s < 60, failed
    assert failed.message.startswith(f"the worker on task queue {task_queue!r} does not register the workflow type "
                                      "'wfi.EchoRun'"), failed.message
    assert "WfiPlugin(sample_runs=True)" in failed.message
    running = await dev_env.client.count_workflows(f"ExecutionStatus = 'Running' AND WorkflowId STARTS_WITH '{target.tag}'")
    assert running.count == 0, "the probe is not left running"
    # The same case with the sample runs registered passes: its activation accepts and starts its runs.
    target = Target.from_file(deployment(dev_env, task_queue, tmp_path), tmp_path / "work2")
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        report = await run_cases(target, cases, only={CASE}, timeout=240)
    assert report.failures() == [], report.failures()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_deactivates_what_the_running_case_started(dev_env, task_queue: str, tmp_path: pathlib.Path,
                                                                 signum: signal.Signals) -> None:
    client = dev_env.client
    path = deployment(dev_env, task_queue, tmp_path)
    query = f"WorkflowId STARTS_WITH 'wfi-activation:wfc' AND TaskQueue = '{task_queue}'"
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        proc = await asyncio.create_subprocess_exec(
            *WFI, "conformance", "run", "--deployment", str(path), "--case", SLOW_CASE, "--out", str(tmp_path / "out"),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=cli_env(), cwd=tmp_path)
        try:
            async def an_activation_runs() -> list[str]:
                found = [wf.id async for wf in client.list_workflows(f"{query} AND ExecutionStatus = 'Running'")]
                assert found, "no activation of the case yet"
                return found

            [activation] = await assert_eventually(an_activation_runs, timeout=120)
            proc.send_signal(signum)
            out, err = await asyncio.wait_for(proc.communicate(), 150)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        text = err.decode()
        assert proc.returncode == 128 + signum, (proc.returncode, out.decode(), text)
        assert f"stopped by {signum.name}: interrupted during {SLOW_CASE}; deactivated 1 activation(s)" in text, text
        described = await client.get_workflow_handle(activation).describe()
        assert described.status == WorkflowExecutionStatus.COMPLETED, "ended by its deactivation, not terminated"
        tag = activation.removeprefix("wfi-activation:").split("-", 1)[0]
        running = await client.count_workflows(f"ExecutionStatus = 'Running' AND (WorkflowId STARTS_WITH '{tag}' OR "
                                               f"WorkflowId STARTS_WITH 'wfi-activation:{tag}')")
        assert running.count == 0
