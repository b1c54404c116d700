"""The first hour's traps in the pure engine (issue 31, item 6): an invalid delivery names every
problem of its payload, and `pause`/`resume` of an activation with nothing to pause says so. Each
test ends with the engine accepting a normal delivery and starting its run."""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.activation import make_spec
from tests.support.engine import drive
from wf_initiation.core.engine import Disposition, Engine, StartRun, initial_state
from wf_initiation.core.engine._pipeline import LISTED_PROBLEM_CHARS, listed_problems
from wf_initiation.core.limits import MAX_MESSAGE_CHARS
from wf_initiation.wire import OperatorRequest

T0 = datetime(2026, 3, 1, tzinfo=UTC)
MAIL = """
name: mailbox
on:
  mail.received: {inbox: support@acme.com}
  as: message
"""


def mail(mid: str, **extra: Any) -> dict[str, Any]:
    return {"message_id": mid, "from": "a@b.c", "recipient": "help@acme.com", "subject": "hi", **extra}


def engine_for(tmp_path: pathlib.Path) -> Engine:
    spec = make_spec(tmp_path, MAIL, task_queue="unused")
    return drive(Engine(spec, initial_state(spec, T0)))


def assert_still_starts_a_run(engine: Engine, now: datetime) -> None:
    engine.take_commands()
    result = engine.deliver(None, mail("normal-1"), now)
    assert result.disposition == Disposition.ACCEPTED
    assert any(isinstance(c, StartRun) for c in engine.take_commands())


def test_an_invalid_delivery_names_every_problem_of_its_payload(tmp_path: pathlib.Path) -> None:
    engine = engine_for(tmp_path)
    payload = {"message_id": "m-1", "from": 7, "recipient": "help@acme.com"}  # `from` not a string, no `subject`
    result = engine.deliver(None, payload, T0)
    assert result.disposition == Disposition.INVALID
    assert result.message.startswith("2 problems: "), result.message
    assert "'subject' is a required property" in result.message
    assert "from: 7 is not of type 'string'" in result.message
    assert "more)" not in result.message
    [error] = engine.state.errors
    assert "'subject' is a required property" in error.message and "from: 7" in error.message
    assert_still_starts_a_run(engine, T0 + timedelta(seconds=1))


def test_one_problem_reads_as_before(tmp_path: pathlib.Path) -> None:
    engine = engine_for(tmp_path)
    result = engine.deliver(None, {"message_id": "m-1", "from": "a@b.c", "recipient": "help@acme.com"}, T0)
    assert result.message == "payload: 'subject' is a required property"
    assert_still_starts_a_run(engine, T0 + timedelta(seconds=1))


def test_many_long_problems_are_all_named_within_the_message_bound() -> None:
    long = [(f"field{i}", f"'{'x' * 3000}' is too long") for i in range(4)]
    text = listed_problems(long)
    assert len(text) <= LISTED_PROBLEM_CHARS < MAX_MESSAGE_CHARS
    assert all(f"field{i}: 'xx" in text for i in range(4)) and text.count("is too long") == 4
    many = [(f"f{i}", "is not of type 'string'") for i in range(60)]
    text = listed_problems(many)
    assert text.startswith("60 problems: f0: is not of type 'string'")
    assert "more at " in text and "f59" in text  # the ones that do not fit are named by where they are


def test_pause_and_resume_with_nothing_to_pause_say_so(tmp_path: pathlib.Path) -> None:
    engine = engine_for(tmp_path)
    for action in ("pause", "resume"):
        ok, message = engine.operate(OperatorRequest(action=action), T0)
        assert not ok
        assert message.startswith(f"nothing to {action}: the activation of 'mailbox' has no schedule or poll entry")
        assert "`wfi deactivate`" in message
    assert engine.state.operator_log == []  # refused: nothing recorded, nothing changed
    assert_still_starts_a_run(engine, T0 + timedelta(seconds=1))


def test_the_text_summary_shows_the_capacity_fill(tmp_path: pathlib.Path) -> None:
    # issue 32, item 6: `wfi state --summary` (text) showed no capacity fill; the JSON had it.
    import json

    from wf_initiation.cli.state import render_state
    from wf_initiation.core.limits import CAPACITY_WARNING

    engine = engine_for(tmp_path)
    for i in range(20):
        engine.deliver(None, mail(f"m-{i}"), T0 + timedelta(seconds=i))
    summary = json.loads(json.dumps(engine.summary(), default=str))  # as the query's JSON carries it
    fill = summary["capacity"]["fill"]
    [line] = [line for line in render_state(summary, None).splitlines() if line.startswith("  capacity ")]
    assert line.startswith(f"  capacity {fill:.0%} full (") and "20 dedup ids; at capacity: refuse)" in line
    assert "WARNING" not in line
    near = {**summary, "capacity": {**summary["capacity"], "fill": CAPACITY_WARNING}, "shards": [{"shard": 0}, {"shard": 1}]}
    text = render_state(near, None)
    assert "  capacity 80% full on the fullest shard (" in text and "WARNING: near capacity" in text
    assert_still_starts_a_run(engine, T0 + timedelta(minutes=1))
