"""The state of an ended activation is read even when every worker's answer stays stale.

A run terminated while an event waited for its workflow task ends with that event after its last
completed task: a query is then a legacy query task that applies it at the last task's time, which the
activation's stale-time guard refuses (workflows/_fresh.py) on every worker with a cache, for as long
as the run exists. The client reads such a run's state from its history (wf_initiation/_ended.py).
"""

from __future__ import annotations

import pathlib

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.codec import assert_only_encrypted, load_module, write_team_codec
from tests.support.waits import assert_eventually
from wf_initiation._ended import QUERY_METHODS, answer_from_history
from wf_initiation._from_temporal import from_temporal
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import Disposition
from wf_initiation.errors import StaleAnswer
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import SUMMARY_QUERY, workflow_id_for
from wf_initiation.workflows.activation import ActivationWorkflow

WORKFILE = """
name: {name}
on:
  mail.received:
    inbox: support@acme.com
    connection: google
  as: message
"""
CONNECTIONS = {"google": {"connector": "mail", "token_env": "A"}}
SECRET = b"SECRET-subject-of-ended"


def mail(mid: str) -> dict:
    return {"message_id": mid, "from": "a@b.c", "recipient": "help@acme.com", "subject": SECRET.decode(), "thread_id": mid}


def test_every_query_the_client_reads_from_history_is_a_query_of_the_workflow() -> None:
    defined = {name for name in dir(ActivationWorkflow)
               if getattr(getattr(ActivationWorkflow, name), "__temporal_query_definition", None) is not None}
    assert set(QUERY_METHODS.values()) <= defined, "a query method was renamed: update wf_initiation/_ended.py"
    for query, method in QUERY_METHODS.items():
        assert getattr(ActivationWorkflow, method).__temporal_query_definition.name == query


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
async def test_a_terminated_activation_with_an_event_after_its_last_task_is_read_from_history(
    dev_env, task_queue: str, tmp_path: pathlib.Path, encrypted: bool,
) -> None:
    # proves: INIT-4
    client = dev_env.client
    if encrypted:
        module = load_module(write_team_codec(tmp_path, AESGCM.generate_key(bit_length=256), name=f"codec_{unique('k')[-8:]}"))
        client = Client(client.service_client, namespace=client.namespace, data_converter=module.data_converter,
                        plugins=[WfiPlugin(sample_runs=True)])
    plugins = [] if encrypted else [WfiPlugin(sample_runs=True)]  # the encrypting client carries the plugin
    name = unique("ended-read")
    spec = make_spec(tmp_path, WORKFILE.format(name=name), task_queue=task_queue, connections=CONNECTIONS)
    wfi = WfiClient(client, task_queue=task_queue)
    handle = client.get_workflow_handle(workflow_id_for(name))
    async with Worker(client, task_queue=task_queue, plugins=plugins):
        await wfi.activate(spec)
        first = await wfi.deliver(name, mail("m1"))
        assert first.disposition == Disposition.ACCEPTED

        async def run_done() -> None:
            try:
                await client.get_workflow_handle(first.run_key).result()
            except RPCError as exc:  # not started yet
                raise AssertionError(str(exc)) from exc

        await assert_eventually(run_done, timeout=60)
    # No worker now: the signal's workflow task is scheduled and never started before the terminate.
    await wfi.signal_delivery(name, mail("m2"))
    await handle.terminate(reason="operator pressed terminate")

    async with Worker(client, task_queue=task_queue, plugins=plugins):
        # What a worker with a cache answers such a run, asked directly: the guard's refusal (unless the
        # old worker's last poll took the signal's task before it stopped: then the time moved).
        try:
            await handle.query(SUMMARY_QUERY)
        except WorkflowQueryFailedError as exc:
            assert isinstance(from_temporal(exc, workflow=name, client=client), StaleAnswer), exc
        # The client's reading from history, asked directly: the state the run ended in.
        closed = await handle.describe()
        direct = await answer_from_history(client, closed.id, closed.run_id, SUMMARY_QUERY, [])
        assert direct["activation_id"] == spec.activation_id and direct["counters"]["deliveries"] in (1, 2)

        # m2 is in the state only when a worker took its task before the terminate (the old worker's
        # last poll can): either way the state reads, with the run's real end.
        summary = await wfi.summary(name)
        assert summary["status"] == "terminated" and summary["closed"]["run_id"] == closed.run_id
        assert summary["activation_id"] == spec.activation_id
        taken = summary["counters"]["deliveries"]
        assert taken in (1, 2) and summary["counters"]["runs_started"] >= 1

        state = await wfi.state(name, include_events=True)
        assert state["summary"]["status"] == "terminated"
        ids = {e["delivery_id"] for e in state["events"].values()}
        assert {"m1"} <= ids <= {"m1", "m2"}
        assert (await wfi.delivery(name, "message", "m1"))["run_key"] == first.run_key

        # Re-activation starts a fresh run, which accepts a normal delivery and starts its run.
        assert (await wfi.activate(spec)).outcome == "activated"
        again = await wfi.deliver(name, mail("m3"))
        assert again.disposition == Disposition.ACCEPTED
        first = again
        await assert_eventually(run_done, timeout=60)
    if encrypted:
        await assert_eventually(lambda: assert_only_encrypted(client, workflow_id_for(name), [SECRET], runs=2), timeout=30)
