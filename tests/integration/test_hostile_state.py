"""What an activation keeps and carries (issue 11 item 3): invalid deliveries with 200 KB delivery
ids made the continue-as-new input 3.6 MB (dead) and the `state` query failed with "message too
large". Now a record keeps a digest of an over-long id and a cut message, the carried state is
measured before continue-as-new (over its limit the activation defers deliveries and tries again),
and query results are fitted under the gRPC limit. Each test ends with a normal delivery accepted
and its run started."""

from __future__ import annotations

import os
import pathlib

import pytest
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.hostile import HOOK, errors_of, histories, hook, still_serves, task_failures
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core import limits
from wf_initiation.core.limits import MAX_MESSAGE_CHARS, json_size
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import workflow_id_for


async def test_invalid_deliveries_with_200kb_ids_keep_digests_and_the_activation_carries_on(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-9, EXT-10, INIT-7
    client = dev_env.client
    name = unique("longids")
    await wfi.activate(make_spec(tmp_path, HOOK.format(name=name, extra=""), task_queue=task_queue))
    for i in range(24):  # 24 x 2 x 200 KB would be 10 MB of records kept; the 5 MB history asks for a carry
        result = await wfi.deliver(name, hook(f"{i:03d}" + "i" * (200 * 1024)))
        assert result.disposition.value == "invalid"
        assert result.delivery_id.startswith("sha256:") and len(result.message) <= MAX_MESSAGE_CHARS

    async def continued() -> None:
        assert len(await histories(client, name)) >= 2, "the activation continued-as-new"

    await still_serves(wfi, client, name, "before-carry")
    await assert_eventually(continued, timeout=90)
    state = await wfi.state(name)
    assert json_size(state) < 256 * 1024, "the state holds no 200 KB id"
    errors = await errors_of(wfi, name, "invalid")
    assert len(errors) == 24 and all(e["delivery_id"].startswith("sha256:") for e in errors)
    assert await task_failures(client, name) == []
    await still_serves(wfi, client, name)


async def test_a_state_over_the_carry_limit_defers_deliveries_until_it_fits_and_then_continues(
    dev_env, task_queue: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: EXT-8, INIT-7, TRIG-11
    # A lower limit, read by the activation at each carry attempt (core.limits, looked up then): the
    # state of a handful of queued 10 KB events is then over it, as 100k ids and queued payloads
    # would be at the real limit.
    monkeypatch.setattr(limits, "MAX_CARRIED_STATE_BYTES", 24 * 1024)
    monkeypatch.setattr(limits, "CARRY_RETRY_EVENTS", 10)
    client = dev_env.client
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        name = unique("carry")
        await wfi.activate(make_spec(tmp_path, HOOK.format(name=name, extra='  queue_by: "{{ hook.body.key }}"'),
                                     task_queue=task_queue, max_history_events=200))
        held = await wfi.deliver(name, hook("head", key="q", hold=True))
        queued = [await wfi.deliver(name, hook(f"q{i}", key="q", text=os.urandom(5_000).hex())) for i in range(6)]
        assert [r.disposition.value for r in queued] == ["queued"] * 6
        for i in range(120):  # history grows past max_history_events: the carry is attempted, and refused
            await wfi.deliver(name, hook(f"g{i}", key=f"other-{i}", go=False))
            if await errors_of(wfi, name, "carry_over_limit"):
                break
        (blocked,) = await errors_of(wfi, name, "carry_over_limit")
        assert "deferred" in blocked["message"]
        deferred = await wfi.deliver(name, hook("while-blocked", key="x"))
        assert deferred.disposition.value == "deferred", deferred
        await client.get_workflow_handle(held.run_key).signal("release")

        async def carried() -> None:  # the queue drains, the state fits, continue-as-new goes through
            await wfi.deliver(name, hook(f"poke-{unique('p')}", key="poke", go=False))
            assert len(await histories(client, name)) >= 2

        await assert_eventually(carried, timeout=120, interval=0.5)
        await still_serves(wfi, client, name, "while-blocked", key="x")  # deferred consumed nothing
        assert (await client.get_workflow_handle(workflow_id_for(name)).describe()).status.name == "RUNNING"
