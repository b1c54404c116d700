"""A `sql.row_inserted` cursor no SQL integer column can hold (issue 32 item 6).

An operator may set a cursor of up to 1,000 digits (the engine's integer bound): no SQLite or
PostgreSQL integer column holds such a value, and binding it failed every poll as a transient
``OverflowError``. The connector refuses it as ``PollConfigInvalid`` naming the fix; once the
operator sets a usable cursor, the activation polls again and starts a run.
"""

from __future__ import annotations

import pathlib
import sqlite3
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from tests.support.activation import make_spec, unique
from tests.support.pollsources import activity_env
from tests.support.waits import assert_eventually
from wf_initiation.activities.poll import POLL_CONFIG_INVALID, PollRequest, poll_sql
from wf_initiation.client import WfiClient
from wf_initiation.wire import OperatorRequest

FAST_POLL = {"interval": "200ms", "backoff_initial": "200ms", "backoff_max": "1s", "limit": 50}
HUGE = "9" * 1000


def table(path: pathlib.Path, *ids: str) -> pathlib.Path:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE IF NOT EXISTS items (seq INTEGER PRIMARY KEY AUTOINCREMENT, item_id TEXT)")
        db.executemany("INSERT INTO items (item_id) VALUES (?)", [(i,) for i in ids])
    return path


@pytest.mark.parametrize("cursor", [HUGE, "-" + HUGE, str(2**63), str(-(2**63) - 1)])
async def test_an_integer_cursor_past_64_bits_is_an_invalid_configuration_naming_the_fix(tmp_path, cursor):
    db = table(tmp_path / "src.db", "a")
    req = PollRequest(connector="sql.row_inserted", config={"table": "items", "column": "seq"},
                      connection={"sqlite": str(db)}, cursor=cursor)
    with pytest.raises(ApplicationError) as caught:
        await activity_env().run(poll_sql, req)
    error = caught.value
    assert error.type == POLL_CONFIG_INVALID and "64-bit" in error.message and "set_cursor" in error.message
    assert "OverflowError" not in error.message and len(error.message) < 600


@pytest.mark.parametrize("cursor", [str(2**63 - 1), str(-(2**63))])
async def test_the_64_bit_bounds_themselves_are_read(tmp_path, cursor):
    db = table(tmp_path / "src.db", "a")
    req = PollRequest(connector="sql.row_inserted", config={"table": "items", "column": "seq"},
                      connection={"sqlite": str(db)}, cursor=cursor)
    response = await activity_env().run(poll_sql, req)
    assert [i.payload["row_id"] for i in response.items] == ([] if cursor.startswith("9") else ["1"])


async def operate(wfi: WfiClient, name: str, action: str, **kw: Any) -> None:
    result = await wfi.operate(name, OperatorRequest(action=action, **kw))
    assert result.ok, result.message


async def test_an_activation_given_a_1000_digit_cursor_says_so_and_polls_again_once_it_is_set_right(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path
):
    db = table(tmp_path / "src.db", "r1")
    name = unique("sqlcursor")
    spec = make_spec(tmp_path, f"""
        name: {name}
        on:
          sql.row_inserted: {{table: items, column: seq, id_column: item_id}}
          as: row
    """, task_queue=task_queue, connections={"db": {"connector": "sql", "sqlite": str(db)}}, poll=FAST_POLL)
    await wfi.activate(spec)
    query = f'WfiActivation = "{spec.activation_id}" AND WorkflowType = "wfi.EchoRun"'

    async def runs() -> set[str]:
        return {w.id async for w in dev_env.client.list_workflows(query)}

    async def first_run() -> None:
        assert await runs() == {f"{spec.activation_id}/row/r1"}

    await assert_eventually(first_run)
    await operate(wfi, name, "set_cursor", entry="row", cursor=HUGE, note="a cursor no column holds")

    async def refused_with_the_fix() -> None:
        poll = (await wfi.state(name))["polls"]["row"]
        assert poll["failures"] >= 1 and "64-bit" in (poll["last_error"] or ""), poll
        assert "OverflowError" not in poll["last_error"] and "set_cursor" in poll["last_error"]

    await assert_eventually(refused_with_the_fix)
    table(db, "r2")
    await operate(wfi, name, "set_cursor", entry="row", cursor="1", note="back after r1")

    async def polls_and_starts_a_run() -> None:
        assert await runs() == {f"{spec.activation_id}/row/r1", f"{spec.activation_id}/row/r2"}
        assert (await wfi.state(name))["polls"]["row"]["failures"] == 0

    await assert_eventually(polls_and_starts_a_run)
