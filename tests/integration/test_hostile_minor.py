"""The minor hostile inputs of issue 11 against a real activation: reused action and update ids with
other content, set_cursor with values no connector returns, oversized deliver_many, a forged
subscribe signal; and (issue 14 item 6) WfiClient riding out a server restart. Each test ends with
a normal delivery accepted and its run started."""

from __future__ import annotations

import pathlib
import uuid

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from tests.support.activation import make_spec, unique
from tests.support.hostile import HOOK, hook, run_started, still_serves
from tests.support.restart import meets_restart
from tests.support.waits import assert_eventually
from wf_initiation._sdk import is_call_timeout, is_transport_error
from wf_initiation.client import DeliveryRefused, WfiClient, bulk_chunks
from wf_initiation.core.limits import MAX_ACTION_ID_CHARS, MAX_BULK, MAX_BULK_BYTES, MAX_CURSOR_CHARS
from wf_initiation.errors import TemporalError
from wf_initiation.wire import OperatorRequest, workflow_id_for

MIXED = """
name: {name}
on:
  - sheet.row_added: {{sheet: s}}
    as: row
  - http.request: {{}}
    as: hook
"""


async def activate_hook(wfi: WfiClient, tmp_path: pathlib.Path, task_queue: str) -> str:
    name = unique("minor")
    await wfi.activate(make_spec(tmp_path, HOOK.format(name=name, extra=""), task_queue=task_queue))
    return name


async def test_a_reused_update_id_with_another_payload_is_judged_on_its_own_never_the_first_result(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-3, EXT-4
    # Choice: the client binds a caller's update id to the content (id + digest), so the server's
    # per-run update dedup only ever answers a true retry; the activation judges everything else.
    name = await activate_hook(wfi, tmp_path, task_queue)
    first = await wfi.deliver(name, hook("u1", n=1), update_id="caller-id")
    retry = await wfi.deliver(name, hook("u1", n=1), update_id="caller-id")
    other = await wfi.deliver(name, hook("u1", n=2), update_id="caller-id")
    new = await wfi.deliver(name, hook("u2", n=3), update_id="caller-id")
    assert (first.disposition.value, retry.disposition.value) == ("accepted", "accepted"), "a true retry: same answer"
    assert other.disposition.value == "conflict", "another payload under the same id is not reported as accepted"
    assert new.disposition.value == "accepted" and new.run_key != first.run_key
    with pytest.raises(DeliveryRefused, match=f"the limit is {MAX_ACTION_ID_CHARS}"):
        await wfi.deliver(name, hook("u3"), update_id="x" * (MAX_ACTION_ID_CHARS + 1))
    await still_serves(wfi, dev_env.client, name)


async def test_a_reused_action_id_with_another_action_is_refused(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    name = unique("ops")
    (tmp_path / "s.csv").write_text("id\n")
    await wfi.activate(make_spec(tmp_path, MIXED.format(name=name), task_queue=task_queue,
                                 connections={"sheets": {"connector": "sheet", "sheets": {"s": str(tmp_path / "s.csv")}}}))
    paused = await wfi.operate(name, OperatorRequest(action="pause", entry="row", action_id="op-1"))
    again = await wfi.operate(name, OperatorRequest(action="pause", entry="row", action_id="op-1"))
    other = await wfi.operate(name, OperatorRequest(action="resume", entry="row", action_id="op-1"))
    assert paused.ok and again == paused, "a true retry gets the same answer"
    assert not other.ok and "already used for a different action" in other.message
    # A plain client that reuses the update id too reaches the handler only if the id differs; with
    # the same update id the server answers the first result, which is why the client binds ids.
    plain = await dev_env.client.get_workflow_handle(workflow_id_for(name)).execute_update(
        "operate", OperatorRequest(action="resume", entry="row", action_id="op-1"), id=f"plain-{uuid.uuid4().hex}",
        result_type=dict)
    assert plain["ok"] is False
    assert (await wfi.state(name))["polls"]["row"]["paused"] is True, "the first action stands"
    await still_serves(wfi, dev_env.client, name, entry="hook")


@pytest.mark.parametrize("cursor", ["1e999", "NaN", "-Infinity", "c" * (900 * 1024)], ids=["1e999", "nan", "-inf", "900KB"])
async def test_set_cursor_refuses_what_no_connector_returns_and_polling_goes_on(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path, cursor: str,
) -> None:
    # proves: POLL-4, POLL-8
    name = unique("cursor")
    sheet = tmp_path / "s.csv"
    sheet.write_text("id\nr1\n")
    await wfi.activate(make_spec(tmp_path, MIXED.format(name=name), task_queue=task_queue, poll={"interval": "1s"},
                                 connections={"sheets": {"connector": "sheet", "sheets": {"s": str(sheet)}}}))

    async def polled(rows: int) -> None:
        assert (await wfi.state(name))["polls"]["row"]["cursor"] == str(rows)

    await assert_eventually(lambda: polled(1), timeout=60)
    refused = await wfi.operate(name, OperatorRequest(action="set_cursor", entry="row", cursor=cursor))
    assert not refused.ok and "refused" in refused.message
    if len(cursor) < MAX_CURSOR_CHARS:  # the activation refuses it too (a plain client skips the client's check)
        plain = await dev_env.client.get_workflow_handle(workflow_id_for(name)).execute_update(
            "operate", OperatorRequest(action="set_cursor", entry="row", cursor=cursor), id=uuid.uuid4().hex,
            result_type=dict)
        assert plain["ok"] is False and "strict JSON" in plain["message"]
    sheet.write_text("id\nr1\nr2\n")
    await assert_eventually(lambda: polled(2), timeout=60)  # the cursor was never touched
    await still_serves(wfi, dev_env.client, name, entry="hook")


async def test_deliver_many_is_split_by_the_client_and_bounded_in_the_handler(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-8
    client = dev_env.client
    name = await activate_hook(wfi, tmp_path, task_queue)
    big = [(None, hook(f"b{i}", text="x" * 200_000)) for i in range(8)]
    assert len(bulk_chunks(big)) >= 2 and len(bulk_chunks([(None, hook(f"c{i}")) for i in range(MAX_BULK + 1)])) == 2
    results = await wfi.deliver_many(name, big)
    assert [r.disposition.value for r in results] == ["accepted"] * 8
    handle = client.get_workflow_handle(workflow_id_for(name))
    too_many = [{"entry": None, "payload": hook(f"m{i}")} for i in range(MAX_BULK + 1)]
    with pytest.raises(WorkflowUpdateFailedError) as count:
        await handle.execute_update("deliver_many", too_many, id=uuid.uuid4().hex, result_type=list)
    assert f"at most {MAX_BULK}" in str(count.value.cause)
    too_big = [{"entry": None, "payload": hook(f"t{i}", text="y" * 200_000)} for i in range(6)]
    with pytest.raises(WorkflowUpdateFailedError) as size:
        await handle.execute_update("deliver_many", too_big, id=uuid.uuid4().hex, result_type=list)
    assert f"the limit is {MAX_BULK_BYTES + 4096}" in str(size.value.cause)
    for r in results:
        await run_started(client, r.run_key)
    await still_serves(wfi, client, name)


async def test_a_forged_subscribe_signal_does_not_swallow_the_event(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: INIT-8, INIT-9
    # Choice: the subscriber is checked when its event is signalled to it: a workflow that does not
    # exist (or has closed) cannot receive it, and the event is then disposed as if nothing matched.
    client = dev_env.client
    name = await activate_hook(wfi, tmp_path, task_queue)
    await client.get_workflow_handle(workflow_id_for(name)).signal(
        "subscribe", {"sub_id": "forged/1", "entry": "hook", "run_workflow_id": f"no-such-{uuid.uuid4().hex}", "match": {}})
    taken = await wfi.deliver(name, hook("e1"))
    assert taken.disposition.value == "delivered", "the forged subscription matched at acceptance (INIT-8)"

    async def released() -> str:
        state = await wfi.state(name, include_events=True)
        record = state["events"]["hook\x1fe1"]
        assert record["disposition"] == "accepted" and record["run_key"], record
        assert any(e["kind"] == "delivery_failed" and "released" in e["message"] for e in state["errors"])
        return record["run_key"]

    await run_started(client, await assert_eventually(released, timeout=60))
    await client.get_workflow_handle(workflow_id_for(name)).signal(
        "subscribe", {"sub_id": "big", "entry": "hook", "run_workflow_id": "r", "match": {"k": "v" * 10_000}})
    await still_serves(wfi, client, name)


def test_transport_errors_are_retried_and_other_errors_are_not() -> None:
    assert is_transport_error(RPCError("transport error", RPCStatusCode.UNKNOWN, b""))
    assert is_transport_error(RPCError("error trying to connect: tcp connect error: Connection refused",
                                       RPCStatusCode.UNAVAILABLE, b""))
    assert not is_transport_error(RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b""))
    # the tests' own direct calls (tests/support/restart.py) ride out the same errors, and no others
    assert meets_restart(RPCError("transport error", RPCStatusCode.UNKNOWN, b""))
    assert meets_restart(RuntimeError("Failed client connect: Server connection error"))
    assert not meets_restart(RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b""))
    assert not meets_restart(RuntimeError("boom"))


async def test_a_call_whose_own_deadline_passed_is_asked_again() -> None:
    # A query to a worker busy replaying (CI load, no cache) can outlast the call's deadline; the SDK
    # reports it as CANCELLED "Timeout expired". Reads and calls by id are asked again, other
    # CANCELLED errors are not.
    timeout = RPCError("Timeout expired", RPCStatusCode.CANCELLED, b"")
    assert is_call_timeout(timeout)
    assert not is_call_timeout(RPCError("operation cancelled", RPCStatusCode.CANCELLED, b""))
    calls: list[int] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise timeout
        return "answer"

    wfi = WfiClient(None, max_attempts=5)  # type: ignore[arg-type]  # _retry never uses the client
    assert await wfi._retry(flaky) == "answer" and len(calls) == 3

    async def refused() -> str:
        calls.append(1)
        raise RPCError("operation cancelled", RPCStatusCode.CANCELLED, b"")

    calls.clear()
    with pytest.raises(TemporalError) as raised:
        await wfi._retry(refused)
    assert len(calls) == 1 and not raised.value.retryable and isinstance(raised.value.__cause__, RPCError)
