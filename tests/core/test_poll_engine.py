"""The engine's poll path, pure (no Temporal): cursor, dispositions, hold/quarantine, backoff.

A poll "source" here is a list of payloads shaped like ``sql.row_inserted`` items, read from an
integer cursor (the index after the last item returned), exactly as the poll contract says: each
item carries the cursor just after it. A "crash" is modelled the way Temporal replays: a response
that was never recorded is fetched again, and a state recorded before the crash is restored from
its serialised form.
"""

from __future__ import annotations

import pathlib
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.engine import drive
from tests.support.polled import T0, row, spec_for
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.engine import Disposition, Engine, EngineState, PollItemIn, PollResultIn, StartRun, initial_state
from wf_initiation.core.engine._poll import abandon_in_flight, backoff_for, quarantine_ident
from wf_initiation.wire import OperatorRequest


def fetch(source: list[dict[str, Any]], cursor: str | None, limit: int) -> PollResultIn:
    start = int(cursor) if cursor is not None else 0
    page = source[start : start + limit]
    items = [PollItemIn(payload=p, cursor_after=str(start + i + 1)) for i, p in enumerate(page)]
    return PollResultIn(items=items, cursor=items[-1].cursor_after if items else cursor, more=start + limit < len(source))


def poll_once(engine: Engine, source: list[dict[str, Any]], now: datetime) -> list[StartRun]:
    (call,) = engine.polls_due(now)
    engine.poll_succeeded(call.entry, call.seq, call.version, fetch(source, call.cursor, call.limit), now)
    return [c for c in engine.take_commands() if isinstance(c, StartRun)]


def fresh(spec: ActivationSpec) -> Engine:
    return drive(Engine(spec, initial_state(spec, T0)))


def op(engine: Engine, action: str, now: datetime, **kw: Any) -> tuple[bool, str]:
    return engine.operate(OperatorRequest(action=action, entry="row", **kw), now)


def events_of(engine: Engine) -> dict[str, Any]:
    return {k.split("\x1f", 1)[1]: r for k, r in engine.state.events.items()}


@pytest.fixture
def spec(tmp_path: pathlib.Path) -> ActivationSpec:
    return spec_for(tmp_path)


def test_a_poll_is_due_at_activation_and_then_at_the_configured_interval(spec: ActivationSpec) -> None:
    # proves: POLL-1, POLL-2
    engine = fresh(spec)
    (call,) = engine.polls_due(T0)
    assert (call.connector, call.cursor, call.limit) == ("sql.row_inserted", None, 3)
    assert call.connection["sqlite"].endswith("source.db") and call.config["table"] == "items"
    assert engine.polls_due(T0) == [], "one poll in flight per entry"
    engine.poll_succeeded("row", call.seq, call.version, PollResultIn(), T0)
    assert engine.next_wakeup() == T0 + timedelta(seconds=10)
    assert engine.polls_due(T0 + timedelta(seconds=9)) == []
    assert len(engine.polls_due(T0 + timedelta(seconds=10))) == 1


def test_items_are_accepted_in_source_order_and_the_cursor_follows_the_last_disposed_item(spec: ActivationSpec) -> None:
    # proves: POLL-5, POLL-6, POLL-8
    source = [row(i, f"id-{i}") for i in range(5)]
    engine = fresh(spec)
    starts = poll_once(engine, source, T0)
    assert [s.input.bindings["row"]["row_id"] for s in starts] == ["id-0", "id-1", "id-2"]
    assert engine.state.polls["row"].cursor == "3"
    assert engine.next_wakeup() == T0, "a response cut by the limit polls again at once"
    starts += poll_once(engine, source, T0)
    assert engine.state.polls["row"].cursor == "5"
    records = sorted(engine.state.events.values(), key=lambda r: r.seq)
    assert [r.delivery_id for r in records] == [f"id-{i}" for i in range(5)]


def test_a_repeated_fetch_starts_no_second_run(spec: ActivationSpec) -> None:
    # proves: POLL-9, POLL-5
    source = [row(i, f"id-{i}") for i in range(3)]
    engine = fresh(spec)
    assert len(poll_once(engine, source, T0)) == 3
    op(engine, "set_cursor", T0, cursor=None, note="re-read from the start")
    assert poll_once(engine, source, T0) == []
    assert engine.state.counters["duplicates"] == 3


def test_a_failed_poll_starts_nothing_keeps_the_cursor_and_backs_off_exponentially(spec: ActivationSpec) -> None:
    # proves: POLL-10, POLL-2
    source = [row(i, f"id-{i}") for i in range(2)]
    engine = fresh(spec)
    poll_once(engine, source, T0)
    now, delays = T0, []
    for _ in range(5):
        now = engine.next_wakeup() or now
        (call,) = engine.polls_due(now)
        engine.poll_failed("row", call.seq, "PollSourceUnavailable: database unreachable", now)
        delays.append(engine.next_wakeup() - now)
        assert engine.take_commands() == [] and engine.state.polls["row"].cursor == "2"
    assert delays == [timedelta(seconds=s) for s in (1, 2, 4, 8, 8)]
    source.append(row(2, "id-2"))
    assert len(poll_once(engine, source, engine.next_wakeup())) == 1
    assert engine.state.polls["row"].failures == 0 and engine.state.polls["row"].last_error is None


@given(failures=st.integers(min_value=1, max_value=10_000), initial=st.integers(1, 30), cap=st.integers(1, 600))
def test_backoff_doubles_from_the_initial_delay_and_never_passes_the_cap(failures: int, initial: int, cap: int) -> None:
    # proves: POLL-2 (and a source down for days never overflows the delay)
    delay = backoff_for(failures, timedelta(seconds=initial), timedelta(seconds=cap))
    assert delay == timedelta(seconds=min(initial * 2 ** (failures - 1), cap))


def test_a_cursor_set_while_a_poll_is_in_flight_is_not_overwritten_by_its_result(spec: ActivationSpec) -> None:
    # proves: POLL-4, POLL-3
    source = [row(i, f"id-{i}") for i in range(3)]
    engine = fresh(spec)
    (call,) = engine.polls_due(T0)
    ok, message = op(engine, "set_cursor", T0 + timedelta(seconds=1), cursor="2", note="skip the first two")
    assert ok, message
    engine.poll_succeeded("row", call.seq, call.version, fetch(source, call.cursor, call.limit), T0 + timedelta(seconds=2))
    poll = engine.state.polls["row"]
    assert poll.cursor == "2" and engine.take_commands() == [], "the in-flight result is discarded whole"
    (change,) = poll.cursor_changes
    assert (change.old, change.new, change.note, change.at) == (None, "2", "skip the first two", T0 + timedelta(seconds=1))
    starts = poll_once(engine, source, T0 + timedelta(seconds=2))
    assert [s.input.bindings["row"]["row_id"] for s in starts] == ["id-2"], "the new cursor applies to later polls"


def test_an_invalid_item_is_quarantined_and_the_cursor_moves_past_it(spec: ActivationSpec) -> None:
    # proves: POLL-11
    source = [row(0, "a"), row(1, None), row(2, "c")]
    engine = fresh(spec)
    starts = poll_once(engine, source, T0)
    assert [s.input.bindings["row"]["row_id"] for s in starts] == ["a", "c"]
    quarantined = [r for r in engine.state.events.values() if r.disposition == Disposition.QUARANTINED]
    assert len(quarantined) == 1 and quarantined[0].detail and "row_id" in quarantined[0].detail
    assert engine.state.polls["row"].cursor == "3"
    op(engine, "set_cursor", T0, cursor=None)
    poll_once(engine, source, T0)
    assert sum(r.disposition == Disposition.QUARANTINED for r in engine.state.events.values()) == 1, "a repeat adds nothing"


def test_a_quarantined_item_leaves_its_identity_for_a_corrected_item(spec: ActivationSpec) -> None:
    # proves: POLL-11, EXT-10
    bad = {"row_id": "x", "table": "items", "row": "not an object"}
    engine = fresh(spec)
    poll_once(engine, [bad, row(1, "x")], T0)
    events = events_of(engine)
    assert events["x"].disposition == Disposition.ACCEPTED
    assert any(k.startswith("quarantine:") for k in events)


def test_an_invalid_item_under_hold_stops_the_cursor_until_an_operator_acts(tmp_path: pathlib.Path) -> None:
    # proves: POLL-11
    spec = spec_for(tmp_path, invalid_items="hold")
    source = [row(0, "a"), row(1, None), row(2, "c")]
    engine = fresh(spec)
    starts = poll_once(engine, source, T0)
    poll = engine.state.polls["row"]
    assert [s.input.bindings["row"]["row_id"] for s in starts] == ["a"]
    assert poll.cursor == "1" and poll.held is not None and poll.held.cursor_after == "2"
    assert engine.polls_due(T0 + timedelta(hours=1)) == [], "a held entry does not poll"
    assert op(engine, "release_held", T0, choice="retry")[0]
    assert poll_once(engine, source, T0) == [] and engine.state.polls["row"].held is not None, "retry meets it again"
    ok, _ = op(engine, "release_held", T0, choice="quarantine", note="bad row")
    assert ok and engine.state.polls["row"].cursor == "2"
    assert [c.by for c in engine.state.polls["row"].cursor_changes] == ["quarantine"]
    assert [s.input.bindings["row"]["row_id"] for s in poll_once(engine, source, T0)] == ["c"]
    assert any(r.disposition == Disposition.QUARANTINED for r in engine.state.events.values())


@pytest.mark.parametrize(("extra", "disposition"), [
    ("  when: \"{{ row.row.kind != 'skip' }}\"", Disposition.SUPPRESSED),
    ("  when: \"{{ row.row.missing.deeper > 1 }}\"", Disposition.GUARD_FAULT),
    ("  queue_by: \"{{ row.row.missing }}\"", Disposition.KEY_FAULT),
])
def test_suppression_and_faults_are_retained_and_let_the_cursor_advance(
    tmp_path: pathlib.Path, extra: str, disposition: Disposition
) -> None:
    # proves: POLL-12, BATCH-7
    spec = spec_for(tmp_path, extra=extra, invalid_items="hold")
    engine = fresh(spec)
    poll_once(engine, [row(0, "a", kind="skip")], T0)
    assert events_of(engine)["a"].disposition == disposition
    assert events_of(engine)["a"].released_at == T0, "the identity is consumed and retained"
    assert engine.state.polls["row"].cursor == "1" and engine.state.polls["row"].held is None


def test_overlap_skip_is_a_disposition_that_lets_the_cursor_advance(tmp_path: pathlib.Path) -> None:
    # proves: POLL-12
    spec = spec_for(tmp_path, overlap="skip", invalid_items="hold")
    engine = fresh(spec)
    poll_once(engine, [row(0, "a"), row(1, "b")], T0)
    assert events_of(engine)["a"].disposition == Disposition.ACCEPTED
    assert events_of(engine)["b"].disposition == Disposition.SKIPPED
    assert engine.state.polls["row"].cursor == "2"


def test_a_paused_entry_does_not_poll_until_resumed_and_poll_now_polls_at_once(spec: ActivationSpec) -> None:
    # proves: POLL-2
    engine = fresh(spec)
    poll_once(engine, [], T0)
    assert op(engine, "pause", T0)[0]
    assert engine.polls_due(T0 + timedelta(hours=1)) == [] and engine.next_wakeup() is None
    op(engine, "resume", T0 + timedelta(hours=1))
    assert len(engine.polls_due(T0 + timedelta(hours=1))) == 1
    engine.poll_succeeded("row", engine.state.polls["row"].poll_seq, 0, PollResultIn(), T0 + timedelta(hours=1))
    op(engine, "poll_now", T0 + timedelta(hours=1, seconds=1))
    assert len(engine.polls_due(T0 + timedelta(hours=1, seconds=1))) == 1


@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_poll_now_while_a_poll_is_in_flight_polls_again_as_soon_as_it_ends(spec: ActivationSpec, outcome: str) -> None:
    # proves: POLL-2
    source = [row(0, "id-0")]
    engine = fresh(spec)
    (call,) = engine.polls_due(T0)
    source.append(row(1, "id-1"))  # written after the poll in flight read the source
    assert op(engine, "poll_now", T0 + timedelta(seconds=1), action_id="op-1")[0]
    ends = T0 + timedelta(seconds=2)
    if outcome == "succeeded":
        engine.poll_succeeded("row", call.seq, call.version, fetch(source[:1], call.cursor, call.limit), ends)
    else:
        engine.poll_failed("row", call.seq, "PollSourceUnavailable: timeout", ends)
    assert engine.next_wakeup() == ends, "the operator's request is not overwritten by the interval or backoff"
    engine.take_commands()
    assert len(poll_once(engine, source, ends)) == (1 if outcome == "succeeded" else 2)
    assert engine.next_wakeup() == ends + timedelta(seconds=10), "one extra poll, then the interval again"


def test_without_the_patch_poll_now_during_a_poll_waits_for_the_interval_as_before(spec: ActivationSpec) -> None:
    # proves: POLL-2 (histories recorded before the change replay unchanged)
    engine = fresh(spec)
    (call,) = engine.polls_due(T0)
    engine.operate(OperatorRequest(action="poll_now", entry="row"), T0 + timedelta(seconds=1), poll_now_survives_flight=False)
    engine.poll_succeeded("row", call.seq, call.version, PollResultIn(), T0 + timedelta(seconds=2))
    assert engine.next_wakeup() == T0 + timedelta(seconds=12)


def test_a_poll_in_flight_is_forgotten_when_the_state_is_carried_to_a_new_run(spec: ActivationSpec) -> None:
    # proves: POLL-10
    engine = fresh(spec)
    engine.polls_due(T0)
    carried = EngineState.model_validate_json(engine.state.model_dump_json())
    abandon_in_flight(carried)
    assert len(drive(Engine(spec, carried)).polls_due(T0)) == 1


def test_the_cursor_never_appears_in_a_run_input(spec: ActivationSpec) -> None:
    # proves: POLL-3
    engine = fresh(spec)
    op(engine, "set_cursor", T0, cursor="0", note="sentinel-cursor-value")
    (start,) = poll_once(engine, [row(0, "only")], T0)
    assert "sentinel" not in start.input.model_dump_json() and '"cursor"' not in start.input.model_dump_json()


# --- property: crashes anywhere, duplicates, invalid items ------------------------------------

item = st.one_of(
    st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "h"]).map(lambda i: ("valid", i)),
    st.just(("invalid", None)),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kinds=st.lists(item, min_size=1, max_size=30),
    crashes=st.lists(st.booleans(), min_size=60, max_size=60),
    limit=st.integers(1, 5),
)
def test_crashes_never_start_a_second_run_nor_skip_an_undisposed_item(
    spec: ActivationSpec, kinds: list[tuple[str, str | None]], crashes: list[bool], limit: int
) -> None:
    # proves: POLL-8, POLL-9, POLL-6, POLL-11
    # Rows with a repeated item id repeat the first row's payload (a re-sent item: a duplicate).
    first: dict[str, dict[str, Any]] = {}
    source = []
    for seq_no, (kind, ident) in enumerate(kinds):
        payload = row(seq_no, None) if kind == "invalid" else first.setdefault(ident, row(seq_no, ident))
        source.append(payload)
    engine = fresh(spec.model_copy(update={"policies": spec.policies.model_copy(
        update={"poll": spec.policies.poll.model_copy(update={"limit": limit})})}))
    started: list[str] = []
    now = T0
    for crashed in [*crashes, *[False] * (len(source) + 2)]:  # crashes, then enough clean polls to finish
        now += timedelta(seconds=11)
        calls = engine.polls_due(now)
        if not calls:
            continue
        (call,) = calls
        snapshot = engine.state.model_dump_json()
        engine.poll_succeeded(call.entry, call.seq, call.version, fetch(source, call.cursor, call.limit), now)
        if crashed:  # the task that recorded this result never completed: replay from the snapshot
            engine = drive(Engine(engine.spec, EngineState.model_validate_json(snapshot)))
            abandon_in_flight(engine.state)
            continue
        started += [c.input.bindings["row"]["row_id"] for c in engine.take_commands() if isinstance(c, StartRun)]
        _assert_cursor_not_ahead(engine, source)
    assert engine.state.polls["row"].cursor == str(len(source))
    valid_in_order = list(dict.fromkeys(p["row_id"] for p in source if p["row_id"]))
    assert started == valid_in_order, "one run per distinct valid item, in source order"
    quarantined = sum(r.disposition == Disposition.QUARANTINED for r in engine.state.events.values())
    assert quarantined == len({id(p) for p in source if not p["row_id"]})


def _assert_cursor_not_ahead(engine: Engine, source: list[dict[str, Any]]) -> None:
    from wf_initiation.core.engine import payload_digest

    cursor = int(engine.state.polls["row"].cursor or 0)
    events = events_of(engine)
    for payload in source[:cursor]:
        ident = payload["row_id"] or quarantine_ident(payload_digest(payload))
        assert ident in events, f"cursor {cursor} is past undisposed item {payload}"
