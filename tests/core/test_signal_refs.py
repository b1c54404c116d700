"""Signals kept by reference in the pure engine (issue 32 item 3): a deferred signal is listed with
the run whose history holds it until its id is delivered again; signals still waiting at
continue-as-new are carried in the state, in order. The workflow side: tests/integration/test_signal_durability.py."""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime

import pytest

from tests.support.activation import make_spec
from wf_initiation.core.engine import Disposition, Engine, _intake, decode_state, initial_state
from wf_initiation.core.limits import STATE_BASE_BYTES

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WORKFILE = 'name: refs\non:\n  http.request: {}\n  as: hook\n  when: "{{ hook.body.go }}"\n'


def engine(tmp_path: pathlib.Path) -> Engine:
    spec = make_spec(tmp_path, WORKFILE, task_queue="q", lifecycle_events=False)
    return Engine(spec, initial_state(spec, T0))


def hook(ident: str) -> dict:
    return {"delivery_id": ident, "method": "POST", "body": {"go": False}}


@pytest.fixture
def full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_intake, "CAPACITY_BYTES", STATE_BASE_BYTES)  # no room for any new id


def test_a_deferred_signal_is_listed_with_its_run_until_its_id_is_taken(tmp_path: pathlib.Path, full: None,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # proves: EXT-8
    e = engine(tmp_path)
    assert e.take_signal(None, hook("s1"), T0, may_wait=True, run_id="run-a").value.disposition == Disposition.DEFERRED
    record = e.delivery("hook", "s1")
    assert record is not None and record["disposition"] == "deferred_signal" and record["signal"]["workflow_run_id"] == "run-a"
    page = e.deferred_signals()
    assert page["total"] == 1 and page["signals"][0]["delivery_id"] == "s1" and "capacity" in page["signals"][0]["reason"]
    carried = Engine(e.spec, decode_state(e.encode_state()))  # across continue-as-new
    assert carried.delivery("hook", "s1")["disposition"] == "deferred_signal"
    monkeypatch.setattr(_intake, "CAPACITY_BYTES", 10 * STATE_BASE_BYTES)  # room again
    assert carried.deliver(None, hook("s1"), T0).value.disposition == Disposition.SUPPRESSED, "redriven by update"
    assert carried.deferred_signals()["total"] == 0 and carried.delivery("hook", "s1")["disposition"] == "suppressed"


def test_past_the_listed_bound_a_deferred_signal_is_counted_and_said(tmp_path: pathlib.Path, full: None,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_intake, "MAX_DEFERRED_SIGNALS", 2)
    e = engine(tmp_path)
    for i in range(3):
        e.take_signal(None, hook(f"s{i}"), T0, may_wait=False, run_id="run-a")
    assert [s["delivery_id"] for s in e.deferred_signals()["signals"]] == ["s0", "s1"]
    assert e.summary()["signals"] == {"waiting_carried": 0, "deferred_listed": 2, "deferred_unlisted": 1}
    assert e.delivery("hook", "s2") is None
    assert "not listed" in e.markdown() and e.error_counts()["deferred_signal_unlisted"] == 1


def test_signals_waiting_at_continue_as_new_are_carried_in_order_and_answered(tmp_path: pathlib.Path) -> None:
    # proves: EXT-11
    e = engine(tmp_path)
    assert e.carry_waiting([(None, hook(f"w{i}"), "run-a") for i in range(3)], T0).value == 3
    nxt = Engine(e.spec, decode_state(e.encode_state()))
    assert [r.delivery_id for r in nxt.waiting_signals] == ["w0", "w1", "w2"]
    assert nxt.delivery("hook", "w1")["disposition"] == "waiting_signal"
    assert nxt.summary()["signals"]["waiting_carried"] == 3
    nxt.waiting_lost(nxt.waiting_signals[2], "not found in that run's history", T0)
    nxt.waiting_recovered(3)
    assert nxt.waiting_signals == [] and nxt.delivery("hook", "w2")["disposition"] == "deferred_signal"
