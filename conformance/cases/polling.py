"""Polling initiation checked from outside (POLL-*): a CSV sheet polled through a Workfile + deployment.

Each case writes a sheet (``<name>.csv``) into the target's scratch directory and a deployment that
maps a fresh ``sheet`` connection to that directory, activates with ``wfi activate``, reads the
activation through ``wfi state --events --json`` (the cursor, cursor history and dispositions) and
steers it with ``wfi operate``. Runs go to a task queue no worker needs to serve: a case checks that
each run was *started* (``describe`` of its run key), not what it did. The deployment's worker must
see the scratch directory (it reads the sheet), which holds for a local deployment.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable
from typing import Any

from ruamel.yaml import YAML

from wf_initiation.conformance.kit import POLLING, Target, WorkfilePair, case, check, eventually
from wf_initiation.wire import ECHO_RUN_WORKFLOW

POLL = {"interval": "200ms", "backoff_initial": "200ms", "backoff_max": "1s", "limit": 100}
WAIT_S = 60.0


def _pair(target: Target, rows: list[str] | None, **settings: Any) -> tuple[WorkfilePair, pathlib.Path]:
    """A Workfile polling sheet ``<name>`` by its ``task`` column, and a deployment with its connection."""
    name = target.unique("poll")
    connection = target.unique("sheet")
    workfile = (f"name: {name}\non:\n  sheet.row_added: {{sheet: {name}, id_column: task, connection: {connection}}}\n"
                "  as: task\nsteps:\n  - id: handle\n")
    section = {"run": {"workflow_type": ECHO_RUN_WORKFLOW, "task_queue": target.unique("conformance-runs")},
               "poll": POLL, **settings}
    pair = target.write_pair(name, workfile, section)
    yaml = YAML(typ="safe", pure=True)
    doc = yaml.load(pair.deployment.read_text())
    doc.setdefault("connections", {})[connection] = {"connector": "sheet", "dir": str(target.workdir)}
    with pair.deployment.open("w") as fh:
        yaml.dump(doc, fh)
    sheet = target.workdir / f"{name}.csv"
    if rows is not None:
        sheet.write_text("task,note\n" + "".join(f"{r},n\n" for r in rows))
    return pair, sheet


async def _activate(target: Target, pair: WorkfilePair) -> dict[str, Any]:
    return await target.activate(pair)


async def _state(target: Target, pair: WorkfilePair) -> dict[str, Any]:
    return await target.state(pair, events=True)


async def _operate(target: Target, pair: WorkfilePair, *args: str) -> None:
    await target.operate(pair, *args, "--entry", "task")


async def _until(target: Target, pair: WorkfilePair, what: str, test: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The first state for which ``test(state)`` holds, within WAIT_S; CaseFailed naming ``what``."""
    return await eventually(lambda: _state(target, pair), test, what, timeout=WAIT_S,
                            describe=lambda s: json.dumps(s.get("polls"), default=str)[:800])


def _ids(state: dict[str, Any], *dispositions: str) -> list[str]:
    events = sorted(state.get("events", {}).values(), key=lambda e: e["seq"])
    return [e["delivery_id"] for e in events if e["entry"] == "task" and e["disposition"] in dispositions]


def _poll(state: dict[str, Any]) -> dict[str, Any]:
    return state["polls"]["task"]


async def _started(target: Target, state: dict[str, Any], ids: list[str]) -> None:
    client = await target.client()
    events = {e["delivery_id"]: e for e in state["events"].values() if e["entry"] == "task"}
    keys = [events[i]["run_key"] for i in ids]
    check(len(set(keys)) == len(ids) and all(keys), f"expected one distinct run per item, got run keys {keys}")
    for key in keys:
        desc = await client.get_workflow_handle(key).describe()
        check(desc.id == key, f"run {key} was not started")


@case(capability=POLLING, clauses=["POLL-1", "POLL-5", "POLL-6", "POLL-8", "POLL-11"])
async def each_appended_row_starts_one_run_in_sheet_order_and_an_invalid_row_is_quarantined(target: Target) -> None:
    pair, sheet = _pair(target, ["t1", "t2", "", "t3"], invalid_items="quarantine")
    await _activate(target, pair)
    state = await _until(target, pair, "cursor after row 4 with t1, t2, t3 accepted and one row quarantined",
                         lambda s: _poll(s)["cursor"] == "4" and len(_ids(s, "accepted", "queued")) == 3)
    check(_ids(state, "accepted", "queued") == ["t1", "t2", "t3"], f"acceptance order: {_ids(state, 'accepted', 'queued')}")
    check(len(_ids(state, "quarantined")) == 1, f"expected one quarantine record, got {_ids(state, 'quarantined')}")
    await _started(target, state, ["t1", "t2", "t3"])
    with sheet.open("a") as fh:
        fh.write("t4,n\n")
    state = await _until(target, pair, "row 5 (t4) accepted after being appended",
                         lambda s: _poll(s)["cursor"] == "5" and "t4" in _ids(s, "accepted", "queued"))
    await _started(target, state, ["t4"])


@case(capability=POLLING, clauses=["POLL-11"])
async def an_invalid_row_under_hold_stops_the_cursor_until_an_operator_quarantines_it(target: Target) -> None:
    pair, _ = _pair(target, ["t1", "", "t3"], invalid_items="hold")
    await _activate(target, pair)
    state = await _until(target, pair, "cursor held at row 1 with a held item",
                         lambda s: _poll(s)["cursor"] == "1" and _poll(s)["held"] is not None)
    check(_ids(state, "accepted", "queued") == ["t1"], f"nothing after the held row may start: {_ids(state, 'accepted')}")
    check(state["summary"]["status"] == "needs_operator", f"status should ask for an operator: {state['summary']['status']}")
    await _operate(target, pair, "release_held", "--choice", "quarantine", "--note", "empty task")
    state = await _until(target, pair, "cursor past the quarantined row and t3 accepted",
                         lambda s: _poll(s)["cursor"] == "3" and "t3" in _ids(s, "accepted", "queued"))
    check(len(_ids(state, "quarantined")) == 1 and _poll(state)["held"] is None, f"quarantine not retained: {_poll(state)}")


@case(capability=POLLING, clauses=["POLL-4", "POLL-9"])
async def a_cursor_set_by_an_operator_is_recorded_and_a_re_read_starts_no_second_run(target: Target) -> None:
    pair, _ = _pair(target, ["t1", "t2"])
    await _activate(target, pair)
    await _until(target, pair, "both rows accepted", lambda s: _poll(s)["cursor"] == "2")
    await _operate(target, pair, "set_cursor", "--cursor", "0", "--note", "conformance rewind")
    state = await _until(target, pair, "the rewind recorded and both rows read again as duplicates",
                         lambda s: _poll(s)["cursor_changes"] and _poll(s)["cursor"] == "2"
                         and s["counters"].get("duplicates", 0) >= 2)
    change = _poll(state)["cursor_changes"][-1]
    check((change["old"], change["new"], change["note"]) == ("2", "0", "conformance rewind"),
          f"cursor change not recorded as (old, new, note): {change}")
    check(change.get("at"), f"cursor change has no time: {change}")
    check(_ids(state, "accepted", "queued") == ["t1", "t2"], f"re-read rows must not start again: {_ids(state, 'accepted')}")
    check(state["counters"].get("runs_started") == 2, f"runs started: {state['counters'].get('runs_started')}")


@case(capability=POLLING, clauses=["POLL-10", "POLL-2"])
async def a_missing_sheet_starts_nothing_backs_off_and_every_row_is_read_once_it_appears(target: Target) -> None:
    pair, sheet = _pair(target, None)
    await _activate(target, pair)
    state = await _until(target, pair, "repeated poll failures", lambda s: _poll(s)["failures"] >= 2)
    check(_poll(state)["cursor"] is None and not state["counters"].get("runs_started"),
          f"a failed poll must start nothing and keep the cursor: {_poll(state)}")
    sheet.write_text("task,note\nt1,a\nt2,b\n")
    state = await _until(target, pair, "both rows accepted after the sheet appears",
                         lambda s: _poll(s)["cursor"] == "2" and _poll(s)["failures"] == 0)
    check(_ids(state, "accepted", "queued") == ["t1", "t2"], f"accepted: {_ids(state, 'accepted', 'queued')}")


CASES = (
    each_appended_row_starts_one_run_in_sheet_order_and_an_invalid_row_is_quarantined,
    an_invalid_row_under_hold_stops_the_cursor_until_an_operator_quarantines_it,
    a_cursor_set_by_an_operator_is_recorded_and_a_re_read_starts_no_second_run,
    a_missing_sheet_starts_nothing_backs_off_and_every_row_is_read_once_it_appears,
)
