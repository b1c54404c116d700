"""The external-event conformance cases, run against this project's own worker."""

from __future__ import annotations

import pathlib

from temporalio.worker import Worker

from wf_initiation.conformance.kit import Target, collect, run_cases
from wf_initiation.plugin import WfiPlugin


async def test_the_external_event_conformance_cases_pass_against_this_project(dev_env, task_queue: str, tmp_path: pathlib.Path) -> None:
    # proves: EXT-1, EXT-2, EXT-3, EXT-4, EXT-5, EXT-9, EXT-10, EXT-11, EXT-12, EXT-13, TRIG-8, TRIG-9, TRIG-11, TRIG-13, TRIG-14, INIT-3, INIT-4, INIT-5, INIT-6
    address = dev_env.client.service_client.config.target_host
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(f"temporal: {{address: '{address}', namespace: default, task_queue: {task_queue}}}\n")
    target = Target.from_file(deployment, tmp_path / "work")
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        report = await run_cases(target, collect(["wf_initiation.conformance.cases.external"]), timeout=120)
    assert report.failures() == [], report.failures()
    passed = [c for cap in report.capabilities for c in cap.cases if c.outcome == "passed"]
    assert len(passed) == 4, [c.id for c in passed]
