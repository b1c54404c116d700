"""A poll source that asks to be left alone (HTTP 429 / 503 with Retry-After) and one that has
something to tell the operator (a mailbox's UIDVALIDITY changed): the pure engine's side."""

from __future__ import annotations

import pathlib
from datetime import timedelta

import pytest

from tests.support.engine import drive
from tests.support.polled import T0, row, spec_for
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.engine import Engine, PollItemIn, PollResultIn, initial_state
from wf_initiation.core.limits import MAX_POLL_NOTICES, MAX_POLL_RETRY_AFTER
from wf_initiation.wire import OperatorRequest


@pytest.fixture
def engine(tmp_path: pathlib.Path) -> Engine:
    spec: ActivationSpec = spec_for(tmp_path)  # backoff 1 s doubling to 8 s
    return drive(Engine(spec, initial_state(spec, T0)))


def fail(engine: Engine, now, retry_after: timedelta | None) -> timedelta:
    (call,) = engine.polls_due(now)
    engine.poll_failed("row", call.seq, "PollSourceUnavailable: HTTP 429", now, retry_after=retry_after)
    return engine.next_wakeup() - now


def test_the_next_poll_waits_at_least_what_the_source_asked_even_past_the_backoff_cap(engine: Engine) -> None:
    # proves: POLL-2, POLL-10
    assert fail(engine, T0, timedelta(seconds=30)) == timedelta(seconds=30), "past backoff_max (8 s)"
    now = T0 + timedelta(seconds=30)
    assert fail(engine, now, timedelta(milliseconds=100)) == timedelta(seconds=2), "the backoff when it is longer"
    assert engine.state.polls["row"].cursor is None and engine.take_commands() == []
    (error,) = [e for e in engine.state.errors if e.kind == "poll_failed"][:1]
    assert "the source asked to wait 0:00:30" in error.message


def test_a_wait_asked_for_is_capped_and_a_negative_one_is_none(engine: Engine) -> None:
    assert fail(engine, T0, timedelta(days=30)) == MAX_POLL_RETRY_AFTER
    now = T0 + MAX_POLL_RETRY_AFTER
    assert fail(engine, now, timedelta(seconds=-5)) == timedelta(seconds=2)


def test_poll_now_overrides_a_wait_the_source_asked_for(engine: Engine) -> None:
    # proves: POLL-2 (operator controls)
    fail(engine, T0, timedelta(hours=1))
    ok, message = engine.operate(OperatorRequest(action="poll_now", entry="row"), T0 + timedelta(seconds=1))
    assert ok, message
    assert engine.next_wakeup() == T0 + timedelta(seconds=1)


def test_notices_of_a_response_are_recorded_for_the_operator_and_bounded(engine: Engine) -> None:
    (call,) = engine.polls_due(T0)
    notices = [f"UIDVALIDITY changed ({n})" for n in range(MAX_POLL_NOTICES + 3)] + ["x" * 5000]
    result = PollResultIn(items=[PollItemIn(payload=row(1, "a"), cursor_after="1")], cursor="1", notices=notices)
    engine.poll_succeeded("row", call.seq, call.version, result, T0)
    recorded = [e for e in engine.state.errors if e.kind == "poll_notice"]
    assert [e.message for e in recorded] == notices[:MAX_POLL_NOTICES] and recorded[0].entry == "row"
    assert engine.state.error_counts["poll_notice"] == MAX_POLL_NOTICES
    assert engine.state.polls["row"].cursor == "1"


def test_an_empty_response_may_carry_the_cursor_to_the_same_point_in_a_new_form(engine: Engine) -> None:
    # proves: POLL-8 (no item passed: the cursor only changes its form, e.g. a new ETag)
    (call,) = engine.polls_due(T0)
    engine.poll_succeeded("row", call.seq, call.version, PollResultIn(items=[], cursor='{"etag":"v2"}'), T0)
    assert engine.state.polls["row"].cursor == '{"etag":"v2"}' and engine.take_commands() == []
