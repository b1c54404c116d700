"""WfiPlugin keeps the user's workflow runner: a sandboxed one with everything it sets (restrictions,
runner_class), only wf-initiation's modules added to its pass-through list; an unsandboxed one as it is.
The runner of workflows outside the sandbox (the activation workflow's): the SDK's own holds no view into
a run's first activation (workflows/_start_input.py); a team's own is kept."""

from __future__ import annotations

import uuid

from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from tests.support.activation import make_spec, unique
from wf_initiation.client import WfiClient
from wf_initiation.plugin import PASSTHROUGH_MODULES, WfiPlugin
from wf_initiation.workflows._start_input import DetachedUnsandboxedRunner


class TeamRunner(UnsandboxedWorkflowRunner):
    """A team's own inner runner (e.g. one that profiles workflow code), chosen through runner_class."""


def _configured(dev_env, runner, key: str = "workflow_runner") -> object:
    worker = Worker(dev_env.client, task_queue=f"tq-{uuid.uuid4()}", plugins=[WfiPlugin()], **({key: runner} if runner else {}))
    return worker.config(active_config=True)[key]


async def test_a_sandboxed_runner_of_the_user_keeps_its_runner_class_and_restrictions(dev_env) -> None:
    mine = SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules("team_shared_models"), runner_class=TeamRunner)
    runner = _configured(dev_env, mine)
    assert isinstance(runner, SandboxedWorkflowRunner)
    assert runner.runner_class is TeamRunner
    assert {"team_shared_models", *PASSTHROUGH_MODULES} <= set(runner.restrictions.passthrough_modules)
    assert runner.restrictions.invalid_module_members == mine.restrictions.invalid_module_members


async def test_no_runner_gets_the_default_sandbox_and_an_unsandboxed_one_is_kept(dev_env) -> None:
    default = _configured(dev_env, None)
    assert isinstance(default, SandboxedWorkflowRunner) and set(PASSTHROUGH_MODULES) <= set(default.restrictions.passthrough_modules)
    unsandboxed = UnsandboxedWorkflowRunner()
    assert _configured(dev_env, unsandboxed) is unsandboxed


async def test_the_sdk_s_runner_outside_the_sandbox_becomes_the_detached_one_and_a_team_s_own_is_kept(dev_env) -> None:
    assert type(_configured(dev_env, None, "unsandboxed_workflow_runner")) is DetachedUnsandboxedRunner
    assert type(_configured(dev_env, UnsandboxedWorkflowRunner(), "unsandboxed_workflow_runner")) is DetachedUnsandboxedRunner
    mine = TeamRunner()
    assert _configured(dev_env, mine, "unsandboxed_workflow_runner") is mine


async def test_an_activation_runs_and_takes_a_delivery_with_the_users_runner_class(dev_env, task_queue: str, tmp_path) -> None:
    name = unique("runner")
    spec = make_spec(tmp_path, f"name: {name}\non:\n  mail.received: {{inbox: help@acme.com}}\n  as: message\n",
                     task_queue=task_queue)
    runner = SandboxedWorkflowRunner(runner_class=TeamRunner)
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)], workflow_runner=runner):
        wfi = WfiClient(dev_env.client, task_queue=task_queue)
        await wfi.activate(spec)
        result = await wfi.deliver(name, {"message_id": "m1", "from": "a@b.c", "recipient": "help@acme.com", "subject": "hi"})
        assert result.disposition.value == "accepted"
