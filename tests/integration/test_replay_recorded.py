"""A history recorded now on the dev server replays with the current build (split from tests/core/test_replay.py,
which replays the histories kept in tests/histories/ without a server)."""

from __future__ import annotations

import pathlib

from temporalio.client import WorkflowExecutionStatus
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.replay import replay_failure
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.plugin import WfiPlugin


async def test_a_recorded_activation_history_replays_without_nondeterminism(dev_env, task_queue: str, tmp_path: pathlib.Path) -> None:
    # proves: INIT-7
    name = unique("replay")
    spec = make_spec(tmp_path, f"""
        name: {name}
        on:
          http.request: {{}}
          when: "{{{{ request.body.go }}}}"
          queue_by: "{{{{ request.body.key }}}}"
    """, task_queue=task_queue)
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(dev_env.client, task_queue=task_queue)
        await wfi.activate(spec)
        for i in range(12):
            await wfi.deliver(name, {"delivery_id": f"r{i}", "method": "POST", "body": {"go": i % 4 != 0, "key": f"k{i % 2}"}})
        await wfi.signal_delivery(name, {"delivery_id": "sig", "method": "POST", "body": {"go": True, "key": "k0"}})

        async def settled() -> None:
            summary = await wfi.summary(name)
            assert summary["runs_pending"] == summary["runs_starting"] == summary["runs_running"] == 0, summary

        await assert_eventually(settled, timeout=60)
        history = await wfi._handle(name).fetch_history()
    assert (await wfi._handle(name).describe()).status == WorkflowExecutionStatus.RUNNING
    assert len(history.events) > 50, "a history with deliveries, starts, watches and publishes"
    failure = await replay_failure(history)
    assert failure is None, failure
