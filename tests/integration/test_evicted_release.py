"""A run the worker evicts lets go of its ids at once (``ActivationWorkflow._release_when_evicted``).

A run that continued as new is evicted from the worker's cache, but its objects are in reference
cycles: without the release its engine, every id it held, stays in the worker until Python's next
full collection, while the next run loads the same ids (bench/bench_memory.py: the filling worker's
peak 370 -> 300 bytes per id). Here Python's collector is off, so what the evicted run kept is
still there to look at.
"""

from __future__ import annotations

import gc
import pathlib

from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import Disposition, Engine
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire.names import workflow_id_for

IDS = 300
WORKFILE = """
name: {name}
on:
  http.request: {{}}
  when: "{{{{ request.body.keep }}}}"
"""


def _engines(name: str) -> list[Engine]:
    return [o for o in gc.get_objects() if isinstance(o, Engine) and o.spec.workflow == name]


def _retained(engine: Engine) -> int:
    return int(engine.capacity()["retained_ids"])


async def test_an_evicted_run_holds_no_id_while_the_next_run_holds_them_all(dev_env, task_queue: str, tmp_path: pathlib.Path) -> None:
    # proves: EXT-3
    name = unique("evicted")
    spec = make_spec(tmp_path, WORKFILE.format(name=name), task_queue=task_queue)
    rebound = make_spec(tmp_path, WORKFILE.format(name=name), task_queue=task_queue, max_history_events=3000)
    assert rebound.activation_id != spec.activation_id, "the rebinding must be a new binding"
    gc.collect()
    gc.disable()
    try:
        async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin()]):
            wfi = WfiClient(dev_env.client, task_queue=task_queue)
            await wfi.activate(spec)
            results = await wfi.deliver_many(name, [(None, {"delivery_id": f"d{i}", "method": "POST", "body": {"keep": False}})
                                                    for i in range(IDS)])
            assert {r.disposition for r in results} == {Disposition.SUPPRESSED}
            first = await dev_env.client.get_workflow_handle(workflow_id_for(name)).describe()
            await wfi.activate(rebound)  # the run records the rebinding and continues as new

            async def continued() -> None:
                assert (await dev_env.client.get_workflow_handle(workflow_id_for(name)).describe()).run_id != first.run_id
                assert (await wfi.state(name))["activation_id"] == rebound.activation_id

            await assert_eventually(continued, timeout=60)

            async def released() -> None:  # the eviction is an activation of its own, which may come later
                engines = _engines(name)
                assert len(engines) >= 2, "the evicted run's engine is still in memory (the collector is off)"
                held = sorted(_retained(e) for e in engines)
                assert held[-1] >= IDS, f"the current run holds the {IDS} ids: {held}"
                assert held[:-1] == [0] * (len(held) - 1), f"an evicted run still holds ids: {held}"

            await assert_eventually(released, timeout=30)
            again = await wfi.deliver(name, {"delivery_id": "d1", "method": "POST", "body": {"keep": False}})
            assert again.disposition == Disposition.DUPLICATE
            fresh = await wfi.deliver(name, {"delivery_id": "new", "method": "POST", "body": {"keep": True}})
            assert fresh.disposition == Disposition.ACCEPTED and fresh.run_key
    finally:
        gc.enable()
