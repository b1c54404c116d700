"""`wfi conformance run` against the README's own examples/deployment.yaml passes, and leaves
nothing running in the namespace (docs/conformance.md, "what it leaves behind").

The run gets a dev server of its own, so "nothing running" is checked over the whole namespace,
not only over what the kit knows it started.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.conftest import DEV_SERVER_ARGS, ROOT, _converter, binary
from wf_initiation.conformance import CAPABILITIES, Report
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire.search_attributes import ALL as SEARCH_ATTRIBUTES

WFI = (sys.executable, "-c", "import sys; from wf_initiation.cli import main; sys.exit(main(sys.argv[1:]))")
EXAMPLES = ROOT / "examples" / "deployment.yaml"


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the whole kit: ~4 min alone, 12 min on a 2-core machine shared with other test runs
async def test_the_kit_passes_against_the_example_deployment_and_leaves_nothing_running(tmp_path) -> None:
    # proves: CAP-9
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=binary("temporal"), search_attributes=list(SEARCH_ATTRIBUTES),
        dev_server_extra_args=DEV_SERVER_ARGS, data_converter=_converter(),
    )
    try:
        client = env.client
        address = client.service_client.config.target_host
        out = tmp_path / "report"
        # The example deployment's queue, served as `wfi up` would: activations, sample runs.
        async with Worker(client, task_queue="wfi-activations", plugins=[WfiPlugin(sample_runs=True)]):
            proc = await asyncio.to_thread(
                subprocess.run, [*WFI, "conformance", "run", "--deployment", str(EXAMPLES), "--out", str(out), "--json"],
                capture_output=True, text=True, timeout=1500, env={**os.environ, "TEMPORAL_ADDRESS": address},
            )
        report = Report.model_validate_json(proc.stdout)
        failures = [(c.id, c.message) for c in report.failures()]
        assert proc.returncode == 0 and not failures, failures or proc.stderr[-2000:]
        assert report.claims == list(CAPABILITIES)
        cases = [c for cap in report.capabilities for c in cap.cases]
        assert not [c.cleanup for c in cases if "problem" in c.cleanup], "every case cleaned up"
        assert "Traceback" not in (out / "report.md").read_text()

        running = [f"{wf.workflow_type} {wf.id}" async for wf in client.list_workflows("ExecutionStatus = 'Running'")]
        assert running == [], f"left running in the namespace: {running}"
        # Every activation run ended by its deactivation (Completed), or continued as new (a rebind):
        # none had to be terminated by the kit's last-resort sweep.
        ended = {WorkflowExecutionStatus.COMPLETED, WorkflowExecutionStatus.CONTINUED_AS_NEW}
        activations = [wf async for wf in client.list_workflows("WorkflowType = 'wfi.Activation'")]
        not_deactivated = [(wf.id, wf.status) for wf in activations if wf.status not in ended]
        assert len(activations) >= 20 and not_deactivated == [], not_deactivated
    finally:
        await env.shutdown()
