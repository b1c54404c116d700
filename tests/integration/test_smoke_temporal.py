"""Both real servers run a workflow with an activity (no mock of Temporal anywhere)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker


@activity.defn
async def shout(text: str) -> str:
    return text.upper()


@workflow.defn
class SmokeNoSleep:
    """The dev server does not skip time: no sleep here."""

    @workflow.run
    async def run(self, text: str) -> str:
        return await workflow.execute_activity(shout, text, start_to_close_timeout=timedelta(seconds=10))


@workflow.defn
class SmokeWorkflow:
    @workflow.run
    async def run(self, text: str) -> str:
        await workflow.sleep(timedelta(hours=1))
        return await workflow.execute_activity(shout, text, start_to_close_timeout=timedelta(seconds=10))


async def _run(env: WorkflowEnvironment, task_queue: str) -> str:
    async with Worker(env.client, task_queue=task_queue, workflows=[SmokeWorkflow], activities=[shout]):
        return await env.client.execute_workflow(SmokeWorkflow.run, "hi", id=f"smoke-{task_queue}", task_queue=task_queue)


async def test_dev_server_runs_a_workflow_with_an_activity(dev_env: WorkflowEnvironment, task_queue: str) -> None:
    async with Worker(dev_env.client, task_queue=task_queue, workflows=[SmokeNoSleep], activities=[shout]):
        result = await dev_env.client.execute_workflow(
            SmokeNoSleep.run, "hi", id=f"smoke-{task_queue}", task_queue=task_queue
        )
    assert result == "HI"


async def test_time_skipping_server_skips_an_hour_and_runs_an_activity(ts_env: WorkflowEnvironment, task_queue: str) -> None:
    assert await _run(ts_env, task_queue) == "HI"
