"""The stale-activation check (workflows/_fresh.py) on its own: which activation pairs it refuses."""

from __future__ import annotations

import uuid

import pytest
from temporalio import workflow
from temporalio.client import WorkflowQueryFailedError
from temporalio.worker import Worker

from wf_initiation import _uncached
from wf_initiation._sdk import query_failure_type
from wf_initiation.client import WfiClient
from wf_initiation.errors import QueryFailed
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import STALE_ACTIVATION, StaleActivationError
from wf_initiation.workflows._fresh import is_stale

T = 1_796_000_000_000_000_000  # ns


@pytest.mark.parametrize(
    ("before", "after", "replaying", "stale"),
    [
        ((18, T), (22, T), False, True),  # trailing events of a query task: history grew, time did not
        ((18, T), (22, T), True, False),  # a replay never refuses (the Replayer, a cache miss)
        ((18, T), (23, T + 1), False, False),  # a new workflow task starts later
        ((18, T), (18, T), False, False),  # another activation of the same task (local activity result)
        ((20, T), (18, T), False, False),  # a rejected speculative task's event ids reused
    ],
)
def test_only_an_activation_whose_history_grew_at_the_same_instant_is_refused(before, after, replaying, stale) -> None:
    assert is_stale(before, after, replaying=replaying) is stale


# --- the refusal is recognised by its failure type, not its text (issue 14 item 2) -------------

REFUSALS = {"left": 0}


class LookalikeError(RuntimeError):
    """Fails an activation with the refusal's words but not its type."""


@workflow.defn(name="wfi-test.StaleOnQuery", sandboxed=False)
class StaleOnQuery:
    """Fails every activation while REFUSALS["left"] > 0 (each failure counts one down)."""

    @workflow.run
    async def run(self, lookalike: bool) -> None:
        def refuse() -> bool:
            if REFUSALS["left"] > 0:
                REFUSALS["left"] -= 1
                error = LookalikeError if lookalike else StaleActivationError
                raise error("stale activation: built from a query task's trailing events at a stale time")
            return False

        await workflow.wait_condition(refuse)

    @workflow.query
    def answer(self) -> str:
        return "answered"


async def test_a_stale_activation_refusal_is_recognised_by_its_type_and_retried(dev_env, task_queue: str) -> None:
    # proves: SCHED-5
    client = dev_env.client
    wfi = WfiClient(client, task_queue=task_queue, max_attempts=20)
    # No cache: every query replays the run, so the refusing predicate runs for the query's activation.
    async with Worker(client, task_queue=task_queue, workflows=[StaleOnQuery], max_cached_workflows=0):
        for lookalike, expected in ((False, STALE_ACTIVATION), (True, "LookalikeError")):
            handle = await client.start_workflow(StaleOnQuery.run, lookalike, id=f"stale-{uuid.uuid4()}", task_queue=task_queue)
            assert await handle.query(StaleOnQuery.answer) == "answered"
            REFUSALS["left"] = 1
            with pytest.raises(WorkflowQueryFailedError) as failed:
                await handle.query(StaleOnQuery.answer)
            assert query_failure_type(failed.value) == expected
            assert "stale activation:" in failed.value.message  # the same words either way
            await handle.terminate()
        # The client retries the refusal (the next activation passes) and nothing that only looks like it.
        handle = await client.start_workflow(StaleOnQuery.run, False, id=f"stale-{uuid.uuid4()}", task_queue=task_queue)
        assert await handle.query(StaleOnQuery.answer) == "answered"  # its first workflow task is done
        REFUSALS["left"] = 2
        assert await wfi._retry(lambda: handle.query(StaleOnQuery.answer)) == "answered"
        assert REFUSALS["left"] == 0
        lookalike = await client.start_workflow(StaleOnQuery.run, True, id=f"stale-{uuid.uuid4()}", task_queue=task_queue)
        assert await lookalike.query(StaleOnQuery.answer) == "answered"
        REFUSALS["left"] = 1
        with pytest.raises(QueryFailed) as lookalike_failed:
            await wfi._retry(lambda: lookalike.query(StaleOnQuery.answer))
        assert not lookalike_failed.value.retryable and lookalike_failed.value.failure_type == "LookalikeError"
        REFUSALS["left"] = 0
        for h in (handle, lookalike):
            await h.terminate()


async def test_the_guard_stands_down_on_a_worker_without_a_workflow_cache(dev_env) -> None:
    # Without a cache a stale activation's commands are discarded with the run, and failing it wedged
    # the run in the SDK (wf_initiation/_uncached.py; reproduced by docs/upstream/uncached_query_wedge.py).
    # The plugin records each worker's choice by task queue; the guard reads it inside the sandbox.
    cached, uncached = f"tq-{uuid.uuid4()}", f"tq-{uuid.uuid4()}"
    async with Worker(dev_env.client, task_queue=cached, plugins=[WfiPlugin()]), \
            Worker(dev_env.client, task_queue=uncached, plugins=[WfiPlugin()], max_cached_workflows=0):
        assert not _uncached.uncached(cached)
        assert _uncached.uncached(uncached)
    async with Worker(dev_env.client, task_queue=uncached, plugins=[WfiPlugin()]):
        assert not _uncached.uncached(uncached), "a later worker with a cache on that queue turns the guard back on"
