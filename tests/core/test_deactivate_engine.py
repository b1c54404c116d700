"""Deactivation rules in the pure engine (core/engine/_deactivate.py), time as an argument.

The shell around them (the deactivate update, completion, re-activation through the client) is
tested against a real dev server in tests/integration/test_deactivate.py.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.activation import make_spec
from tests.support.engine import drive
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.engine import NOT_RETAINED, ControlRun, Disposition, Engine, StartRun, initial_state, operator
from wf_initiation.workflows.activation import decode_state, encode_state

T0 = datetime(2030, 1, 1, tzinfo=UTC)

WORKFILE = """
name: lifecycle-engine
inputs:
  team: {{default: blue}}
on:
  - http.request: {{path: /hooks}}
    as: hook
    queue_by: "{{{{ hook.body.key }}}}"
  - http.request: {{path: /orders}}
    as: order
    batch: {{size: 5{wait}}}
  - sheet.row_added: {{sheet: tasks, connection: sheets}}
    as: task
  - time.schedule: {{interval: 1m}}
    as: tick
"""
CONNECTIONS = {"sheets": {"connector": "sheet", "dir": "/nonexistent"}}


@dataclass
class Req:
    queued: str
    running: str = "leave"
    action_id: str | None = None
    note: str | None = None


@dataclass
class Op:
    action: str
    action_id: str | None = None
    entry: str | None = None
    cursor: str | None = None
    note: str | None = None
    choice: str | None = None
    count: int | None = None
    range_id: str | None = None
    run_key: str | None = None
    start: str | None = None
    end: str | None = None


def spec(tmp_path: pathlib.Path, *, wait: str = ", max_wait: 1h", **settings) -> ActivationSpec:
    return make_spec(tmp_path, WORKFILE.format(wait=wait), task_queue="unused", connections=CONNECTIONS, **settings)


def engine_for(s: ActivationSpec) -> Engine:
    return drive(Engine(s, initial_state(s, T0)))


def hook(ident: str, key: str = "k") -> dict:
    return {"delivery_id": ident, "method": "POST", "body": {"key": key}}


def busy(e: Engine) -> dict[str, str]:
    """h1 running, h2 queued behind its key, o1 in an open batch; returns their run keys."""
    h1 = e.deliver("hook", hook("h1"), T0)
    h2 = e.deliver("hook", hook("h2"), T0)
    o1 = e.deliver("order", hook("o1"), T0)
    assert (h1.disposition, h2.disposition, o1.disposition) == (Disposition.ACCEPTED, Disposition.QUEUED, Disposition.BATCHED)
    e.run_started(h1.run_key, "r1", T0)
    e.take_commands()
    e.state.unacked.clear()  # the workflow.started event, as the shell confirms it
    return {"h1": h1.run_key, "h2": h2.run_key, "o1": o1.run_key}


def test_cancel_queued_drops_queued_runs_and_open_batches_and_records_them_as_dropped(tmp_path: pathlib.Path) -> None:
    # proves: BATCH-5, EXT-5
    e = engine_for(spec(tmp_path))
    keys = busy(e)
    out = e.deactivate(Req("cancel"), T0 + timedelta(seconds=1))
    assert (out.ok, out.status) == (True, "deactivating")
    assert out.remaining == {"pending_runs": 0, "starting_runs": 0, "running_runs": 1, "open_batches": 0, "unconfirmed": 0}
    assert keys["h2"] not in e.state.runs and not e.state.batches
    for ident in ("h2", "o1"):
        record = e.lookup(("hook" if ident == "h2" else "order") + "\x1f" + ident)
        assert record.disposition == Disposition.DROPPED and record.released_at == T0 + timedelta(seconds=1)
    assert not [c for c in e.take_commands() if isinstance(c, StartRun)], "nothing queued may start"
    assert e.deactivation_settled(), "leave: the running run does not keep it open"
    final = e.finish_deactivation(T0 + timedelta(seconds=2))
    assert (final["dropped_runs"], final["dropped_batches"], final["left_running"]) == (1, 1, 1)
    assert e.status() == "deactivated"


def test_drain_lets_queued_runs_start_and_closes_a_batch_at_its_deadline_never_earlier(tmp_path: pathlib.Path) -> None:
    # proves: BATCH-3, BATCH-4, TRIG-11
    e = engine_for(spec(tmp_path, wait=", max_wait: 10s"))
    keys = busy(e)
    e.deactivate(Req("drain"), T0 + timedelta(seconds=1))
    assert e.state.batches, "a batch with max_wait is not closed early (BATCH-3)"
    e.tick(T0 + timedelta(seconds=9))
    assert e.state.batches and not e.deactivation_settled()
    e.tick(T0 + timedelta(seconds=10))
    started = [c.run_key for c in e.take_commands() if isinstance(c, StartRun)]
    assert started == [keys["o1"]], "the batch closes at its deadline and its run starts"
    e.run_finished(keys["h1"], "completed", T0 + timedelta(seconds=11))
    assert [c.run_key for c in e.take_commands() if isinstance(c, StartRun)] == [keys["h2"]], "the queue moves on"
    for key in (keys["o1"], keys["h2"]):
        e.run_started(key, "r", T0 + timedelta(seconds=12))
        assert not e.deactivation_settled()
        e.run_finished(key, "completed", T0 + timedelta(seconds=13))
    e.state.unacked.clear()  # lifecycle publishes confirmed by the shell
    assert e.deactivation_settled()


def test_drain_closes_a_batch_without_max_wait_at_once(tmp_path: pathlib.Path) -> None:
    # proves: BATCH-4
    e = engine_for(spec(tmp_path, wait=""))
    keys = busy(e)
    e.deactivate(Req("drain"), T0)
    assert not e.state.batches and e.state.deactivation.closed_batches == 1
    assert keys["o1"] in [c.run_key for c in e.take_commands() if isinstance(c, StartRun)]


def test_terminate_controls_every_running_run_and_waits_for_its_outcome(tmp_path: pathlib.Path) -> None:
    e = engine_for(spec(tmp_path))
    keys = busy(e)
    e.deactivate(Req("cancel", "terminate"), T0)
    controls = [c for c in e.take_commands() if isinstance(c, ControlRun)]
    assert [(c.run_key, c.action) for c in controls] == [(keys["h1"], "terminate")]
    e.tick(T0)  # the deactivation's controls are decided on every tick
    assert not e.take_commands(), "a run is controlled once"
    assert not e.deactivation_settled(), "its outcome is awaited"
    e.run_finished(keys["h1"], "terminated", T0)
    e.state.unacked.clear()
    assert e.deactivation_settled()


def test_drain_refuses_to_cancel_or_terminate_running_runs(tmp_path: pathlib.Path) -> None:
    e = engine_for(spec(tmp_path))
    out = e.deactivate(Req("drain", "terminate"), T0)
    assert (out.ok, out.status) == (False, "refused") and "--cancel-queued" in out.message
    assert e.state.deactivation is None


def test_a_second_deactivation_only_escalates_and_an_action_id_applies_once(tmp_path: pathlib.Path) -> None:
    e = engine_for(spec(tmp_path))
    keys = busy(e)
    assert e.deactivate(Req("drain", action_id="a1"), T0).ok
    again = e.deactivate(Req("cancel", "terminate", action_id="a1"), T0)
    assert again.message == "already applied" and e.state.deactivation.queued == "drain"
    same = e.deactivate(Req("drain"), T0)
    assert same.message.startswith("already deactivating")
    weaker = e.deactivate(Req("cancel", "cancel"), T0)
    assert "escalated" in weaker.message and keys["h2"] not in e.state.runs
    assert [c.action for c in e.take_commands() if isinstance(c, ControlRun)] == ["cancel"]
    stronger = e.deactivate(Req("cancel", "terminate"), T0)
    assert "escalated" in stronger.message
    assert [c.action for c in e.take_commands() if isinstance(c, ControlRun)] == ["terminate"], "cancelled -> terminated"
    down = e.deactivate(Req("drain"), T0)
    assert down.message.startswith("already deactivating") and e.state.deactivation.running == "terminate"


def test_deliveries_are_refused_without_consuming_their_identity(tmp_path: pathlib.Path) -> None:
    # proves: INIT-6
    e = engine_for(spec(tmp_path))
    e.deactivate(Req("cancel"), T0)
    refused = e.deliver("hook", hook("late"), T0)
    assert refused.disposition == Disposition.DEACTIVATED and "wfi activate" in refused.message
    assert refused.delivery_id == "late" and Disposition.DEACTIVATED in NOT_RETAINED
    assert e.lookup("hook\x1flate") is None, "receipt alone is not acceptance: nothing retained"
    assert e.state.errors[-1].kind == "deactivated" and e.state.deactivation.refused == 1
    unknown = e.deliver("nope", {}, T0)
    assert unknown.disposition == Disposition.DEACTIVATED, "refused before any other check"


def test_schedules_and_polls_stop_and_operator_actions_that_start_work_are_refused(tmp_path: pathlib.Path) -> None:
    # proves: POLL-10
    e = engine_for(spec(tmp_path))
    e.tick(T0)
    [call] = e.polls_due(T0)
    e.deactivate(Req("cancel"), T0 + timedelta(seconds=1))
    assert e.next_occurrence() is None and e.polls_due(T0 + timedelta(hours=1)) == []
    e.poll_succeeded("task", call.seq, call.version, _result(), T0 + timedelta(seconds=2))
    assert e.state.polls["task"].cursor is None, "a poll in flight at deactivation is discarded"
    e.tick(T0 + timedelta(hours=1))
    assert not e.state.schedules["tick"].occurrences, "no occurrence after deactivation"
    for action in ("resume", "poll_now", "backfill", "decide_overflow"):
        ok, message = e.operate(Op(action=action, entry="tick"), T0)
        assert not ok and "deactivated" in message, action
    assert e.operate(Op(action="pause"), T0)[0], "pausing changes nothing that matters: allowed"


def _result():
    from wf_initiation.core.engine import PollItemIn, PollResultIn

    return PollResultIn(items=[PollItemIn(payload={"row_id": "t1", "row_number": 1}, cursor_after="1")], cursor="1")


def test_a_reactivation_keeps_the_dedup_set_and_cursor_and_restarts_schedules_from_now(tmp_path: pathlib.Path) -> None:
    # proves: INIT-5, INIT-7, EXT-5
    s = spec(tmp_path, missed={"policy": "catch_up", "bound": 100})
    e = engine_for(s)
    accepted = e.deliver("hook", hook("h1"), T0)
    e.run_started(accepted.run_key, "r1", T0)
    e.state.polls["task"].cursor = "7"
    e.deactivate(Req("cancel", action_id="off"), T0)
    e.finish_deactivation(T0)
    carried = decode_state(encode_state(e))
    later = T0 + timedelta(hours=3)
    again = drive(Engine(s, carried))
    assert again.resume(later)
    assert again.state.deactivation is None and again.status() == "active"
    assert again.deliver("hook", hook("h1"), later).disposition == Disposition.DUPLICATE
    assert again.state.polls["task"].cursor == "7" and not again.state.polls["task"].paused
    assert again.state.runs[accepted.run_key].status == "running", "a run left running is watched again"
    again.tick(later)
    assert again.state.schedules["tick"].counts == {}, "the deactivated hours are neither missed nor caught up"
    assert again.next_occurrence() == later + timedelta(minutes=1)
    assert operator.already_applied(again, "off"), "the deactivation's action id stays applied"
    assert not again.resume(later), "only a completed deactivation is a re-activation"


def test_a_reactivation_with_a_changed_binding_is_a_rebind(tmp_path: pathlib.Path) -> None:
    # proves: INIT-4, INIT-5
    old, new = spec(tmp_path), spec(tmp_path, inputs={"team": "red"})
    e = engine_for(old)
    e.deliver("hook", hook("h1"), T0)
    e.deactivate(Req("cancel"), T0)
    e.finish_deactivation(T0)
    again = drive(Engine(new, decode_state(encode_state(e))))
    again.resume(T0 + timedelta(minutes=5))
    assert again.state.activation_id == new.activation_id != old.activation_id
    assert again.state.previous_activations == [old.activation_id]
    assert again.deliver("hook", hook("h1"), T0).disposition == Disposition.DUPLICATE


@pytest.mark.parametrize("queued", ["drain", "cancel"])
def test_waiting_runs_subscriptions_end_as_refused(tmp_path: pathlib.Path, queued: str) -> None:
    from wf_initiation.core.engine import SubscribeRequest

    e = engine_for(spec(tmp_path))
    e.subscribe(SubscribeRequest(sub_id="s1", entry="hook", run_workflow_id="waiter"), T0)
    e.deactivate(Req(queued), T0)
    assert not e.state.subscriptions
    [notice] = e.state.unacked.values()
    assert notice.payload["reason"] == "refused" and "deactivated" in notice.payload["message"]
    assert not e.deactivation_settled(), "the notice must be sent before the activation completes"
    late = SubscribeRequest(sub_id="s2", entry="hook", run_workflow_id="late")
    e.subscribe(late, T0)
    assert "ended\x1fs2" in e.state.unacked and "s2" not in e.state.subscriptions
    assert e.state.errors[-1].kind == "subscription_refused"


def test_a_continue_as_new_while_deactivating_goes_on_and_issues_its_controls_again(tmp_path: pathlib.Path) -> None:
    s = spec(tmp_path)
    e = engine_for(s)
    keys = busy(e)
    e.deactivate(Req("cancel", "terminate"), T0)
    e.take_commands()  # lost: the run continued as new before the shell sent them
    carried = drive(Engine(s, decode_state(encode_state(e))))
    assert not carried.resume(T0 + timedelta(seconds=1))
    assert carried.status() == "deactivating"
    assert [(c.run_key, c.action) for c in carried.take_commands() if isinstance(c, ControlRun)] == [(keys["h1"], "terminate")]


def test_terminating_thousands_of_running_runs_goes_out_in_bounded_pages_with_its_progress_counted(
        tmp_path: pathlib.Path) -> None:
    # Past Temporal's 2,000 pending activities per workflow, one activity per run failed every task
    # (issue 32): the dispatcher pages them, and the answers count as the deactivation's progress.
    from wf_initiation.core.engine import ControlCall, Dispatcher
    from wf_initiation.core.engine._dispatch import CONTROL_PAGE, MAX_CONTROL_ACTIVITIES

    e = engine_for(spec(tmp_path))
    runs = 2_500
    for i in range(runs):
        out = e.deliver("hook", hook(f"h{i}", key=f"k{i}"), T0)
        e.run_started(out.run_key, f"r{i}", T0)
    e.take_commands()
    e.state.unacked.clear()
    e.deactivate(Req("cancel", "terminate"), T0)
    dispatcher = Dispatcher(bounded=True)
    in_flight: list[ControlCall] = []
    controlled: list[str] = []
    calls = dispatcher.plan(e.take_commands()).calls
    while calls or in_flight:
        in_flight += [c for c in calls if type(c) is ControlCall]
        assert len(in_flight) <= MAX_CONTROL_ACTIVITIES and all(len(c.commands) <= CONTROL_PAGE for c in in_flight)
        done = in_flight.pop(0)
        dispatcher.control_ended(done)
        keys = [c.run_key for c in done.commands]
        controlled += keys
        e.runs_controlled(keys, ["applied"] * (len(keys) - 1) + ["not applied: the run is not open"])
        e.tick(T0)  # nothing is decided twice
        calls = dispatcher.plan(e.take_commands()).calls
    assert sorted(controlled) == sorted(e.state.deactivation.controlled) and len(controlled) == runs
    d = e.summary()["deactivation"]
    pages = -(-runs // CONTROL_PAGE)
    assert (d["controlled_runs"], d["controls_applied"], d["controls_not_applied"]) == (runs, runs - pages, pages)
    assert not dispatcher.controls_pending


def test_a_dispatcher_of_a_run_begun_before_the_pages_controls_one_run_per_activity() -> None:
    from wf_initiation.core.engine import ControlCall, Dispatcher

    asked: list[bool] = []
    dispatcher = Dispatcher(bounded=True, paged=lambda: asked.append(False) or False)
    assert dispatcher.plan([]).calls == [] and asked == [], "asked only when the first control comes"
    calls = dispatcher.plan([ControlRun(run_key=f"r{i}", action="cancel", reason="x") for i in range(3)]).calls
    assert [(type(c), len(c.commands), c.paged) for c in calls] == [(ControlCall, 1, False)] * 3 and asked == [False]
    dispatcher.plan([ControlRun(run_key="r9", action="cancel", reason="x")])
    assert asked == [False], "asked once"
