"""Re-drive in the pure engine (issue 36 item 3): an event that did not run (invalid, quarantined, a
start fault, a deferred signal) is kept and offered again by an operator action once its cause is
fixed: at most one run per event, its original delivery id kept, a second re-drive refused. The
workflow side: tests/integration/test_redrive.py."""

from __future__ import annotations

import json
import pathlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from tests.support.activation import make_spec
from tests.support.engine import Driver, drive
from tests.support.polled import row, spec_for
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.engine import (
    Compat,
    Disposition,
    Engine,
    EngineState,
    OperatorOutcome,
    PollItemIn,
    PollResultIn,
    StartRun,
    _intake,
    _kept,
    _redrive,
    decode_state,
    initial_state,
    operator,
)
from wf_initiation.core.limits import MAX_REDRIVE_PER_ACTION, STATE_BASE_BYTES
from wf_initiation.wire import OperatorRequest, Pause, Redrive

T0 = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
HOOKS = 'name: orders\non:\n  http.request: {}\n  as: hook\n  queue_by: "{{ hook.body.k }}"\n'


def hook(ident: str, **body: Any) -> dict[str, Any]:
    return {"delivery_id": ident, "method": "POST", "body": {"k": "q", **body}}


def without_method(ident: str) -> dict[str, Any]:
    """A delivery the manifest refuses (``method`` is required) and a relaxed one takes."""
    return {"delivery_id": ident, "body": {"k": "q"}}


def relaxed(spec: ActivationSpec, entry: str, *, drop_required: str) -> ActivationSpec:
    """The same Workfile under a connector version whose schema no longer requires ``drop_required``:
    a new binding, so a new activation id (INIT-4)."""
    entries = []
    for e in spec.entries:
        if e.name == entry:
            schema = {**e.payload_schema, "required": [r for r in e.payload_schema["required"] if r != drop_required]}
            e = e.model_copy(update={"payload_schema": schema, "connector_version": e.connector_version + "-relaxed"})
        entries.append(e)
    return spec.model_copy(update={"entries": entries, "activation_id": spec.activation_id + "-relaxed"})


def hooks(tmp_path: pathlib.Path, *, compat: Compat | None = None, **settings: Any) -> Driver:
    spec = make_spec(tmp_path, HOOKS, task_queue="q", lifecycle_events=False, **settings)
    return drive(Engine(spec, initial_state(spec, T0), compat=compat or Compat()))


def redrive(engine: Driver, now: datetime, action_id: str, **selection: Any) -> OperatorOutcome:
    return engine.keep(engine.engine.operate(Redrive(action_id=action_id, **selection), now))


def starts(engine: Driver) -> list[StartRun]:
    return [c for c in engine.take_commands() if isinstance(c, StartRun)]


def test_an_invalid_delivery_is_kept_and_runs_once_when_redriven_after_its_cause_is_fixed(tmp_path: pathlib.Path) -> None:
    # proves: EXT-3, EXT-9, EXT-10, INIT-5
    e = hooks(tmp_path)
    bad = e.deliver(None, without_method("m-1"), T0)
    assert bad.disposition == Disposition.INVALID and "method" in (bad.message or "")
    assert e.lookup("hook\x1fm-1") is None, "an invalid delivery consumes no identity (EXT-10)"
    (listed,) = e.redrivable()["events"]
    assert (listed["number"], listed["kind"], listed["delivery_id"]) == (1, "invalid", "m-1") and "method" in listed["reason"]
    assert "payload" not in listed, "the list shows no payloads"
    assert not redrive(e, T0, "a-0", delivery_id="m-1").events[0].outcome == "accepted", "still invalid: unchanged binding"
    assert e.redrivable()["events"][0]["tries"] == 1

    e.rebind(relaxed(e.spec, "hook", drop_required="method"), T0)  # the connector's schema was fixed: a new binding
    later = T0 + timedelta(minutes=5)
    outcome = redrive(e, later, "a-1", delivery_id="m-1")
    assert outcome.ok, outcome.message
    (event,) = outcome.events
    assert (event.number, event.kind, event.delivery_id, event.outcome) == (1, "invalid", "m-1", "accepted")
    (start,) = starts(e)
    assert start.run_key == event.run_key and start.input.bindings["hook"] == without_method("m-1")
    assert start.input.initiation.delivery_ids == ["m-1"], "its original delivery id"
    record = e.lookup("hook\x1fm-1")
    assert (record.delivery_id, record.disposition, record.redriven_by) == ("m-1", Disposition.ACCEPTED, "a-1")
    assert e.redrivable()["total"] == 0, "kept no more"
    assert [a.action_id for a in e.state.operator_log] == ["a-0", "a-1"], "recorded as operator actions"

    again = redrive(e, later, "a-2", delivery_id="m-1")  # a second re-drive: refused, saying why
    assert not again.ok and "re-driven already, by operator action 'a-1': accepted" in again.message
    assert redrive(e, later, "a-1", delivery_id="m-1").message == "already applied", "the same action: once"
    assert e.deliver(None, without_method("m-1"), later).disposition == Disposition.DUPLICATE, "one run (EXT-3)"
    assert starts(e) == []
    assert e.deliver(None, hook("m-2"), later).disposition == Disposition.QUEUED  # behind m-1's queue key
    assert e.deliver(None, hook("m-3", k="other"), later).disposition == Disposition.ACCEPTED
    assert [s.run_key.rsplit("/", 1)[1] for s in starts(e)] == ["m-3"]


def test_an_invalid_delivery_whose_id_was_accepted_since_is_settled_not_offered(tmp_path: pathlib.Path) -> None:
    # proves: EXT-3, EXT-4
    e = hooks(tmp_path)
    e.deliver(None, without_method("m-1"), T0)
    assert e.deliver(None, hook("m-1"), T0).disposition == Disposition.ACCEPTED  # the sender fixed it itself
    starts(e)
    outcome = redrive(e, T0, "a-1", kind="invalid")
    assert not outcome.ok and outcome.events[0].outcome == "not_offered"
    assert "has a disposition since: accepted" in (outcome.events[0].message or "")
    assert e.error_counts().get("conflict") is None, "no conflict recorded: nothing was delivered"
    assert starts(e) == [] and e.redrivable()["total"] == 0


def test_what_is_kept_is_bounded_in_count_and_bytes_and_let_go_after_the_dedup_retention(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_kept, "MAX_REDRIVE_KEPT", 3)
    e = hooks(tmp_path, dedup_retention="1h")
    for i in range(5):
        e.deliver(None, without_method(f"m-{i}"), T0 + timedelta(minutes=i))
    assert [v["delivery_id"] for v in e.redrivable()["events"]] == ["m-2", "m-3", "m-4"], "the oldest let go"
    assert e.summary()["redrive"]["evicted"] == 2
    monkeypatch.setattr(_kept, "MAX_REDRIVE_KEPT_BYTES", 200)
    e.deliver(None, {**without_method("big"), "path": "x" * 300}, T0 + timedelta(minutes=6))
    assert e.summary()["redrive"]["not_kept"] == 1, "one over the byte bound alone is not kept"
    e.tick(T0 + timedelta(minutes=3, hours=1))
    assert [v["delivery_id"] for v in e.redrivable()["events"]] == ["m-4"], "kept for the dedup retention"
    assert e.summary()["redrive"]["expired"] == 2
    assert _intake.estimated_state_bytes(e.core) > STATE_BASE_BYTES, "counted in the capacity"


def test_a_quarantined_poll_item_is_offered_again_to_its_entry_once_its_cause_is_fixed(tmp_path: pathlib.Path) -> None:
    # proves: POLL-11, POLL-5, EXT-3
    spec = spec_for(tmp_path)
    e = drive(Engine(spec, initial_state(spec, T0)))
    bad = {"row_id": "b", "table": "items"}  # no `row`: the manifest refuses it
    (call,) = e.polls_due(T0)
    items = [PollItemIn(payload=row(0, "a"), cursor_after="1"), PollItemIn(payload=bad, cursor_after="2")]
    e.poll_succeeded("row", call.seq, call.version, PollResultIn(items=items, cursor="2"), T0)
    assert e.state.polls["row"].cursor == "2", "quarantined, the cursor moved past it (POLL-11)"
    starts(e)
    (listed,) = e.redrivable()["events"]
    assert (listed["kind"], listed["entry"], listed["delivery_id"]) == ("quarantined", "row", "b")

    e.rebind(relaxed(e.spec, "row", drop_required="row"), T0)
    outcome = redrive(e, T0, "q-1", kind="quarantined")
    assert outcome.ok and outcome.events[0].outcome == "accepted", outcome
    (start,) = starts(e)
    assert start.input.bindings["row"] == bad and e.state.polls["row"].cursor == "2", "the cursor is not moved"
    assert e.lookup("row\x1fb").redriven_by == "q-1"
    assert not redrive(e, T0, "q-2", delivery_id="b").ok
    (call,) = e.polls_due(T0 + timedelta(minutes=1))  # the same item polled again: a duplicate, no second run
    e.poll_succeeded("row", call.seq, call.version, PollResultIn(items=[PollItemIn(payload=bad, cursor_after="2")]),
                     T0 + timedelta(minutes=1))
    assert starts(e) == [] and e.lookup("row\x1fb").disposition == Disposition.ACCEPTED


def fault(e: Driver, ident: str, now: datetime) -> str:
    """Deliver ``ident`` and fail its start for good: a start fault."""
    run_key = e.deliver(None, hook(ident), now).run_key
    starts(e)
    e.run_start_failed(run_key, "the start activity failed: Failed decoding arguments", now)
    return run_key


def test_a_start_fault_is_started_again_as_it_was_admitted_and_runs_once(tmp_path: pathlib.Path) -> None:
    # proves: EXT-3, INIT-5, TRIG-11
    e = hooks(tmp_path)
    run_key = fault(e, "s-1", T0)
    assert e.lookup("hook\x1fs-1").disposition == Disposition.START_FAULT
    (listed,) = e.redrivable()["events"]
    assert (listed["kind"], listed["run_key"], listed["delivery_id"]) == ("start_fault", run_key, "s-1")
    assert e.deliver(None, hook("s-2"), T0).disposition == Disposition.ACCEPTED, "its queue key was let go"
    (other,) = starts(e)

    outcome = redrive(e, T0 + timedelta(minutes=1), "f-1", delivery_id="s-1")
    assert outcome.ok and outcome.events[0].outcome == "queued", "behind its queue key again (TRIG-11)"
    assert starts(e) == []
    record = e.lookup("hook\x1fs-1")
    assert (record.disposition, record.run_key, record.redriven_by, record.released_at) == (
        Disposition.QUEUED, run_key, "f-1", None)
    e.run_started(other.run_key, "r-2", T0 + timedelta(minutes=2))
    e.run_finished(other.run_key, "completed", T0 + timedelta(minutes=3))
    (start,) = starts(e)
    assert start.run_key == run_key and start.input.initiation.delivery_ids == ["s-1"], "the same run, same input"
    assert "re-driven already" in redrive(e, T0 + timedelta(minutes=4), "f-2", delivery_id="s-1").message
    e.run_started(run_key, "r-1", T0 + timedelta(minutes=4))
    e.run_finished(run_key, "completed", T0 + timedelta(minutes=5))
    assert e.lookup("hook\x1fs-1").released_at is not None, "its retention starts when its run ends (EXT-5)"


def test_a_start_fault_whose_record_was_retired_is_restored_from_its_copy(tmp_path: pathlib.Path) -> None:
    # proves: EXT-3
    e = hooks(tmp_path)
    run_key = fault(e, "s-1", T0)
    e.core.retire_released(keep_live=0)  # as before a continue-as-new with many released ids
    carried = drive(Engine(e.spec, decode_state(e.encode_state())))
    assert "hook\x1fs-1" not in carried.state.events and carried.lookup("hook\x1fs-1").detail == "retired"
    assert redrive(carried, T0, "f-1", kind="start_fault").events[0].outcome == "accepted"
    (start,) = starts(carried)
    record = carried.state.events["hook\x1fs-1"]
    assert start.run_key == run_key and record.detail is None and len(record.digest) == 16, "the full record again"
    assert carried.deliver(None, hook("s-1"), T0).disposition == Disposition.DUPLICATE


@pytest.fixture
def full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_intake, "CAPACITY_BYTES", STATE_BASE_BYTES)  # no room for any new id


def test_a_deferred_signal_is_redriven_with_its_payload_from_history_checked_against_its_digest(
    tmp_path: pathlib.Path, full: None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: EXT-8, EXT-3
    e = hooks(tmp_path)
    assert e.take_signal(None, hook("d-1"), T0, may_wait=False, run_id="run-a").disposition == Disposition.DEFERRED
    (listed,) = e.redrivable()["events"]
    assert (listed["number"], listed["kind"], listed["run_id"]) == (1, "deferred_signal", "run-a")
    monkeypatch.setattr(_intake, "CAPACITY_BYTES", 10 * STATE_BASE_BYTES)  # room again
    missing = redrive(e, T0, "d-0", kind="deferred_signal")
    assert not missing.ok and "history of activation run run-a" in (missing.events[0].message or "")
    forged = redrive(e, T0, "d-1", kind="deferred_signal", payloads=[hook("d-1", forged=True)])
    assert not forged.ok, "a payload that is not the one kept (another digest) is not taken"
    outcome = redrive(e, T0, "d-2", kind="deferred_signal", payloads=[hook("d-1")])
    assert outcome.ok and outcome.events[0].outcome == "accepted"
    assert len(starts(e)) == 1 and e.deferred_signals()["total"] == 0 and e.redrivable()["total"] == 0
    assert e.lookup("hook\x1fd-1").redriven_by == "d-2"
    assert "re-driven already" in redrive(e, T0, "d-3", delivery_id="d-1").message


def test_one_action_offers_at_most_its_bound_and_says_how_many_more(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_redrive, "MAX_REDRIVE_PER_ACTION", 10)
    e = hooks(tmp_path)
    for i in range(13):
        e.deliver(None, without_method(f"m-{i}"), T0)
    e.rebind(relaxed(e.spec, "hook", drop_required="method"), T0)
    first = redrive(e, T0, "p-1", all_events=True)
    assert len(first.events) == 10 and "3 more selected" in first.message
    assert [ev.outcome for ev in first.events][:2] == ["accepted", "queued"]
    rest = redrive(e, T0, "p-2", first=first.events[-1].number + 1)
    assert len(rest.events) == 3 and e.redrivable()["total"] == 0
    assert MAX_REDRIVE_PER_ACTION == 100


def test_kept_events_are_carried_across_continue_as_new_and_old_states_decode(tmp_path: pathlib.Path) -> None:
    # proves: INIT-7
    e = hooks(tmp_path)
    e.deliver(None, without_method("m-1"), T0)
    fault(e, "s-1", T0)
    carried = drive(Engine(e.spec, decode_state(e.encode_state())))
    assert [(v["number"], v["kind"]) for v in carried.redrivable()["events"]] == [(1, "invalid"), (2, "start_fault")]
    # A state carried by the build before re-drive: no kept events, deferred signals without numbers.
    old = json.loads(EngineState(activation_id="x").model_dump_json(exclude={"redrive_kept", "redrive_seq"}))
    old["signals_deferred"] = {f"hook\x1fd-{i}": {"entry": "hook", "delivery_id": f"d-{i}", "digest": "ab", "size": 1,
                                                  "run_id": "r", "at": T0.isoformat()} for i in range(2)}
    state = EngineState.model_validate(old)
    assert [r.number for r in state.signals_deferred.values()] == [1, 2] and state.redrive_seq == 2
    assert state.redrive_kept == []


def test_a_run_begun_before_the_patch_keeps_nothing_for_re_drive(tmp_path: pathlib.Path) -> None:
    e = hooks(tmp_path, compat=Compat(redrive_kept=False))
    e.deliver(None, without_method("m-1"), T0)
    fault(e, "s-1", T0)
    assert e.redrivable()["total"] == 0 and e.state.redrive_kept == []
    assert "nothing kept for re-drive matches" in redrive(e, T0, "a-1", all_events=True).message


def test_a_deactivated_activation_refuses_a_re_drive(tmp_path: pathlib.Path) -> None:
    from wf_initiation.wire import DeactivateRequest

    e = hooks(tmp_path)
    e.deliver(None, without_method("m-1"), T0)
    e.deactivate(DeactivateRequest(queued="drain"), T0)
    outcome = redrive(e, T0, "a-1", all_events=True)
    assert not outcome.ok and "deactivated" in outcome.message and e.redrivable()["total"] == 1


def test_a_re_drive_must_name_what_it_re_drives_and_carries_bounded_payloads() -> None:
    with pytest.raises(ValidationError, match="name the events to re-drive"):
        Redrive()
    with pytest.raises(ValidationError, match="first .3. is after last .2."):
        Redrive(first=3, last=2)
    with pytest.raises(ValidationError, match="one action carries at most 100"):
        Redrive(all_events=True, payloads=[{"x": 1}] * 101)
    with pytest.raises(ValidationError, match="bytes of payloads; one action carries at most 1048576"):
        Redrive(all_events=True, payloads=[{"x": "y" * 20_000}] * 60)
    big = Redrive.model_construct(action="redrive", all_events=True, payloads=[{"x": "y" * 1000}] * 2000)
    assert "one action carries at most" in (operator.request_problem(big) or ""), "and the activation checks again"
    assert OperatorRequest(action="redrive", delivery_id="m-1").root == Redrive(delivery_id="m-1")


def test_the_digest_of_an_earlier_action_is_what_it_was() -> None:
    # A reused action id must still mean the same action after re-drive's fields were added (values
    # computed by the build before them).
    assert operator.content_digest(Pause(entry="tick")) == "f3f7dadb35fb346c"
    assert operator.content_digest(Redrive(delivery_id="m-1")) != operator.content_digest(Redrive(delivery_id="m-2"))
    assert operator.content_digest(Redrive(delivery_id="m-1", payloads=[1])) == operator.content_digest(
        Redrive(delivery_id="m-1")), "the payloads a client read back are not what the action is"


def test_the_client_sends_a_large_selection_in_pages_of_one_action_each() -> None:
    from wf_initiation._redrive import _page_id, _pages

    listed = [{"number": n, "kind": "invalid", "digest": f"d{n}"} for n in range(1, 251)]
    assert [(p[0]["number"], p[-1]["number"]) for p, _ in _pages(listed, {})] == [(1, 100), (101, 200), (201, 250)]
    signals = [{"number": n, "kind": "deferred_signal", "digest": f"d{n}"} for n in range(1, 6)]
    found = {f"d{n}": "x" * 400_000 for n in (1, 2, 3, 5)}  # #4's signal is gone from history: sent without it
    pages = _pages(signals, found)
    assert [[e["number"] for e in p] for p, _ in pages] == [[1, 2], [3, 4, 5]], "at most 1 MiB of payloads a page"
    assert [len(payloads) for _, payloads in pages] == [2, 2]
    assert _page_id("fix", 0, (3, 9)) == "fix#3-9" and _page_id("fix", 1, (3, 9)) == "fix#1:3-9"
    assert len(_page_id("a" * 256, 0, (1, 2))) <= 256


def test_a_batch_whose_run_could_not_start_is_started_again_with_every_event_it_held(tmp_path: pathlib.Path) -> None:
    # proves: EXT-6, BATCH-4
    spec = make_spec(tmp_path, "name: batched\non:\n  http.request: {}\n  as: hook\n  batch: {size: 2}\n",
                     task_queue="q", lifecycle_events=False)
    e = drive(Engine(spec, initial_state(spec, T0)))
    assert [e.deliver(None, hook(f"b-{i}"), T0).disposition for i in range(2)] == [Disposition.BATCHED] * 2
    (start,) = starts(e)
    e.run_start_failed(start.run_key, "the start activity failed: Failed decoding arguments", T0)
    (listed,) = e.redrivable()["events"]
    assert (listed["kind"], listed["delivery_id"], listed["events"]) == ("start_fault", "b-0", 2)
    outcome = redrive(e, T0, "batch-1", delivery_id="b-0")
    assert outcome.ok and outcome.events[0].run_key == start.run_key
    (again,) = starts(e)
    assert again.input == start.input, "one run for the batch, with every event it held (EXT-6)"
    assert [e.lookup(f"hook\x1fb-{i}").redriven_by for i in range(2)] == ["batch-1", "batch-1"]
