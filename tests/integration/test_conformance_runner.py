"""The conformance runner reports a failing case in one readable line and cleans up after every
case, passed, failed, crashed or timed out (docs/conformance.md)."""

from __future__ import annotations

import asyncio
import json
import pathlib

from temporalio.client import WorkflowExecutionStatus
from temporalio.worker import Worker

from tests.support.runs import describe_or_none
from wf_initiation.conformance import EXTERNAL, CaseFailed, Target, case, check, run_cases
from wf_initiation.core._diagnostics import Diagnostic, DiagnosticError
from wf_initiation.plugin import WfiPlugin

HOOK = "name: {name}\non:\n  http.request: {{path: /hooks}}\n  as: hook\n  queue_by: \"{{{{ hook.body.key }}}}\"\n"


def offline_target(tmp_path: pathlib.Path) -> Target:
    path = tmp_path / "deployment.yaml"
    path.write_text("temporal: {address: '127.0.0.1:1', namespace: default}\n")
    return Target.from_file(path, tmp_path / "work")


async def test_a_failing_or_crashing_case_is_reported_in_one_readable_line(tmp_path: pathlib.Path) -> None:
    async def fails(t: Target) -> None:
        raise CaseFailed("`wfi activate` failed:\nexit 1\n--- stderr\nsomething went wrong")

    async def crashes(t: Target) -> None:
        raise DiagnosticError([Diagnostic(code="TRIG-CONNECTION-AMBIGUOUS", message="two connections\nfor http")])

    cases = [case(capability=EXTERNAL, clauses=["EXT-1"])(fails), case(capability=EXTERNAL, clauses=["EXT-2"])(crashes)]
    report = await run_cases(offline_target(tmp_path), cases)
    failed, crashed = report.failures()
    assert (failed.message, failed.detail) == ("`wfi activate` failed:", "exit 1\n--- stderr\nsomething went wrong")
    assert crashed.outcome == "error" and "\n" not in crashed.message and "Traceback" not in crashed.message
    assert crashed.message.startswith("DiagnosticError: error TRIG-CONNECTION-AMBIGUOUS: two connections for http (at ")
    assert (failed.cleanup, crashed.cleanup) == ("", ""), "a case that touched no Temporal needs no cleanup"


async def test_the_runner_deactivates_and_ends_what_a_failing_or_hanging_case_left(dev_env, task_queue: str,
                                                                                   tmp_path: pathlib.Path) -> None:
    address = dev_env.client.service_client.config.target_host
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(f"temporal: {{address: '{address}', namespace: default, task_queue: {task_queue}}}\n")
    target = Target.from_file(deployment, tmp_path / "work")
    left: dict[str, str] = {}

    async def leave_things_running(t: Target) -> None:
        name = t.unique("hook")
        pair = t.write_pair(name, HOOK.format(name=name), {"run": {"workflow_type": "wfi.EchoRun", "task_queue": task_queue}})
        await t.activate(pair)
        for ident in ("h1", "h2"):  # h1 holds its key, h2 queues behind it
            payload = json.dumps({"delivery_id": ident, "method": "POST", "body": {"key": "k", "hold": True}})
            result = await t.wfi("deliver", "--payload", payload, "--workflow", name, "--deployment", str(pair.deployment), "--json")
            left[ident] = result.json()["run_key"]
        stray = await (await t.client()).start_workflow("wfi.EchoRun", {"bindings": {}}, id=t.unique("stray"),
                                                         task_queue=t.unique("nobody-serves"))
        left["stray"], left["activation"] = stray.id, f"wfi-activation:{name}"

    async def fails(t: Target) -> None:
        await leave_things_running(t)
        check(False, "this case fails after starting things")

    async def hangs(t: Target) -> None:
        await leave_things_running(t)
        await asyncio.Event().wait()

    client = dev_env.client
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        for fn, timeout in ((fails, 120), (hangs, 60)):
            left.clear()
            report = await run_cases(target, [case(capability=EXTERNAL, clauses=["EXT-1"])(fn)], timeout=timeout)
            [result] = report.failures()
            assert result.cleanup.startswith("deactivated 1 activation(s); terminated 1 workflow(s) left running: "
                                             f"{left['stray']}"), result.cleanup
            activation = await describe_or_none(client, left["activation"])
            assert activation.status == WorkflowExecutionStatus.COMPLETED, "ended by its deactivation"
            assert (await describe_or_none(client, left["h1"])).status == WorkflowExecutionStatus.TERMINATED
            assert await describe_or_none(client, left["h2"]) is None, "the queued run was dropped, never started"
            assert (await describe_or_none(client, left["stray"])).status == WorkflowExecutionStatus.TERMINATED
            running = await client.count_workflows(f"ExecutionStatus = 'Running' AND WorkflowId STARTS_WITH '{target.tag}'")
            assert running.count == 0
