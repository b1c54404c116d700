"""The operator request as a discriminated union (issue 14 item 2): one model per action with exactly
its fields, `wfi operate` sub-commands and flags derived from it, and the old flat shape that recorded
histories carry still decoded and applied exactly as before."""

from __future__ import annotations

import argparse
import base64
import json
import pathlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter

from tests.support.activation import make_spec
from tests.support.paths import HISTORIES
from wf_initiation.cli import build_parser
from wf_initiation.core.engine import Engine, initial_state, operator
from wf_initiation.wire import (
    ACTIONS,
    OPERATE_UPDATE,
    AdmitPending,
    Backfill,
    DecideOverflow,
    DropPending,
    LegacyOperatorRequest,
    OperatorRequest,
    Pause,
    PollNow,
    Redrive,
    ReleaseHeld,
    Resume,
    SetCursor,
    Trigger,
)

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
WORKFILE = """
name: {name}
on:
  - time.schedule: {{cron: "0 * * * *", timezone: UTC}}
    as: tick
  - sheet.row_added: {{sheet: s}}
    as: row
  - http.request: {{}}
    as: hook
"""

EXACT_FIELDS = {
    Pause: {"entry", "note"}, Resume: {"entry", "note"}, Trigger: {"entry", "note"}, PollNow: {"entry"}, SetCursor: {"entry", "cursor", "note"},
    ReleaseHeld: {"entry", "choice", "note"}, Backfill: {"entry", "start", "end"},
    DecideOverflow: {"range_id", "choice", "count", "note"}, AdmitPending: {"run_key"}, DropPending: {"run_key", "note"},
    Redrive: {"kind", "entry", "delivery_id", "first", "last", "all_events", "note", "payloads"},
}
CLIENT_FILLED = {"payloads"}  # read back from history by WfiClient.redrive: no flag


def test_every_action_is_a_model_with_exactly_its_fields_each_described() -> None:
    assert set(ACTIONS) == set(EXACT_FIELDS)
    for model, fields in EXACT_FIELDS.items():
        assert set(model.model_fields) == fields | {"action", "action_id"}, model.__name__
        assert all(info.description for info in model.model_fields.values() if info is not model.model_fields["action"])
    request = OperatorRequest(action="set_cursor", entry="row", cursor="7")
    assert isinstance(request.root, SetCursor) and (request.action, request.action_id) == ("set_cursor", None)
    copied = request.model_copy(update={"action_id": "a-2"})
    assert (copied.action_id, copied.root.cursor, request.action_id) == ("a-2", "7", None)


@pytest.mark.parametrize(("fields", "problem"), [
    ({"action": "pause", "cursor": "7"}, "Extra inputs are not permitted"),  # a field of another action
    ({"action": "backfill", "entry": "tick", "start": "2026-12-01T00:00:00Z"}, "Field required"),
    ({"action": "release_held", "choice": "later"}, "Input should be 'quarantine' or 'retry'"),
    ({"action": "explode"}, "does not match any of the expected tags"),
])
def test_a_new_request_carries_exactly_its_actions_fields(fields: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        OperatorRequest(**fields)


def flat(action: str, **fields: Any) -> dict[str, Any]:
    """A request as builds before the union sent it: every field, null where unused."""
    return {name: None for name in LegacyOperatorRequest.model_fields} | {"action": action, **fields}


def engines(tmp_path: pathlib.Path) -> tuple[Engine, Engine]:
    """Two engines of one activation, in the same state."""
    (tmp_path / "s.csv").write_text("id\n")
    spec = make_spec(tmp_path, WORKFILE.format(name="ops"), task_queue="tq",
                     connections={"sheets": {"connector": "sheet", "sheets": {"s": str(tmp_path / "s.csv")}}})
    return Engine(spec, initial_state(spec, T0)), Engine(spec, initial_state(spec, T0))


# Old-shape requests as recorded, including what the new models refuse: fields of another action
# (ignored then, part of the digest then), a choice no action knows, a backfill without its instants.
LEGACY = [
    flat("pause", action_id="cli-1"),
    flat("pause", entry="tick", note="maintenance", action_id="a-note"),
    flat("resume", entry="tick", cursor="stray"),
    flat("poll_now", entry="row"),
    flat("set_cursor", entry="row", cursor="3", note="skip", action_id="c-1"),
    flat("set_cursor", entry="row"),
    flat("release_held", entry="row", choice="later"),
    flat("backfill", entry="tick"),
    flat("backfill", entry="tick", start="2026-12-01T05:00:00+00:00", end="2026-12-01T07:00:00+00:00", count=3),
    flat("decide_overflow", range_id="nope", choice="admit_first", count=2),
    flat("admit_pending", run_key="no-such-run", note="why"),
    flat("drop_pending", run_key="no-such-run", note="n" * 5000),
]


@pytest.mark.parametrize("request_json", LEGACY, ids=lambda r: f"{r['action']}-{sum(v is not None for v in r.values())}")
def test_an_old_flat_request_is_applied_exactly_as_before(tmp_path: pathlib.Path, request_json: dict[str, Any]) -> None:
    # The old model applied directly (what the engine did with it then) against the union decoding it
    # from the wire as a worker does now: same answer, same state, same content digest.
    before, now = engines(tmp_path)
    (decoded,) = pydantic_data_converter.payload_converter.from_payloads(
        [Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(request_json).encode())], [OperatorRequest])
    old = LegacyOperatorRequest.model_validate(request_json)
    at = T0 + timedelta(hours=1)
    assert now.operate(decoded, at) == before.operate(old, at)  # the outcome and the commands
    assert now.full_state() == before.full_state()
    assert operator.content_digest(decoded) == operator.content_digest(old)
    # and a repeat under the same id is a repeat, as it was
    if old.action_id:
        again = now.operate(decoded, at)
        assert again == before.operate(old, at) and (again.value.ok, again.value.message) == (True, "already applied")


def test_the_recorded_history_carries_the_old_shape_and_it_decodes() -> None:
    history = json.loads((HISTORIES / "schedule-2026-11-30.json").read_text())
    found = []
    for event in history["events"]:
        accepted = event.get("workflowExecutionUpdateAcceptedEventAttributes")
        if accepted and accepted["acceptedRequest"]["input"]["name"] == OPERATE_UPDATE:
            (payload,) = accepted["acceptedRequest"]["input"]["args"]["payloads"]
            data = base64.b64decode(payload["data"])
            assert set(json.loads(data)) == set(LegacyOperatorRequest.model_fields), "the flat shape"
            (decoded,) = pydantic_data_converter.payload_converter.from_payloads(
                [Payload(metadata={"encoding": b"json/plain"}, data=data)], [OperatorRequest])
            found.append((decoded.action, type(decoded.root)))
    assert found == [("pause", Pause), ("resume", Resume)]


def _operate_parser() -> argparse.ArgumentParser:
    verbs = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    operate = verbs.choices["operate"]
    return next(a for a in operate._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_wfi_operate_has_a_sub_command_per_action_with_its_flags_and_their_descriptions() -> None:
    actions = _operate_parser()
    assert set(actions) == {m.model_fields["action"].default for m in ACTIONS}
    for model in ACTIONS:
        sub = actions[model.model_fields["action"].default]
        flags = {a.dest: a for a in sub._actions if a.option_strings and a.dest in model.model_fields}
        assert set(flags) == set(model.model_fields) - {"action"} - CLIENT_FILLED, model.__name__
        for name, flag in flags.items():
            info = model.model_fields[name]
            assert flag.option_strings == ["--" + name.replace("_", "-")]
            assert flag.help == info.description and flag.required == info.is_required()
    redrive = build_parser().parse_args(["operate", "redrive", "--all-events", "--kind", "invalid", "--shard", "1",
                                         "--workflow", "w", "--deployment", "d"])
    assert (redrive.all_events, redrive.kind, redrive.shard) == (True, "invalid", 1)
    choice = {a.dest: a for a in actions["decide_overflow"]._actions}["choice"]
    assert choice.choices == ["admit_all", "admit_first", "skip"]
    assert {a.dest: a for a in actions["decide_overflow"]._actions}["count"].type is int


def test_wfi_operate_parses_flags_on_either_side_of_the_action() -> None:
    parser = build_parser()
    after = parser.parse_args(["operate", "set_cursor", "--entry", "row", "--cursor", "C", "--workflow", "w",
                               "--deployment", "d.yaml", "--timeout", "5"])
    before = parser.parse_args(["operate", "--workflow", "w", "--deployment", "d.yaml", "--timeout", "5",
                                "set_cursor", "--entry", "row", "--cursor", "C"])
    for args in (after, before):
        assert (args.action, args.entry, args.cursor, args.workflow, args.deployment, args.timeout) == (
            "set_cursor", "row", "C", "w", "d.yaml", 5.0)
    assert parser.parse_args(["operate", "pause", "--workflow", "w", "--deployment", "d"]).timeout == 60.0
