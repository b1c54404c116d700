"""Hostile input in the pure engine (issue 11): every limit of core.limits at the limit and one past
it, with no server. Each test ends with the engine accepting a normal delivery and starting its run.

The same inputs against a real activation are in tests/test_hostile_*.py (dev server)."""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.activation import make_spec
from tests.support.engine import drive
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.engine import Disposition, Engine, SignalRun, StartRun, SubscribeRequest, initial_state
from wf_initiation.core.limits import (
    ADMIT_PER_TASK,
    MAX_BACKFILL,
    MAX_BATCH_BYTES,
    MAX_CURSOR_CHARS,
    MAX_DELIVERY_BYTES,
    MAX_DELIVERY_ID_CHARS,
    MAX_HELD_BYTES,
    MAX_MESSAGE_CHARS,
    MAX_PAYLOAD_DEPTH,
    MAX_SUBSCRIPTIONS,
    fit_to_bytes,
    json_size,
)
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


def engine_for(spec: ActivationSpec) -> Engine:
    return drive(Engine(spec, initial_state(spec, T0)))


def starts(engine: Engine) -> list[StartRun]:
    return [c for c in engine.take_commands() if isinstance(c, StartRun)]


def nested(depth: int) -> dict[str, Any]:
    """A payload whose objects nest ``depth`` levels (the mail itself is level 1)."""
    value: Any = "leaf"
    for _ in range(depth - 1):
        value = {"a": value}
    return mail("deep", extra=value) if depth > 1 else mail("deep")


def assert_still_serves(engine: Engine, mid: str = "normal") -> None:
    result = engine.deliver(None, mail(mid, thread_id=mid), T0)
    assert result.disposition == Disposition.ACCEPTED, result
    assert [s.run_key for s in starts(engine)] == [result.run_key]


@pytest.fixture
def mailbox(tmp_path: pathlib.Path) -> Engine:
    return engine_for(make_spec(tmp_path, MAIL, task_queue="tq"))


# ------------------------------------------------------------------------------- item 1: depth


def test_a_payload_nested_at_the_depth_limit_is_accepted_and_one_level_deeper_is_invalid(mailbox: Engine) -> None:
    # proves: EXT-2, EXT-9
    at_limit = mailbox.deliver(None, {**nested(MAX_PAYLOAD_DEPTH), "message_id": "at"}, T0)
    assert at_limit.disposition == Disposition.ACCEPTED
    starts(mailbox)
    past = mailbox.deliver(None, {**nested(MAX_PAYLOAD_DEPTH + 1), "message_id": "past"}, T0)
    assert past.disposition == Disposition.INVALID and f"more than {MAX_PAYLOAD_DEPTH} levels" in past.message
    assert starts(mailbox) == []
    assert_still_serves(mailbox, "past")  # the invalid delivery did not consume its id (EXT-10)


# ------------------------------------------------------------------------------- item 4: numbers


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 10**1000, "\ud800"],
                         ids=["nan", "inf", "-inf", "1001-digit int", "lone surrogate"])
def test_a_value_json_cannot_carry_is_invalid_never_a_failed_task(mailbox: Engine, value: Any) -> None:
    # proves: EXT-9, EXT-10
    result = mailbox.deliver(None, mail("m1", score=value), T0)
    assert result.disposition == Disposition.INVALID and result.delivery_id == "m1"
    assert mailbox.state.errors[-1].kind == "invalid"
    assert_still_serves(mailbox, "m1")


def test_a_thousand_digit_integer_is_still_a_number(mailbox: Engine) -> None:
    assert mailbox.deliver(None, mail("big", n=10**999), T0).disposition == Disposition.ACCEPTED


# ------------------------------------------------------------------------------- bytes and ids


def test_a_payload_at_the_byte_limit_is_accepted_and_one_byte_more_is_invalid(mailbox: Engine) -> None:
    # proves: EXT-9
    base = mail("size", text="")
    room = MAX_DELIVERY_BYTES - json_size(base)
    at = mailbox.deliver(None, {**base, "text": "x" * room}, T0)
    assert at.disposition == Disposition.ACCEPTED
    starts(mailbox)
    over = mailbox.deliver(None, {**base, "message_id": "size2", "text": "x" * (room + 1)}, T0)
    assert over.disposition == Disposition.INVALID and f"the limit is {MAX_DELIVERY_BYTES}" in over.message
    assert_still_serves(mailbox)


SQL = """
name: rows
on:
  sql.row_inserted: {table: items, column: seq}
  as: row
"""


def test_a_delivery_id_at_the_limit_is_accepted_and_one_character_more_is_invalid(tmp_path: pathlib.Path) -> None:
    # proves: POLL-5, EXT-10
    spec = make_spec(tmp_path, SQL, task_queue="tq", connections={"db": {"connector": "sql", "sqlite": str(tmp_path / "s.db")}})
    engine = engine_for(spec)
    entry = "row"  # a poll item, straight into the pipeline
    at = engine.deliver_event(entry, {"row_id": "i" * MAX_DELIVERY_ID_CHARS, "table": "items", "row": {}}, T0)
    assert at.disposition == Disposition.ACCEPTED and len(starts(engine)) == 1
    past = engine.deliver_event(entry, {"row_id": "i" * (MAX_DELIVERY_ID_CHARS + 1), "table": "items", "row": {}}, T0)
    assert past.disposition == Disposition.INVALID and "the limit is 1024" in past.message
    assert past.delivery_id.startswith("sha256:")
    assert engine.deliver_event(entry, {"row_id": "ok", "table": "items", "row": {}}, T0).disposition == Disposition.ACCEPTED


def test_invalid_deliveries_with_huge_ids_keep_only_digests(mailbox: Engine) -> None:
    # proves: EXT-10
    long_id = "j" * (200 * 1024)
    for _ in range(250):  # more than the error log keeps
        result = mailbox.deliver(None, mail(long_id), T0)
        assert result.disposition == Disposition.INVALID
        assert result.delivery_id.startswith("sha256:") and len(result.delivery_id) < 100
    assert all(len(e.message) <= MAX_MESSAGE_CHARS for e in mailbox.state.errors)
    assert json_size(mailbox.state.model_dump(mode="json")) < 200 * 1024, "the state keeps no 200 KB id"
    assert_still_serves(mailbox)


def test_a_schema_message_that_quotes_a_huge_value_is_cut(tmp_path: pathlib.Path) -> None:
    engine = engine_for(make_spec(tmp_path, "name: hooks\non:\n  http.request: {}\n", task_queue="tq"))
    result = engine.deliver(None, {"delivery_id": "x" * 300_000, "method": "POST", "body": {}}, T0)
    assert result.disposition == Disposition.INVALID
    assert len(result.message) <= MAX_MESSAGE_CHARS and len(engine.state.errors[-1].message) <= MAX_MESSAGE_CHARS
    ok = engine.deliver(None, {"delivery_id": "ok", "method": "POST", "body": {}}, T0)
    assert ok.disposition == Disposition.ACCEPTED and len(starts(engine)) == 1


# ------------------------------------------------------------------------------- item 2: held bytes, batches


def test_payloads_held_for_queued_runs_are_bounded_and_the_next_is_deferred_not_consumed(tmp_path: pathlib.Path) -> None:
    # proves: EXT-8, EXT-11
    spec = make_spec(tmp_path, MAIL + '  queue_by: "{{ message.thread_id }}"\n', task_queue="tq")
    engine = engine_for(spec)
    body = "x" * (200 * 1024)
    results = [engine.deliver(None, mail(f"q{i}", thread_id="t", body=body), T0) for i in range(8)]
    kinds = [r.disposition for r in results]
    assert kinds[0] == Disposition.ACCEPTED and Disposition.QUEUED in kinds
    deferred = [r for r in results if r.disposition == Disposition.DEFERRED]
    assert deferred and "deliver it again later" in deferred[0].message
    held = sum(r.input_bytes for r in engine.state.runs.values() if r.status == "pending")
    assert held <= MAX_HELD_BYTES
    (first,) = starts(engine)
    engine.run_started(first.run_key, "rid", T0)
    engine.run_finished(first.run_key, "completed", T0)  # the next queued run starts: bytes freed
    assert [s.run_key for s in starts(engine)] == [results[1].run_key]
    again = engine.deliver(None, mail(deferred[0].delivery_id, thread_id="t", body=body), T0)
    assert again.disposition == Disposition.QUEUED, "a deferred delivery consumed nothing: delivered again, accepted"
    assert_still_serves(engine)


def test_a_batch_closes_early_when_its_next_event_would_pass_the_byte_budget(tmp_path: pathlib.Path) -> None:
    # proves: BATCH-2, BATCH-4
    spec = make_spec(tmp_path, MAIL + "  batch: {size: 20, max_wait: 1h}\n", task_queue="tq")
    engine = engine_for(spec)
    body = "y" * (150 * 1024)
    results = [engine.deliver(None, mail(f"b{i}", body=body), T0) for i in range(20)]
    assert {r.disposition for r in results} == {Disposition.BATCHED}
    runs = starts(engine)
    assert len(runs) >= 6, "20 x 150 KB make several runs, none over the batch budget"
    for run in runs:
        assert json_size(run.input.bindings["message"]) <= MAX_BATCH_BYTES
    assert sum(len(r.input.bindings["message"]) for r in runs) + len(engine.state.batches["message\x1f"].events) == 20
    assert engine.state.counters["batches_closed_by_bytes"] == len(runs)


# ------------------------------------------------------------------------------- item 1: start faults


def test_a_run_that_cannot_start_is_a_start_fault_that_frees_its_queue_key(tmp_path: pathlib.Path) -> None:
    # proves: TRIG-11, TRIG-14
    spec = make_spec(tmp_path, MAIL + '  queue_by: "{{ message.thread_id }}"\n', task_queue="tq")
    engine = engine_for(spec)
    bad = engine.deliver(None, mail("bad", thread_id="t"), T0)
    waiting = engine.deliver(None, mail("next", thread_id="t"), T0)
    assert (bad.disposition, waiting.disposition) == (Disposition.ACCEPTED, Disposition.QUEUED)
    starts(engine)
    engine.run_start_failed(bad.run_key, "its input is 3000000 bytes", T0)
    assert [s.run_key for s in starts(engine)] == [waiting.run_key], "the queued run starts: nothing is blocked"
    record = engine.lookup("message\x1fbad")
    assert record.disposition == Disposition.START_FAULT and "3000000 bytes" in record.detail
    assert engine.state.counters["start_faults"] == 1 and engine.state.errors[-1].kind == "start_fault"
    assert engine.deliver(None, mail("bad", thread_id="t"), T0).retained == Disposition.START_FAULT
    assert_still_serves(engine)


# ------------------------------------------------------------------------------- item 7: large backfills

SCHED = """
name: ticks
on:
  - time.schedule: {cron: "* * * * *", timezone: UTC}
    as: tick
    when: "{{ tick.scheduled_at.endswith('00:00+00:00') }}"
  - http.request: {}
    as: hook
"""


def _work_off(engine: Engine, now: datetime) -> tuple[int, list[StartRun]]:
    tasks, started = 0, []
    while any(j.status in ("counting", "admitting") for st in engine.state.schedules.values() for j in st.jobs):
        engine.begin_task()
        engine.tick(now)
        batch = starts(engine)
        assert len(batch) <= ADMIT_PER_TASK
        started += batch
        tasks += 1
        assert tasks < 200
    return tasks, started


@pytest.mark.parametrize("minutes", [3000, MAX_BACKFILL])
def test_a_backfill_up_to_the_limit_is_worked_off_in_bounded_tasks(tmp_path: pathlib.Path, minutes: int) -> None:
    # proves: SCHED-5, SCHED-9
    spec = make_spec(tmp_path, SCHED, task_queue="tq")
    engine = engine_for(spec)
    now = T0 + timedelta(days=10, seconds=30)
    while engine.state.schedules["tick"].next_instant <= now:  # the activation catches up with the clock
        engine.begin_task()
        engine.tick(now)
    starts(engine)
    first = T0 + timedelta(minutes=1)
    ok, message = engine.operate(OperatorRequest(action="backfill", entry="tick", start=first.isoformat(),
                                                         end=(first + timedelta(minutes=minutes - 1)).isoformat()), now)
    assert ok and "job" in message, message
    tasks, started = _work_off(engine, now)
    (job,) = engine.state.schedules["tick"].jobs
    assert (job.status, job.total, job.admitted + job.other) == ("done", minutes, minutes), job
    assert len(started) == job.admitted == minutes // 60, "one run per hour of the range, the rest suppressed"
    assert tasks >= minutes // ADMIT_PER_TASK
    ok, again = engine.operate(OperatorRequest(action="backfill", entry="tick", start=first.isoformat(),
                                                       end=(first + timedelta(minutes=minutes - 1)).isoformat()), now)
    _work_off(engine, now)
    assert engine.state.schedules["tick"].jobs[-1].duplicates == minutes, "a repeated backfill admits nothing twice"
    hook = engine.deliver("hook", {"delivery_id": "after", "method": "POST", "body": {}}, now)
    assert hook.disposition == Disposition.ACCEPTED and len(starts(engine)) == 1


def test_a_backfill_one_past_the_limit_is_refused_with_nothing_admitted(tmp_path: pathlib.Path) -> None:
    # proves: SCHED-5
    engine = engine_for(make_spec(tmp_path, SCHED, task_queue="tq"))
    now = T0 + timedelta(days=10)
    first = T0 + timedelta(minutes=1)
    ok, _ = engine.operate(OperatorRequest(action="backfill", entry="tick", start=first.isoformat(),
                                                   end=(first + timedelta(minutes=MAX_BACKFILL)).isoformat()), now)
    assert ok
    _, started = _work_off(engine, now)
    (job,) = engine.state.schedules["tick"].jobs
    assert job.status == "refused" and started == [] and job.admitted == 0
    assert engine.state.errors[-1].kind == "backfill_refused" and "split it" in engine.state.errors[-1].message
    hook = engine.deliver("hook", {"delivery_id": "after", "method": "POST", "body": {}}, now)
    assert hook.disposition == Disposition.ACCEPTED and len(starts(engine)) == 1


# ------------------------------------------------------------------------------- operators


def test_a_reused_action_id_with_other_content_is_refused_and_the_same_content_is_a_repeat(tmp_path: pathlib.Path) -> None:
    engine = engine_for(make_spec(tmp_path, SCHED, task_queue="tq"))
    now = T0 + timedelta(hours=1)
    first = engine.operate(OperatorRequest(action="pause", entry="tick", action_id="a1"), now)
    same = engine.operate(OperatorRequest(action="pause", entry="tick", action_id="a1"), now)
    other = engine.operate(OperatorRequest(action="resume", entry="tick", action_id="a1"), now)
    assert first[0] and same == (True, "already applied")
    assert not other[0] and "already used for a different action" in other[1]
    assert engine.state.schedules["tick"].paused, "the first action stands"
    long_note = engine.operate(OperatorRequest(action="drop_pending", run_key="r", note="n" * 5000), now)
    assert not long_note[0] and "note has 5000 characters" in long_note[1]


SHEET = """
name: rows
on:
  sheet.row_added: {sheet: s}
  as: row
"""


def sheet_spec(tmp_path: pathlib.Path) -> ActivationSpec:
    (tmp_path / "s.csv").write_text("id\n")
    return make_spec(tmp_path, SHEET, task_queue="tq",
                     connections={"sheets": {"connector": "sheet", "sheets": {"s": str(tmp_path / "s.csv")}}})


@pytest.mark.parametrize(("cursor", "ok"), [
    ("1e999", False), ("NaN", False), ('{"v": Infinity}', False), ("c" * (MAX_CURSOR_CHARS + 1), False),
    ("7", True), ("opaque-token", True), ('"' + "c" * (MAX_CURSOR_CHARS - 2) + '"', True),
])
def test_set_cursor_takes_only_a_cursor_a_connector_could_have_returned(tmp_path: pathlib.Path, cursor: str, ok: bool) -> None:
    # proves: POLL-4
    engine = engine_for(sheet_spec(tmp_path))
    applied, message = engine.operate(OperatorRequest(action="set_cursor", entry="row", cursor=cursor), T0)
    assert applied is ok, message
    st = engine.state.polls["row"]
    assert (st.cursor == cursor) is ok
    assert all(len(c.new or "") <= 300 for c in st.cursor_changes), "the log keeps a digest of a long cursor"


# ------------------------------------------------------------------------------- subscriptions


def test_an_event_for_a_forged_subscription_is_released_when_its_subscriber_cannot_be_signalled(tmp_path: pathlib.Path) -> None:
    # proves: INIT-8, INIT-9
    engine = engine_for(make_spec(tmp_path, MAIL, task_queue="tq"))
    engine.subscribe(SubscribeRequest(sub_id="forged/1", entry="message", run_workflow_id="no-such-workflow"), T0)
    swallowed = engine.deliver(None, mail("e1"), T0)
    assert swallowed.disposition == Disposition.DELIVERED
    (signal,) = [c for c in engine.take_commands() if isinstance(c, SignalRun)]
    engine.command_done(signal.key, "workflow not found", T0)  # what the shell reports when the signal fails
    record = engine.lookup("message\x1fe1")
    assert record.disposition == Disposition.ACCEPTED and len(starts(engine)) == 1, "the event got its run after all"
    assert engine.state.errors[-1].kind == "delivery_failed" and "released" in engine.state.errors[-1].message
    assert_still_serves(engine)


def test_subscriptions_are_bounded_in_size_and_number(tmp_path: pathlib.Path) -> None:
    engine = engine_for(make_spec(tmp_path, MAIL, task_queue="tq"))
    engine.subscribe(SubscribeRequest(sub_id="big", entry="message", run_workflow_id="r",
                                            match={"subject": "s" * 5000}), T0)
    assert "big" not in engine.state.subscriptions and "match" in engine.state.errors[-1].message
    for i in range(MAX_SUBSCRIPTIONS):
        engine.state.subscriptions[f"s{i}"] = engine.state.subscriptions.get(f"s{i}") or _sub(f"s{i}")
    engine.subscribe(SubscribeRequest(sub_id="one-more", entry="message", run_workflow_id="r"), T0)
    assert "one-more" not in engine.state.subscriptions and "limit" in engine.state.errors[-1].message


def _sub(sub_id: str) -> Any:
    from wf_initiation.core.engine._types import Subscription

    return Subscription(sub_id=sub_id, entry="message", run_workflow_id="r", match={"subject": sub_id},
                        created_at=T0, seq=0)


# ------------------------------------------------------------------------------- queries


def test_a_query_result_is_trimmed_to_the_limit_and_says_what_was_cut(mailbox: Engine) -> None:
    for i in range(3000):
        mailbox.core.record_error(T0, "invalid", "e" * 400, "message", f"id-{i}")
    mailbox.state.errors = mailbox.state.errors * 30  # far past what the engine itself keeps
    limit = 256 * 1024
    fitted = fit_to_bytes(mailbox.full_state(), limit)
    assert json_size(fitted) <= limit and "errors" in fitted["trimmed"]
    assert fitted["errors"][-1] == mailbox.state.errors[-1].model_dump(mode="json"), "the newest are kept"
