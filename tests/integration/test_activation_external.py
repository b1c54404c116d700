"""External-event initiation end to end on a real Temporal dev server."""

from __future__ import annotations

import pathlib

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from tests.support.activation import make_spec, unique
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import Disposition

MAIL = """
name: {name}
on:
  mail.received:
    inbox: support@acme.com
  as: message
  when: "{{{{ message.recipient != 'noreply@acme.com' }}}}"
  queue_by: "{{{{ message.thread_id }}}}"
"""


def mail(mid: str, thread: str | None = "t1", recipient: str = "help@acme.com", **extra) -> dict:
    body = {"message_id": mid, "from": "a@b.c", "recipient": recipient, "subject": "hi", **extra}
    if thread is not None:
        body["thread_id"] = thread
    return body


async def test_every_disposition_of_a_delivery(wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path) -> None:
    # proves: EXT-1, EXT-2, EXT-3, EXT-4, EXT-9, EXT-10, EXT-13, TRIG-8, TRIG-9, TRIG-13, INIT-6
    name = unique("support")
    spec = make_spec(tmp_path, MAIL.format(name=name), task_queue=task_queue)
    activated = await wfi.activate(spec)
    assert activated.activation_id == spec.activation_id

    first = await wfi.deliver(name, mail("m1", hold=True))
    assert first.disposition == Disposition.ACCEPTED and first.run_key
    again = await wfi.deliver(name, mail("m1", hold=True), update_id="retry-1")
    assert again.disposition == Disposition.DUPLICATE and again.run_key == first.run_key
    conflict = await wfi.deliver(name, mail("m1", subject_changed=True))
    assert conflict.disposition == Disposition.CONFLICT
    queued = await wfi.deliver(name, mail("m2"))
    assert queued.disposition == Disposition.QUEUED
    suppressed = await wfi.deliver(name, mail("m3", recipient="noreply@acme.com"))
    assert suppressed.disposition == Disposition.SUPPRESSED
    resent = await wfi.deliver(name, mail("m3", recipient="noreply@acme.com"), update_id="resend-m3")
    assert resent.disposition == Disposition.DUPLICATE and resent.retained == Disposition.SUPPRESSED
    key_fault = await wfi.deliver(name, mail("m4", thread=None))
    assert key_fault.disposition == Disposition.KEY_FAULT
    invalid = await wfi.deliver(name, {"message_id": "m5", "subject": "no sender"})
    assert invalid.disposition == Disposition.INVALID and invalid.delivery_id == "m5"
    fixed = await wfi.deliver(name, mail("m5", thread="t9"))
    assert fixed.disposition == Disposition.ACCEPTED, "an invalid delivery does not consume its identity"

    state = await wfi.state(name, include_events=True)
    kinds = [e["kind"] for e in state["errors"]]
    assert kinds.count("conflict") == 1 and kinds.count("invalid") == 1 and kinds.count("key_fault") == 1
    assert state["events"]["message\x1fm3"]["disposition"] == "suppressed"
    assert "message\x1fm5" in state["events"]


async def test_guard_fault_is_recorded_apart_from_suppression(wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path) -> None:
    # proves: TRIG-9
    name = unique("guarded")
    spec = make_spec(tmp_path, f"""
        name: {name}
        on:
          http.request: {{}}
          when: "{{{{ request.body.priority > 3 }}}}"
    """, task_queue=task_queue)
    await wfi.activate(spec)
    ok = await wfi.deliver(name, {"delivery_id": "a", "method": "POST", "body": {"priority": 5}})
    low = await wfi.deliver(name, {"delivery_id": "b", "method": "POST", "body": {"priority": 1}})
    fault = await wfi.deliver(name, {"delivery_id": "c", "method": "POST", "body": {}})
    assert (ok.disposition, low.disposition, fault.disposition) == (
        Disposition.ACCEPTED, Disposition.SUPPRESSED, Disposition.GUARD_FAULT)
    summary = await wfi.summary(name)
    assert summary["error_counts"] == {"guard_fault": 1}
    assert summary["counters"]["suppressed"] == 1


async def test_queue_key_is_held_while_suspended_and_released_by_termination(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: TRIG-11, TRIG-14, EXT-11, EXT-5
    name = unique("queue")
    spec = make_spec(tmp_path, MAIL.format(name=name), task_queue=task_queue)
    await wfi.activate(spec)
    client: Client = dev_env.client
    a = await wfi.deliver(name, mail("a", hold=True))
    b = await wfi.deliver(name, mail("b", hold=True))
    c = await wfi.deliver(name, mail("c"))
    other = await wfi.deliver(name, mail("x", thread="t2"))
    assert [a.disposition, b.disposition, c.disposition, other.disposition] == [
        Disposition.ACCEPTED, Disposition.QUEUED, Disposition.QUEUED, Disposition.ACCEPTED]

    async def running(key: str) -> None:
        try:
            desc = await client.get_workflow_handle(key).describe()
        except RPCError as exc:
            raise AssertionError(f"{key} not started yet: {exc}") from exc
        assert desc.status == WorkflowExecutionStatus.RUNNING

    await assert_eventually(lambda: running(a.run_key))
    # a is suspended (waiting on a signal): it keeps the key, b does not start.
    state = await wfi.state(name, include_events=True)
    assert state["runs"][b.run_key]["status"] == "pending"
    await client.get_workflow_handle(a.run_key).signal("release")

    async def b_running() -> None:
        assert (await wfi.state(name, include_events=True))["runs"][b.run_key]["status"] == "running"

    await assert_eventually(b_running)
    await client.get_workflow_handle(b.run_key).terminate("test: a terminated run releases its key")

    async def c_done() -> None:
        try:
            desc = await client.get_workflow_handle(c.run_key).describe()
        except RPCError as exc:
            raise AssertionError(f"c not started yet: {exc}") from exc
        assert desc.status == WorkflowExecutionStatus.COMPLETED

    await assert_eventually(c_done)
    order = [(await client.get_workflow_handle(k).describe()).start_time for k in (a.run_key, b.run_key, c.run_key)]
    assert order == sorted(order), "equal keys run in acceptance order"
    events = (await wfi.state(name, include_events=True))["events"]
    assert events["message\x1fb"]["released_at"] is not None, "retention clock starts at the terminal outcome"


async def test_overlap_skip_consumes_the_delivery(wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path) -> None:
    # proves: EXT-13, EXT-12
    name = unique("skip")
    spec = make_spec(tmp_path, f"""
        name: {name}
        on:
          http.request: {{}}
          when: "{{{{ request.body.go }}}}"
    """, task_queue=task_queue, overlap="skip")
    await wfi.activate(spec)
    first = await wfi.deliver(name, {"delivery_id": "1", "method": "POST", "body": {"go": True, "hold": True}})
    guarded = await wfi.deliver(name, {"delivery_id": "2", "method": "POST", "body": {"go": False}})
    skipped = await wfi.deliver(name, {"delivery_id": "3", "method": "POST", "body": {"go": True}})
    assert (first.disposition, guarded.disposition, skipped.disposition) == (
        Disposition.ACCEPTED, Disposition.SUPPRESSED, Disposition.SKIPPED), "when is evaluated before overlap"
    again = await wfi.deliver(name, {"delivery_id": "3", "method": "POST", "body": {"go": True}}, update_id="again-3")
    assert again.disposition == Disposition.DUPLICATE and again.retained == Disposition.SKIPPED
