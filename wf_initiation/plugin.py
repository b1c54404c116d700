"""`WfiPlugin`: add wf-initiation to a Temporal worker in one line.

    worker = Worker(client, task_queue="wfi-activations", plugins=[WfiPlugin()])

It registers the activation workflow, the run-start/outcome/control activities (bound to the
worker's client), the built-in poll connectors, and the pydantic data converter on the client.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.plugin import SimplePlugin
from temporalio.worker import WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from wf_initiation.activities.clock import wait_for_instant
from wf_initiation.activities.lifecycle import LifecycleActivities
from wf_initiation.activities.poll import poll_activities as resolve_poll_activities
from wf_initiation.activities.runs import RunActivities
from wf_initiation.workflows.activation import ActivationWorkflow
from wf_initiation.workflows.runapi import WaitForExample
from wf_initiation.workflows.sample_runs import EchoRun


# Pure, deterministic libraries the engine uses inside workflow code. Passed through the sandbox:
# they import lazily (jinja2 compiles templates on first use) and hold locks/caches that are safe.
# Only the project's own namespaced modules pass through (never a bare name a user's module could
# share, such as ``activities``): the pure core and the activity request models.
PASSTHROUGH_MODULES = (
    "wf_initiation.core", "wf_initiation.wire", "wf_initiation.activities", "jinja2", "markupsafe", "jsonschema",
    "jsonschema_specifications", "referencing", "rpds", "attrs", "croniter", "dateutil", "tzdata", "ruamel",
)


def _runner(existing: WorkflowRunner | None) -> WorkflowRunner:
    if existing is not None and not isinstance(existing, SandboxedWorkflowRunner):
        return existing  # the user chose an unsandboxed runner; nothing to add
    restrictions = existing.restrictions if isinstance(existing, SandboxedWorkflowRunner) else SandboxRestrictions.default
    return SandboxedWorkflowRunner(restrictions=restrictions.with_passthrough_modules(*PASSTHROUGH_MODULES))


class WfiPlugin(SimplePlugin):
    """Worker and client wiring of wf-initiation.

    Args:
        sample_runs: Also register ``wfi.EchoRun`` and ``wfi.WaitForExample`` (handy for trying things out).
        poll_activities: Extra poll connector activities of third-party connectors (those whose manifest
            names its ``implementation`` are registered without this).
    """

    def __init__(self, *, sample_runs: bool = True, poll_activities: Sequence[Callable[..., Any]] = ()) -> None:
        workflows: list[type] = [ActivationWorkflow, *([EchoRun, WaitForExample] if sample_runs else [])]
        super().__init__(
            "wf-initiation",
            data_converter=pydantic_data_converter,
            workflows=workflows,
            activities=[*resolve_poll_activities(extra=poll_activities), wait_for_instant],
            workflow_runner=_runner,
        )

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        config = super().configure_worker(config)
        config["activities"] = [*config.get("activities", []), *RunActivities(config["client"]).all(),
                                *LifecycleActivities(config["client"]).all()]
        return config
