"""Overlap and concurrency as pure functions (core/engine/_overlap.py), then through the engine.

The functions take the runs in flight and the waiting list and return what to do as data; the
engine applies it. Table-driven over every policy; no server."""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.activation import make_spec
from wf_initiation.core.engine import ControlRun, Decision, Disposition, Engine, StartRun, initial_state
from wf_initiation.core.engine._overlap import START, Admission, admit, skips_on_arrival
from wf_initiation.core.engine._types import RunRecord

T0 = datetime(2026, 3, 1, tzinfo=UTC)
POLICIES = ("allow", "skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other")


def running(key: str, *, cancel_requested: bool = False) -> RunRecord:
    return RunRecord(run_key=key, entry="hook", status="running", accepted_at=T0, activation_id="a",
                     cancel_requested=cancel_requested)


@pytest.mark.parametrize(("policy", "runs", "waiting", "skips"), [
    ("skip", 0, 0, False), ("skip", 1, 0, True),
    ("buffer_one", 1, 0, False), ("buffer_one", 1, 1, True), ("buffer_one", 0, 0, False),
    *[(p, 3, 2, False) for p in ("allow", "buffer_all", "cancel_other", "terminate_other")],
])
def test_only_skip_and_a_full_buffer_one_skip_a_new_event(policy: str, runs: int, waiting: int, skips: bool) -> None:
    # proves: EXT-13
    assert skips_on_arrival(policy, runs, waiting) is skips


@pytest.mark.parametrize("policy", POLICIES)
def test_nothing_in_flight_and_nothing_waiting_starts_the_run_under_every_policy(policy: str) -> None:
    assert admit(policy, None, "new", [], [], None) == START


def test_under_allow_runs_in_flight_never_hold_a_new_one() -> None:
    assert admit("allow", None, "new", [running("old"), running("older")], [], None) == START


@pytest.mark.parametrize(("policy", "control"), [
    ("buffer_one", None), ("buffer_all", None), ("cancel_other", "cancel"), ("terminate_other", "terminate"),
])
def test_a_run_in_flight_holds_a_new_one_and_is_controlled_once(policy: str, control: str | None) -> None:
    decided = admit(policy, None, "new", [running("old"), running("older", cancel_requested=True)], [], None)
    # "older" was asked to stop already: it is not a target again
    assert decided == Admission(start=False, enqueue=True, reason=f"overlap policy {policy}", control=control,  # type: ignore[arg-type]
                                targets=("old",) if control else ())


@pytest.mark.parametrize("policy", POLICIES)
def test_the_concurrency_cap_holds_a_run_and_controls_nothing(policy: str) -> None:
    decided = admit(policy, 2, "new", [running("a"), running("b")], [], None)
    assert decided == Admission(start=False, enqueue=True, reason="concurrency limit")
    assert admit(policy, 3, "new", [running("a"), running("b")], [], None).start is (policy == "allow")


def test_the_waiting_list_is_first_in_first_out() -> None:
    assert admit("allow", None, "second", [], ["first", "second"], "first") == Admission(
        start=False, enqueue=False, reason="overlap policy allow")
    assert admit("buffer_all", None, "first", [], ["first", "second"], "first") == Admission(start=True, dequeue=True)
    assert admit("buffer_all", None, "new", [running("old")], ["w"], "w").enqueue, "a new run joins the end"


def test_a_run_is_never_blocked_by_itself() -> None:
    assert admit("cancel_other", 1, "me", [running("me")], [], None) == Admission(start=True)


# ------------------------------------------------------------------------------- through the engine
HOOK = """
name: hooks
on:
  http.request: {}
"""


def hook(ident: str) -> dict:
    return {"delivery_id": ident, "method": "POST", "body": {}}


def starts(decision: Decision) -> list[str]:
    return [c.run_key for c in decision.commands if type(c) is StartRun]


@pytest.mark.parametrize("policy", ["cancel_other", "terminate_other"])
def test_cancel_and_terminate_other_stop_the_run_in_flight_and_start_the_new_one_once_it_ended(
        tmp_path: pathlib.Path, policy: str) -> None:
    spec = make_spec(tmp_path, HOOK, task_queue="tq", overlap=policy)
    engine = Engine(spec, initial_state(spec, T0))
    first = engine.deliver(None, hook("h1"), T0)
    (old,) = starts(first)
    engine.run_started(old, "r1", T0)
    second = engine.deliver(None, hook("h2"), T0 + timedelta(seconds=1))
    assert second.value.disposition == Disposition.QUEUED and starts(second) == []
    (control,) = second.commands
    assert type(control) is ControlRun and control.run_key == old and control.action == policy.split("_")[0]
    assert engine.deliver(None, hook("h3"), T0).commands == [], "a run is asked to stop once"
    ended = engine.run_finished(old, "cancelled", T0 + timedelta(seconds=2))
    assert starts(ended) == [second.value.run_key], "the first run waiting starts once the other ended"
    assert engine.state.runs[engine.state.waiting[0]].waiting_for == f"overlap policy {policy}"


def test_max_concurrent_runs_starts_the_next_waiting_run_as_a_slot_frees(tmp_path: pathlib.Path) -> None:
    spec = make_spec(tmp_path, HOOK, task_queue="tq", max_concurrent_runs=2)
    engine = Engine(spec, initial_state(spec, T0))
    decisions = [engine.deliver(None, hook(f"h{i}"), T0) for i in range(4)]
    assert [d.value.disposition for d in decisions] == [Disposition.ACCEPTED] * 2 + [Disposition.QUEUED] * 2
    first = starts(decisions[0])[0]
    engine.run_started(first, "r", T0)
    assert starts(engine.run_finished(first, "completed", T0)) == [decisions[2].value.run_key]
