"""An operator's cursor holding an integer past 1,000 digits (issue 18 item 10).

Past 4,300 digits Python's ``int()`` refuses the text with a ``ValueError`` that the check used to
read as "not JSON, an opaque cursor": the cursor was taken, and every later poll failed. Now the
digits are counted before conversion: the client refuses such a cursor before sending, the
activation refuses it too (a plain Temporal client skips the client's check), a cursor at the
limit is taken, and a connector handed such a cursor anyway (a state from before) fails the poll
as a configuration error naming the fix instead of retrying forever.
"""

from __future__ import annotations

import pathlib
import uuid

import pytest
from temporalio.exceptions import ApplicationError

from tests.support.waits import assert_eventually
from tests.support.activation import make_spec, unique
from tests.support.hostile import still_serves
from wf_initiation.activities.poll import POLL_CONFIG_INVALID
from wf_initiation.activities.poll.sheet import parse_cursor
from wf_initiation.client import WfiClient
from wf_initiation.core.engine.operator import request_problem
from wf_initiation.core.limits import MAX_INT_DIGITS
from wf_initiation.wire import SetCursor, workflow_id_for

AT_LIMIT = "9" * MAX_INT_DIGITS
PAST = ["9" * (MAX_INT_DIGITS + 1), "9" * 5000, "-" + "9" * 5000, '{"v": 1, "n": ' + "1" * 5000 + "}"]

MIXED = """
name: {name}
on:
  - sheet.row_added: {{sheet: s}}
    as: row
  - http.request: {{}}
    as: hook
"""


@pytest.mark.parametrize("cursor", PAST, ids=["1001", "5000", "-5000", "nested-5000"])
def test_a_cursor_with_an_integer_past_the_limit_is_refused_before_sending(cursor: str) -> None:
    problem = request_problem(SetCursor(entry="row", cursor=cursor))
    assert problem is not None and "digits" in problem and f"{MAX_INT_DIGITS:,}" in problem, problem
    assert "set a value the connector returned" in problem


def test_a_cursor_at_the_limit_and_an_opaque_one_are_taken() -> None:
    assert request_problem(SetCursor(entry="row", cursor=AT_LIMIT)) is None
    assert request_problem(SetCursor(entry="row", cursor="opaque-" + "9" * 5000)) is None  # not JSON


def test_a_connector_handed_such_a_cursor_fails_as_a_configuration_error_naming_the_fix() -> None:
    with pytest.raises(ApplicationError) as caught:
        parse_cursor("9" * 5000)
    assert caught.value.type == POLL_CONFIG_INVALID and "clear it" in caught.value.message


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
