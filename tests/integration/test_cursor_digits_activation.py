"""A 5000-digit cursor sent to a running activation: refused at the edge and in the activation, and polling
goes on (split from tests/core/test_cursor_digits.py: a dev server)."""

from __future__ import annotations

import pathlib
import uuid

from tests.support.activation import make_spec, unique
from tests.support.hostile import still_serves
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.limits import MAX_INT_DIGITS
from wf_initiation.wire import SetCursor, workflow_id_for

AT_LIMIT = "9" * MAX_INT_DIGITS
MIXED = """
name: {name}
on:
  - sheet.row_added: {{sheet: s}}
    as: row
  - http.request: {{}}
    as: hook
"""


async def test_set_cursor_refuses_a_5000_digit_integer_at_the_edge_and_in_the_activation_and_polling_goes_on(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: POLL-4, POLL-8
    name = unique("digits")
    sheet = tmp_path / "s.csv"
    sheet.write_text("id\nr1\n")
    await wfi.activate(make_spec(tmp_path, MIXED.format(name=name), task_queue=task_queue, poll={"interval": "1s"},
                                 connections={"sheets": {"connector": "sheet", "sheets": {"s": str(sheet)}}}))

    async def cursor_is(value: str) -> dict:
        state = await wfi.state(name)
        assert state["polls"]["row"]["cursor"] == value, state["polls"]["row"]
        return state

    await assert_eventually(lambda: cursor_is("1"), timeout=60)
    refused = await wfi.operate(name, SetCursor(entry="row", cursor="9" * 5000))
    assert not refused.ok and refused.message.startswith("refused before sending: cursor: it holds an integer of 5,000 digits")
    plain = await dev_env.client.get_workflow_handle(workflow_id_for(name)).execute_update(
        "operate", SetCursor(entry="row", cursor="9" * 5000), id=uuid.uuid4().hex, result_type=dict)
    assert plain["ok"] is False and "5,000 digits (the limit is 1,000)" in plain["message"], plain
    state = await cursor_is("1")
    assert not [e for e in state["errors"] if e["kind"] == "poll_failed"], "the cursor was never taken"

    taken = await wfi.operate(name, SetCursor(entry="row", cursor=AT_LIMIT, note="at the limit"))
    assert taken.ok, taken.message
    before = (await wfi.state(name))["polls"]["row"]
    await assert_eventually(lambda: _polled_since(wfi, name, before), timeout=60)  # a poll from it succeeds

    assert (await wfi.operate(name, SetCursor(entry="row", cursor="1"))).ok
    sheet.write_text("id\nr1\nr2\n")
    await assert_eventually(lambda: cursor_is("2"), timeout=60)  # a normal poll, and its row's run
    await still_serves(wfi, dev_env.client, name, entry="hook")


async def _polled_since(wfi: WfiClient, name: str, before: dict) -> None:
    now = (await wfi.state(name))["polls"]["row"]
    assert now["cursor"] == AT_LIMIT and now["failures"] == 0
    assert now["last_success_at"] != before["last_success_at"], "no poll has succeeded since"
