"""The hostile-input conformance cases (issue 11), run against this project's own worker."""

from __future__ import annotations

import pathlib

from temporalio.worker import Worker

from wf_initiation.conformance.kit import Target, collect, run_cases
from wf_initiation.plugin import WfiPlugin


async def test_the_hostile_input_conformance_cases_pass_against_this_project(dev_env, task_queue: str, tmp_path: pathlib.Path) -> None:
    # proves: EXT-2, EXT-8, EXT-9, EXT-10, INIT-7, SCHED-5, SCHED-9, BATCH-8
    address = dev_env.client.service_client.config.target_host
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(f"temporal: {{address: '{address}', namespace: default, task_queue: {task_queue}}}\n")
    target = Target.from_file(deployment, tmp_path / "work")
    cases = collect(["wf_initiation.conformance.cases.hostile"])
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        report = await run_cases(target, cases, timeout=300)
    assert report.failures() == [], report.failures()
    passed = [c for cap in report.capabilities for c in cap.cases if c.outcome == "passed"]
    assert len(passed) == len(cases), [c.id for c in passed]
