"""A grouping WfiClient against a real activation (split from tests/core/test_grouping.py: the test
runs a worker on the session's dev server)."""

from __future__ import annotations

import asyncio
import pathlib

from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.hostile import HOOK, histories, hook, still_serves
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import Disposition
from wf_initiation.plugin import WfiPlugin


async def test_a_grouping_client_takes_many_concurrent_deliveries_in_few_updates(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-3, EXT-8
    client = dev_env.client
    name = unique("grouped")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        plain = WfiClient(client, task_queue=task_queue)
        await plain.activate(make_spec(tmp_path, HOOK.format(name=name, extra='  when: "{{ hook.body.go }}"'),
                                       task_queue=task_queue))
        grouped = WfiClient(client, task_queue=task_queue, group_deliveries=True)
        results = await asyncio.gather(*(grouped.deliver(name, hook(f"g-{i}", go=i % 10 == 0)) for i in range(100)))
        assert [r.delivery_id for r in results] == [f"g-{i}" for i in range(100)]
        assert [r.disposition.value for r in results] == ["accepted" if i % 10 == 0 else "suppressed" for i in range(100)]
        again = await grouped.deliver(name, hook("g-0", go=True))
        assert again.disposition == Disposition.DUPLICATE, "sent again later: judged again, as a new caller's would be"
        updates = sum(e.HasField("workflow_execution_update_accepted_event_attributes")
                      for h in await histories(client, name) for e in h.events)
        assert updates <= 40, f"{updates} updates for 101 deliveries (and the activation)"
        await still_serves(plain, client, name, go=True)
