"""A plain Temporal client (not WfiClient) cannot activate out of bounds: the activation refuses it and goes on
(split from tests/core/test_validate_bounds.py: a dev server)."""

from __future__ import annotations

import json
import pathlib

import pytest


async def test_a_plain_client_cannot_activate_out_of_bounds_and_the_activation_goes_on(
    dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: INIT-3 (the binding is validated before any event is accepted, whoever sends it)
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.worker import Worker

    from tests.support.activation import make_spec, unique
    from tests.support.runs import describe_or_none
    from tests.support.waits import assert_eventually
    from wf_initiation.client import WfiClient
    from wf_initiation.core.engine import Disposition
    from wf_initiation.plugin import WfiPlugin

    name = unique("bounded")
    text = f"name: {name}\non:\n  mail.received: {{inbox: help@acme.com}}\n  as: message\n"
    spec = make_spec(tmp_path, text, task_queue=task_queue)
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(dev_env.client, task_queue=task_queue)
        await wfi.activate(spec)
        raw = json.loads(spec.model_dump_json())
        raw["policies"]["dedup_retention"] = "P999999D"
        raw["activation_id"] = spec.activation_id.replace("@", "@x")
        forged = type(spec).model_validate_json(json.dumps(raw))
        with pytest.raises(WorkflowUpdateFailedError):
            await wfi._handle(name).execute_update("activate", forged, id="forged-activate")
        state = await wfi.state(name)
        assert state["activation_id"] == spec.activation_id
        ok = await wfi.deliver(name, {"message_id": "m1", "from": "a@b.c", "recipient": "help@acme.com", "subject": "hi"})
        assert ok.disposition == Disposition.ACCEPTED

        async def started() -> None:
            assert await describe_or_none(dev_env.client, ok.run_key) is not None

        await assert_eventually(started, timeout=30)
