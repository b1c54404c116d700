"""Re-activation: a changed binding is a new activation; what the old one accepted is kept as it was."""

from __future__ import annotations

import pathlib

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.cli import MAIL_WORKFILE, Pair
from tests.support.cli import mail as cli_mail
from tests.support.cli import wfi as cli
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import Disposition
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import workflow_id_for

WORKFILE = """
name: {name}
inputs:
  team: {{default: blue}}
on:
  mail.received:
    inbox: support@acme.com
    connection: {connection}
  as: message
  queue_by: "{{{{ message.thread_id }}}}"
"""


def mail(mid: str, **extra) -> dict:
    return {"message_id": mid, "from": "a@b.c", "recipient": "help@acme.com", "subject": "s", "thread_id": "t", **extra}


async def test_changed_connection_or_input_is_a_new_activation_that_keeps_what_the_old_one_accepted(
    dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: INIT-2, INIT-3, INIT-4, INIT-5, TRIG-12, TRIG-6
    name = unique("rebind")
    conns = {"google-a": {"connector": "mail", "token_env": "A"}, "google-b": {"connector": "mail", "token_env": "B"}}
    old = make_spec(tmp_path, WORKFILE.format(name=name, connection="google-a"), task_queue=task_queue, connections=conns)
    same = make_spec(tmp_path, WORKFILE.format(name=name, connection="google-a"), task_queue=task_queue, connections=conns)
    new_conn = make_spec(tmp_path, WORKFILE.format(name=name, connection="google-b"), task_queue=task_queue, connections=conns)
    new_input = make_spec(tmp_path, WORKFILE.format(name=name, connection="google-b"), task_queue=task_queue,
                          connections=conns, inputs={"team": "red"})
    assert old.activation_id == same.activation_id, "same binding, same activation id"
    assert len({old.activation_id, new_conn.activation_id, new_input.activation_id}) == 3, "any change, new id"
    assert old.entries[0].connection == "google-a" and new_conn.entries[0].connection == "google-b"

    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(dev_env.client, task_queue=task_queue)
        assert (await wfi.activate(old)).outcome == "activated"
        assert (await wfi.activate(same)).outcome == "unchanged", "activating the same thing twice is idempotent"
        held = await wfi.deliver(name, mail("m1", hold=True))
        waiting = await wfi.deliver(name, mail("m2"))
        assert (held.disposition, waiting.disposition) == (Disposition.ACCEPTED, Disposition.QUEUED)

        rebound = await wfi.activate(new_conn)
        assert rebound.outcome == "rebound" and rebound.previous == [old.activation_id]
        after = await wfi.deliver(name, mail("m3"))
        assert after.disposition == Disposition.QUEUED, "the queue spans both activations (TRIG-12)"
        assert after.run_key.startswith(new_conn.activation_id)
        redelivered = await wfi.deliver(name, mail("m2"), update_id="m2-again")
        assert redelivered.disposition == Disposition.DUPLICATE and redelivered.run_key == waiting.run_key
        assert (await wfi.activate(new_input)).previous == [old.activation_id, new_conn.activation_id]

        await dev_env.client.get_workflow_handle(held.run_key).signal("release")

        async def all_done() -> None:
            for key in (held.run_key, waiting.run_key, after.run_key):
                try:
                    desc = await dev_env.client.get_workflow_handle(key).describe()
                except RPCError as exc:
                    raise AssertionError(str(exc)) from exc
                assert desc.status == WorkflowExecutionStatus.COMPLETED

        await assert_eventually(all_done, timeout=60)
        m2 = await dev_env.client.get_workflow_handle(waiting.run_key).result()
        assert m2["input"]["initiation"]["activation_id"] == old.activation_id, "m2 keeps the old activation's binding"
        m3 = await dev_env.client.get_workflow_handle(after.run_key).result()
        assert m3["input"]["initiation"]["activation_id"] == new_conn.activation_id
        summary = await wfi.summary(name)
        assert summary["activation_id"] == new_input.activation_id
        # One stable identity spans every activation and run that interact (INIT-2): the same
        # activation workflow id, and every run, whichever activation accepted it, names the workflow.
        assert (await wfi._handle(name).describe()).id == f"wfi-activation:{name}"
        for run in (m2, m3):
            assert run["input"]["initiation"]["workflow"] == name
        assert summary["counters"]["runs_started"] == 3, "nothing was re-run"


@pytest.mark.parametrize("end", ["terminate", "cancel"])
async def test_an_activation_terminated_or_cancelled_from_the_ui_is_activated_again_with_everything_it_accepted(
    dev_env, task_queue: str, tmp_path: pathlib.Path, end: str,
) -> None:
    # proves: INIT-4, EXT-3
    name = unique("ended")
    pair = Pair(name, tmp_path / "wf.yaml", tmp_path / "deployment.yaml")
    pair.workfile.write_text(MAIL_WORKFILE.format(name=name))
    pair.write_deployment(dev_env.client.service_client.config.target_host, task_queue)
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        first = await cli("activate", str(pair.workfile), "--deployment", str(pair.deployment), "--json")
        assert first.json()["outcome"] == "activated", first.stderr
        m1 = (await cli("deliver", *pair.target, "--payload", cli_mail("m1"), "--json")).json()
        assert m1["disposition"] == "accepted"
        handle = dev_env.client.get_workflow_handle(workflow_id_for(name))
        if end == "terminate":  # what an operator does from the UI
            await handle.terminate(reason="operator pressed terminate")
        else:  # "Request Cancellation": a deactivation that keeps the state (docs/operator-view.md)
            await handle.cancel()
        await assert_eventually(lambda: _closed(handle), timeout=30)
        status = "terminated" if end == "terminate" else "deactivated"

        summary = await cli("state", *pair.target, "--summary")
        assert summary.code == 0 and f"[{status}]" in summary.stdout and "wfi activate" in summary.stdout, summary.stdout
        refused = await cli("deliver", *pair.target, "--payload", cli_mail("m2"))
        assert refused.code == 1, "nothing serves the workflow while its activation is closed"

        again = await cli("activate", str(pair.workfile), "--deployment", str(pair.deployment), "--json")
        assert again.code == 0 and again.json()["outcome"] == "activated", again.stdout + again.stderr
        note = again.json()["note"]
        if end == "terminate":
            assert "terminated" in note and "complete state replayed" in note and "the 1 delivery update(s)" in note, note
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING, "a fresh run serves it"
        assert "[active]" in (await cli("state", *pair.target, "--summary")).stdout

        m2 = (await cli("deliver", *pair.target, "--payload", cli_mail("m2", thread="t2"), "--json")).json()
        assert m2["disposition"] == "accepted", m2
        # m1's dedup entry is in the recovered state: a redelivery is a duplicate of the run it started.
        m1_again = (await cli("deliver", *pair.target, "--payload", cli_mail("m1"), "--update-id", "m1-again", "--json")).json()
        assert m1_again["disposition"] == "duplicate" and m1_again["run_key"] == m1["run_key"], m1_again

        async def both_ran() -> None:
            for key in (m1["run_key"], m2["run_key"]):
                desc = await dev_env.client.get_workflow_handle(key).describe()
                assert desc.status == WorkflowExecutionStatus.COMPLETED, key

        await assert_eventually(both_ran, timeout=60)
        runs = [wf.id async for wf in dev_env.client.list_workflows(f"WorkflowId = '{m1['run_key']}'")]
        assert len(runs) == 1, "one run of m1's run key"
        unchanged = await cli("activate", str(pair.workfile), "--deployment", str(pair.deployment), "--json")
        assert unchanged.json()["outcome"] == "unchanged" and unchanged.json()["note"] is None


async def _closed(handle) -> None:  # noqa: ANN001
    assert (await handle.describe()).status != WorkflowExecutionStatus.RUNNING
