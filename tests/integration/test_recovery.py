"""Cancel, terminate and rebind never lose an accepted delivery (issue 31 item 5), on a real dev server.

A cancellation request (the Temporal UI's "Request Cancellation", ``temporal workflow cancel``, here
``handle.cancel()`` as the UI sends it) deactivates the activation with its state kept. After a
terminate, ``wfi activate`` recovers the closed run's complete state from its history, replayed on
the client with the team's converter (wf_initiation/_recovery.py), not only what its start input
carried. Either way, with the same Workfile or an edited one (a rebind), every delivery accepted
before is ``duplicate`` when redelivered and no second run starts; a new one is accepted and runs.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.codec import assert_only_encrypted, load_module, write_team_codec
from tests.support.hostile import hook, run_started, still_serves
from tests.support.replay import assert_replays
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import Disposition
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import DELIVER_SIGNAL, DeliveryRequest, workflow_id_for

WORKFILE = """
name: {name}
inputs:
  team: {{default: {team}}}
on:
  http.request: {{}}
  as: hook
"""
ACCEPTED = ["a1", "a2", "a3"]


def spec(tmp_path: pathlib.Path, name: str, task_queue: str, team: str = "blue") -> Any:
    return make_spec(tmp_path, WORKFILE.format(name=name, team=team), task_queue=task_queue, lifecycle_events=False)


def team_client(dev_env: Any, tmp_path: pathlib.Path) -> Client:
    """A client whose data converter encrypts every payload (the team's codec, tests/support/codec.py)."""
    module = load_module(write_team_codec(tmp_path, AESGCM.generate_key(bit_length=256)))
    return Client(dev_env.client.service_client, namespace=dev_env.client.namespace,
                  data_converter=module.data_converter, plugins=[WfiPlugin(sample_runs=True)])


async def runs_of(client: Client, name: str) -> list[str]:
    """The workflow ids of every run the activation of ``name`` started (its run keys)."""
    return [wf.id async for wf in client.list_workflows(f"WorkflowType = 'wfi.EchoRun' AND WfiWorkflow = '{name}'")]


async def accept_some(wfi: WfiClient, client: Client, name: str) -> dict[str, str]:
    """Deliver a1..a3 (updates) and s1 (a signal); wait until each run started; their run keys."""
    keys = {}
    for ident in ACCEPTED:
        result = await wfi.deliver(name, hook(ident))
        assert result.disposition == Disposition.ACCEPTED, result
        keys[ident] = result.run_key
    await client.get_workflow_handle(workflow_id_for(name)).signal(DELIVER_SIGNAL, DeliveryRequest(payload=hook("s1")))

    async def signalled() -> None:
        record = await wfi.delivery(name, "hook", "s1")
        assert record is not None and record["disposition"] == "accepted", record
        keys["s1"] = record["run_key"]

    await assert_eventually(signalled, timeout=30)
    for key in keys.values():
        await run_started(client, key)
    return keys


async def closed(client: Client, name: str, status: WorkflowExecutionStatus) -> None:
    async def check() -> None:
        assert (await client.get_workflow_handle(workflow_id_for(name)).describe()).status == status

    await assert_eventually(check, timeout=60)


async def redeliveries_are_duplicates(wfi: WfiClient, client: Client, name: str, keys: dict[str, str]) -> None:
    """Every id accepted before: ``duplicate`` under the run key it had, and no second run of it; a new
    id is accepted and its run starts (after a rebind, under the new activation id)."""
    for ident, run_key in keys.items():
        again = await wfi.deliver(name, hook(ident), update_id=f"{ident}-again")
        assert again.disposition == Disposition.DUPLICATE and again.run_key == run_key, (ident, again)
    summary = await wfi.summary(name)
    assert summary["counters"]["runs_started"] == len(keys), ("runs started counts only new runs", summary["counters"])
    await still_serves(wfi, client, name, "after-recovery")

    async def one_run_each() -> None:
        runs = await runs_of(client, name)
        assert sorted(runs) == sorted([*keys.values(), (await wfi.delivery(name, "hook", "after-recovery"))["run_key"]])

    await assert_eventually(one_run_each, timeout=30)
    assert (await wfi.summary(name))["counters"]["runs_started"] == len(keys) + 1


@pytest.mark.parametrize("edited", [False, True], ids=["same-workfile", "edited-workfile"])
async def test_a_cancellation_request_deactivates_with_every_accepted_delivery_kept(
    dev_env, task_queue: str, tmp_path: pathlib.Path, edited: bool,
) -> None:
    # proves: INIT-5, EXT-3
    client, name = dev_env.client, unique("cancelled")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        first = await wfi.activate(spec(tmp_path, name, task_queue))
        keys = await accept_some(wfi, client, name)
        await client.get_workflow_handle(workflow_id_for(name)).cancel()  # what the UI's button sends
        await closed(client, name, WorkflowExecutionStatus.COMPLETED)

        summary = await wfi.summary(name)
        assert summary["status"] == "deactivated" and "closed" not in summary, summary
        assert "cancellation requested" in summary["deactivation"]["note"], summary["deactivation"]
        page = await current_details(client, name)
        assert "**deactivated**" in page and "cancellation requested" in page and "`wfi activate`" in page, page

        again = await wfi.activate(spec(tmp_path, name, task_queue, team="red" if edited else "blue"))
        assert again.outcome == "activated", again
        assert (again.activation_id != first.activation_id) == edited
        await redeliveries_are_duplicates(wfi, client, name, keys)
    await assert_replays(client, workflow_id_for(name))


@pytest.mark.parametrize("edited", [False, True], ids=["same-workfile", "edited-workfile"])
async def test_a_terminated_activation_is_activated_again_with_its_complete_state_under_the_team_s_codec(
    dev_env, task_queue: str, tmp_path: pathlib.Path, edited: bool,
) -> None:
    # proves: INIT-5, EXT-3
    client, name = team_client(dev_env, tmp_path), unique("terminated")
    async with Worker(client, task_queue=task_queue):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(spec(tmp_path, name, task_queue))
        keys = await accept_some(wfi, client, name)
        handle = client.get_workflow_handle(workflow_id_for(name))
        await handle.terminate(reason="operator pressed terminate")
        await closed(client, name, WorkflowExecutionStatus.TERMINATED)

        again = await wfi.activate(spec(tmp_path, name, task_queue, team="red" if edited else "blue"))
        assert again.outcome == "activated", again
        note = again.note or ""
        assert "terminated" in note and "complete state replayed from its history" in note, note
        assert "redelivery is `duplicate` and starts no second run, also after a rebind" in note, note
        if edited:
            assert (await wfi.summary(name))["activation_id"] == again.activation_id, "the edited Workfile took over"
        await redeliveries_are_duplicates(wfi, client, name, keys)
        await assert_eventually(lambda: assert_only_encrypted(client, workflow_id_for(name), [b"after-recovery"], runs=2),
                                timeout=30)


async def test_a_signal_the_terminated_run_never_took_is_delivered_to_the_new_run(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-8
    client, name = dev_env.client, unique("untaken")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(spec(tmp_path, name, task_queue))
        keys = await accept_some(wfi, client, name)
    # No worker now: the signal is in history (its sender was told durable), no task ever takes it.
    handle = client.get_workflow_handle(workflow_id_for(name))
    await handle.signal(DELIVER_SIGNAL, DeliveryRequest(payload=hook("late")))
    await handle.terminate(reason="operator pressed terminate")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        again = await wfi.activate(spec(tmp_path, name, task_queue))
        assert "1 signalled delivery(ies) it had not taken yet are delivered again" in (again.note or ""), again

        async def late_ran() -> None:
            record = await wfi.delivery(name, "hook", "late")
            assert record is not None and record["disposition"] == "accepted", record
            await run_started(client, record["run_key"])

        await assert_eventually(late_ran, timeout=30)
        keys["late"] = (await wfi.delivery(name, "hook", "late"))["run_key"]
        await redeliveries_are_duplicates(wfi, client, name, keys)


async def current_details(client: Client, name: str) -> str:
    """The activation's page in the Temporal UI (its current details)."""
    from temporalio.api.sdk.v1 import WorkflowMetadata

    metadata = await client.get_workflow_handle(workflow_id_for(name)).query(
        "__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return metadata.current_details


async def test_a_terminated_run_begun_by_continue_as_new_keeps_what_it_accepted_since(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-3
    client, name = dev_env.client, unique("after-can")
    spec_can = make_spec(tmp_path, WORKFILE.format(name=name, team="blue"), task_queue=task_queue, lifecycle_events=False,
                         max_history_events=200)
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(spec_can)
        handle = client.get_workflow_handle(workflow_id_for(name))
        first_run = (await handle.describe()).run_id
        keys: dict[str, str] = {}
        n = 0
        while (await handle.describe()).run_id == first_run or len(keys) < n + 3:  # 3 more after the continue-as-new
            result = await wfi.deliver(name, hook(f"c{len(keys)}"))
            assert result.disposition == Disposition.ACCEPTED, result
            keys[result.delivery_id] = result.run_key
            if (await handle.describe()).run_id == first_run:
                n = len(keys)
            assert len(keys) < 200, "the activation never continued as new"
        for key in keys.values():
            await run_started(client, key)
        await handle.terminate(reason="operator pressed terminate")
        await closed(client, name, WorkflowExecutionStatus.TERMINATED)
        again = await wfi.activate(spec(tmp_path, name, task_queue, team="red"))  # and a rebind
        assert "complete state replayed" in (again.note or ""), again
        await redeliveries_are_duplicates(wfi, client, name, keys)


async def test_a_history_that_cannot_be_replayed_starts_from_the_run_s_start_input_and_says_what_that_loses(
    dev_env, task_queue: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    client, name = dev_env.client, unique("unreplayable")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(spec(tmp_path, name, task_queue))
        first = await wfi.deliver(name, hook("a1"))
        await run_started(client, first.run_key)
        await client.get_workflow_handle(workflow_id_for(name)).terminate(reason="operator pressed terminate")
        await closed(client, name, WorkflowExecutionStatus.TERMINATED)

        async def nondeterministic(*_: object) -> None:
            raise RuntimeError("nondeterminism error")  # as a history of an incompatible build would

        monkeypatch.setattr("wf_initiation._recovery.replayed", nondeterministic)
        again = await wfi.activate(spec(tmp_path, name, task_queue))
        note = again.note or ""
        assert "its history could not be replayed here: RuntimeError" in note, note
        assert "starts no second run only while the binding is the same" in note and "second run" in note, note
        repeated = await wfi.deliver(name, hook("a1"), update_id="a1-again")
        assert (repeated.disposition, repeated.run_key) == (Disposition.ACCEPTED, first.run_key), "as the note says"
        await still_serves(wfi, client, name, "after-fallback")
        assert len([k for k in await runs_of(client, name) if k == first.run_key]) == 1
