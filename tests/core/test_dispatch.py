"""The dispatcher: which calls a workflow task makes for the engine's commands (pure, no server)."""

from __future__ import annotations

from datetime import UTC, datetime

from wf_initiation.core.engine import (
    ControlCall,
    ControlRun,
    Dispatcher,
    PollCall,
    PublishCall,
    PublishEvent,
    RunPoll,
    SignalCall,
    SignalRun,
    StartCall,
    StartRun,
    WatchCall,
    WatchRuns,
    WatchTarget,
)
from wf_initiation.core.engine._dispatch import MAX_START_ACTIVITIES, MAX_WATCHERS, PUBLISH_BATCH, START_BATCH, WATCH_BATCH
from wf_initiation.core.limits import KIB, MAX_RUN_INPUT_BYTES, MAX_START_BYTES, MAX_TASK_BYTES
from wf_initiation.core.runinput import Initiation, RunInput, TriggerInfo

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def start(key: str, body: int = 0) -> StartRun:
    return StartRun(run_key=key, input=RunInput(
        trigger=TriggerInfo(name="hook", connector="http.request", kind="external"), bindings={"hook": "x" * body},
        initiation=Initiation(activation_id="a@1", workflow="a", run_key=key, accepted_at=T0)))


def starts(plan) -> list[StartCall]:
    return [c for c in plan.calls if type(c) is StartCall]


def test_starts_go_in_chunks_and_at_most_four_start_activities_at_once() -> None:
    d = Dispatcher(bounded=True)
    plan = d.plan([start(f"r{i}") for i in range(START_BATCH * (MAX_START_ACTIVITIES + 1) + 7)])
    assert [len(c.runs) for c in starts(plan)] == [START_BATCH] * MAX_START_ACTIVITIES
    assert d.starts_pending and d.start_calls == MAX_START_ACTIVITIES
    d.start_ended(starts(plan)[0])
    d.new_task()
    again = starts(d.plan([]))
    assert [len(c.runs) for c in again] == [START_BATCH], "one slot free: the next chunk, nothing more"
    assert again[0].runs[0].run_key == f"r{START_BATCH * MAX_START_ACTIVITIES}", "in the order decided"


def test_a_run_decided_twice_is_started_once() -> None:
    d = Dispatcher(bounded=True)
    assert [c.run_key for c in starts(d.plan([start("a"), start("a")]))[0].runs] == ["a"]
    assert starts(d.plan([start("a")])) == [], "already starting"


def test_a_task_schedules_at_most_its_byte_budget_of_run_inputs() -> None:
    d = Dispatcher(bounded=True)
    big = 400 * KIB
    commands = [start(f"r{i}", body=big) for i in range(12)]
    first = starts(d.plan(commands))
    sent = sum(len(c.runs) for c in first)
    assert sent * big <= MAX_TASK_BYTES and sent < 12
    assert all(sum(len(r.input.model_dump_json()) for r in c.runs) <= MAX_START_BYTES or len(c.runs) == 1 for c in first)
    for c in first:
        d.start_ended(c)
    assert starts(d.plan([])) == [], "the same task: its budget is spent"
    d.new_task()
    assert starts(d.plan([])), "the next task goes on"


def test_a_run_whose_input_no_start_can_carry_is_a_start_fault_at_once() -> None:
    d = Dispatcher(bounded=True)
    plan = d.plan([start("huge", body=MAX_RUN_INPUT_BYTES + 1), start("fine")])
    assert [f.run_key for f in plan.faults] == ["huge"] and "a run input may have at most" in plan.faults[0].error
    assert [r.run_key for r in starts(plan)[0].runs] == ["fine"]


def test_a_chunk_that_failed_for_good_is_started_again_one_run_per_activity() -> None:
    d = Dispatcher(bounded=True)
    (call,) = starts(d.plan([start("a"), start("b"), start("c")]))
    d.start_ended(call)
    assert d.start_failed(call, permanent=True, error="cannot decode") == []
    d.new_task()
    again = starts(d.plan([]))
    assert [[r.run_key for r in c.runs] for c in again] == [["a"], ["b"], ["c"]]
    d.start_ended(again[1])
    (fault,) = d.start_failed(again[1], permanent=True, error="cannot decode")
    assert fault.run_key == "b", "alone and failing for good: a start fault"


def test_a_transient_failure_starts_the_chunk_again_whole() -> None:
    d = Dispatcher(bounded=True)
    (call,) = starts(d.plan([start("a"), start("b")]))
    d.start_ended(call)
    assert d.start_failed(call, permanent=False, error="unavailable") == []
    assert [[r.run_key for r in c.runs] for c in starts(d.plan([]))] == [["a", "b"]]


def test_calls_come_in_a_fixed_order_whatever_the_order_of_commands() -> None:
    d = Dispatcher(bounded=True)
    poll = RunPoll(entry="feed", connector="rss.item_published", seq=1, version=0, cursor=None, config={}, connection={}, limit=10)
    commands = [poll, WatchRuns(runs=[WatchTarget(run_key="w", run_id="1")]),
                PublishEvent(key="p", connector="workflow.completed", payload={}),
                SignalRun(workflow_id="x", signal="s", payload={}, key="k"),
                ControlRun(run_key="c", action="cancel", reason="r"), start("s")]
    assert [type(c) for c in d.plan(commands).calls] == [StartCall, ControlCall, SignalCall, PublishCall, WatchCall, PollCall]


def test_kept_signals_and_publishes_are_in_flight_once() -> None:
    d = Dispatcher(bounded=True)
    signal = SignalRun(workflow_id="x", signal="s", payload={}, key="k")
    (call,) = d.plan([signal]).calls
    assert d.acking == {"k"} and d.plan([signal]).calls == [], "in flight: not sent again"
    d.signal_ended(call)
    assert d.plan([signal]).calls, "confirmed or failed: the engine may keep it again"
    events = [PublishEvent(key=f"p{i}", connector="workflow.completed", payload={}) for i in range(PUBLISH_BATCH + 1)]
    assert [len(c.events) for c in d.plan(events).calls] == [PUBLISH_BATCH, 1]


def test_signals_share_the_tasks_byte_budget() -> None:
    d = Dispatcher(bounded=True)
    payload = {"x": "y" * (MAX_TASK_BYTES // 3)}
    calls = d.plan([SignalRun(workflow_id="x", signal="s", payload=payload, key=f"k{i}") for i in range(5)]).calls
    assert 1 <= len(calls) < 5
    d.new_task()
    assert d.plan([]).calls, "the next task sends more"


def test_running_runs_are_watched_by_a_bounded_number_of_activities() -> None:
    d = Dispatcher(bounded=True)
    running = [WatchTarget(run_key=f"r{i}", run_id=str(i)) for i in range(WATCH_BATCH * MAX_WATCHERS + 5)]
    watches = d.plan([WatchRuns(runs=running)]).calls
    assert [len(c.runs) for c in watches] == [WATCH_BATCH] * MAX_WATCHERS
    assert d.plan([WatchRuns(runs=running)]).calls == [], "all watchers busy"
    d.watch_ended(watches[0])
    (again,) = d.plan([WatchRuns(runs=running)]).calls
    never = [f"r{i}" for i in range(WATCH_BATCH * MAX_WATCHERS, len(running))]
    assert [r.run_key for r in again.runs] == never + [f"r{i}" for i in range(WATCH_BATCH - len(never))], \
        "the runs never watched first, then those of the watcher that came back"


def test_with_more_runs_running_than_the_watchers_hold_every_run_takes_its_turn() -> None:
    # proves: TRIG-14, EXT-5
    # A watcher comes back after its max_wait with no ending; if it took the same runs again, the
    # runs past what the watchers hold would never be watched, and their endings (which release
    # their queue keys and start their ids' retention) would wait for the first runs to end.
    d = Dispatcher(bounded=True)
    running = [WatchTarget(run_key=f"r{i}", run_id=str(i)) for i in range(WATCH_BATCH * MAX_WATCHERS * 2)]
    watched: set[str] = set()
    calls = d.plan([WatchRuns(runs=running)]).calls
    for _ in range(MAX_WATCHERS * 2):
        watched.update(r.run_key for c in calls for r in c.runs)
        call, calls = calls[0], calls[1:]
        d.watch_ended(call)  # max_wait passed, nothing ended
        calls += d.plan([WatchRuns(runs=[r for r in running if r.run_key not in d.watched])]).calls
    assert watched == {r.run_key for r in running}, "every running run was watched in turn"
    assert len(d._returned) <= len(running) - len(d.watched)
    ended = {r.run_key for r in running[: WATCH_BATCH * MAX_WATCHERS]}
    for call in calls:
        d.watch_ended(call)
    d.plan([WatchRuns(runs=[r for r in running if r.run_key not in ended])])
    assert not set(d._returned) & ended, "runs that ended are forgotten"


def test_a_run_begun_before_the_budgets_keeps_fixed_chunks_and_sends_signals_at_once() -> None:
    d = Dispatcher(bounded=False)
    plan = d.plan([start(f"r{i}", body=400 * KIB) for i in range(12)] +
                  [SignalRun(workflow_id="x", signal="s", payload={"x": "y" * MAX_TASK_BYTES}, key=f"k{i}") for i in range(3)])
    assert [len(c.runs) for c in starts(plan)] == [12] and plan.faults == []
    assert sum(type(c) is SignalCall for c in plan.calls) == 3


def test_kept_signals_wait_while_the_most_that_may_be_in_flight_are_out() -> None:
    # Temporal allows 2,000 pending signals per workflow: a deactivation ending 3,000 subscriptions
    # must not send their notices all at once.
    from wf_initiation.core.engine._dispatch import MAX_SIGNALS_OUT

    d = Dispatcher(bounded=True)
    signals = [SignalRun(workflow_id=f"w{i}", signal="s", payload={}, key=f"k{i}") for i in range(MAX_SIGNALS_OUT + 7)]
    calls = d.plan(signals).calls
    assert len(calls) == MAX_SIGNALS_OUT
    d.new_task()
    assert d.plan([]).calls == [], "none more while the first are out"
    for call in calls[:5]:
        d.signal_ended(call)
    assert len(d.plan([]).calls) == 5
    asked: list[bool] = []
    legacy = Dispatcher(bounded=True, paged=lambda: asked.append(False) or False)
    assert len(legacy.plan(signals).calls) == len(signals) and asked == [False], "a run begun before: all at once"


def targets(prefix: str, n: int) -> list[WatchTarget]:
    return [WatchTarget(run_key=f"{prefix}{i}", run_id=str(i)) for i in range(n)]


def test_runs_started_while_a_first_look_is_out_wait_for_the_next_when_no_ending_is_awaited() -> None:
    # proves: EXT-5
    # Their endings only start their ids' retention: a burst of starts is watched in a few first
    # looks (one activity and one workflow task each), not one per start, and each ending still
    # reaches the activation (a first look comes back within FIRST_LOOK_WAIT).
    asked: list[bool] = []
    d = Dispatcher(bounded=True, gathers=lambda: asked.append(True) or True)
    first, second, third = targets("a", 3), targets("b", 2), targets("c", 4)
    (look,) = d.plan([WatchRuns(runs=first, prompt=False)]).calls
    assert type(look) is WatchCall and look.first_look and [r.run_key for r in look.runs] == ["a0", "a1", "a2"]
    assert d.plan([WatchRuns(runs=second, prompt=False)]).calls == [], "gathered while the first look is out"
    assert d.plan([WatchRuns(runs=second + third, prompt=False)]).calls == []
    d.watch_ended(look)  # a0 ended; a1 and a2 still run
    calls = d.plan([WatchRuns(runs=first[1:] + second + third, prompt=False)]).calls
    assert [(c.first_look, [r.run_key for r in c.runs]) for c in calls] == [
        (True, ["b0", "b1", "c0", "c1", "c2", "c3"]),  # the gathered runs: one first look
        (False, ["a1", "a2"]),  # looked at before: watched as any run, until they end
    ]
    assert asked == [True], "the run's patch is asked once"


def test_runs_are_watched_at_once_when_an_ending_is_awaited() -> None:
    # proves: TRIG-14
    # A queued run, an overlap policy, a schedule, lifecycle events (Runs.endings_awaited): the
    # ending is wanted as soon as it comes, so no run waits for the next look.
    d = Dispatcher(bounded=True)
    (look,) = d.plan([WatchRuns(runs=targets("a", 3), prompt=False)]).calls
    (now,) = d.plan([WatchRuns(runs=targets("b", 2), prompt=True)]).calls
    assert look.first_look and not now.first_look and [r.run_key for r in now.runs] == ["b0", "b1"]


def test_a_full_watch_of_new_runs_goes_out_while_a_first_look_is_out() -> None:
    d = Dispatcher(bounded=True)
    d.plan([WatchRuns(runs=targets("a", 1), prompt=False)])
    calls = d.plan([WatchRuns(runs=targets("b", WATCH_BATCH + 1), prompt=False)]).calls
    assert [(c.first_look, len(c.runs)) for c in calls] == [(True, WATCH_BATCH), (True, 1)]


def test_a_run_recorded_before_gathered_watches_watches_every_new_run_at_once() -> None:
    # Its history has a watch activity per start: replaying it must make the same calls.
    d = Dispatcher(bounded=True, gathers=lambda: False)
    (look,) = d.plan([WatchRuns(runs=targets("a", 3), prompt=False)]).calls
    (more,) = d.plan([WatchRuns(runs=targets("b", 2), prompt=False)]).calls
    assert not look.first_look and not more.first_look and [r.run_key for r in more.runs] == ["b0", "b1"]


def test_the_patch_is_not_asked_while_endings_are_awaited() -> None:
    asked: list[bool] = []
    d = Dispatcher(bounded=True, gathers=lambda: asked.append(True) or True)
    d.plan([WatchRuns(runs=targets("a", 3), prompt=True)])
    d.plan([WatchRuns(runs=targets("b", 3), prompt=True)])
    assert asked == [], "a history that never gathered has no marker to find"
