"""The engine's public face (issue 14 item 1): every call that changes it returns one Decision, and
the activation workflow feeds it and executes its commands through that face only."""

from __future__ import annotations

import ast
import inspect
import pathlib
from datetime import UTC, datetime, timedelta

from tests.support.activation import make_spec
from tests.support.paths import ROOT
from wf_initiation.core.engine import (
    Decision,
    DeliveryResult,
    Disposition,
    Engine,
    OperatorOutcome,
    PollResultIn,
    RunPoll,
    StartRun,
    WatchRuns,
    decode_state,
    initial_state,
)
from wf_initiation.core.engine._dispatch import Dispatcher
from wf_initiation.wire import OperatorRequest
from wf_initiation.workflows.activation import encode_state

SHELL = [ROOT / "workflows" / name for name in ("activation.py", "_deliveries.py", "_executor.py", "_inbox.py",
                                                "_admission.py", "_compat.py", "_telemetry.py", "_continue.py",
                                                "_queries.py", "_time.py", "_verdicts.py", "_splits.py")]
T0 = datetime(2026, 3, 1, tzinfo=UTC)
READS = {"spec", "state", "bounded", "carry_blocked", "previous_activations", "acceptance_seq", "in_flight", "lookup",
         "next_wakeup", "next_occurrence", "deactivation_status", "deactivation_settled", "status", "summary",
         "full_state", "events", "delivery", "markdown", "error_counts", "dispositions_since", "gauges", "encode_state",
         "capacity", "last_seq", "unreleased_through", "lanes_summary", "causation", "waiting_signals", "waiting_record",
         "deferred_signals", "unencoded_refusal", "redrivable", "retire_due", "split", "drain_check", "growth"}
SOURCES = """
name: mixed
on:
  - http.request: {}
    as: hook
  - sql.row_inserted: {table: items, column: seq}
    as: row
"""


def test_every_public_call_that_is_not_a_read_returns_a_decision() -> None:
    calls = {name: fn for name, fn in inspect.getmembers(Engine) if not name.startswith("_")}
    assert READS <= calls.keys(), "a read named here is gone: update this list"
    for name, fn in calls.items():
        if name in READS:
            continue
        returns = inspect.signature(fn).return_annotation
        assert str(returns).startswith("Decision["), f"Engine.{name} returns {returns}, not a Decision"


def test_release_lets_go_of_every_id_and_decides_nothing(tmp_path: pathlib.Path) -> None:
    spec = make_spec(tmp_path, "name: hooks\non:\n  http.request: {}\n  when: \"{{ request.body.keep }}\"\n", task_queue="tq")
    engine = Engine(spec, initial_state(spec, T0))
    for i in range(5):
        engine.deliver(None, {"delivery_id": f"d{i}", "method": "POST", "body": {"keep": False}}, T0)
    carried = Engine(spec, decode_state(engine.encode_state(keep_live=2)))
    engine.deliver(None, {"delivery_id": "d9", "method": "POST", "body": {"keep": False}}, T0)
    assert carried.capacity()["retained_ids"] == 5 and engine.capacity()["retained_ids"] == 6
    for held in (engine, carried):
        assert held.release().commands == []
        assert held.capacity()["retained_ids"] == 0


def test_a_delivery_answers_with_its_result_and_the_start_it_decided(tmp_path: pathlib.Path) -> None:
    spec = make_spec(tmp_path, "name: hooks\non:\n  http.request: {}\n", task_queue="tq")
    engine = Engine(spec, initial_state(spec, T0))
    decision = engine.deliver(None, {"delivery_id": "d1", "method": "POST", "body": {}}, T0)
    assert type(decision) is Decision and type(decision.value) is DeliveryResult
    assert decision.value.disposition == Disposition.ACCEPTED
    assert [(type(c), c.run_key) for c in decision.commands] == [(StartRun, decision.value.run_key)]
    assert engine.deliver(None, {"delivery_id": "d1", "method": "POST", "body": {}}, T0).commands == [], "a duplicate decides nothing"
    outcome = engine.operate(OperatorRequest(action="drop_pending", run_key="nope"), T0)
    assert outcome.value == OperatorOutcome(False, "no pending run 'nope'") and outcome.commands == []


def test_polls_to_run_and_runs_to_watch_are_commands_of_a_tick(tmp_path: pathlib.Path) -> None:
    # proves: POLL-1
    spec = make_spec(tmp_path, SOURCES, task_queue="tq",
                     connections={"db": {"connector": "sql", "sqlite": str(tmp_path / "s.db")}})
    engine = Engine(spec, initial_state(spec, T0))
    (poll,) = [c for c in engine.tick(T0).commands if type(c) is RunPoll]
    assert (poll.entry, poll.seq, poll.cursor) == ("row", 1, None)
    assert [c for c in engine.tick(T0).commands if type(c) is RunPoll] == [], "a poll in flight is not run twice"
    (start,) = engine.deliver("hook", {"delivery_id": "d1", "method": "POST", "body": {}}, T0).commands
    engine.run_started(start.run_key, "run-1", T0)
    later = T0 + timedelta(seconds=1)
    engine.poll_succeeded("row", poll.seq, poll.version, PollResultIn(), later)
    (watch,) = [c for c in engine.tick(later).commands if type(c) is WatchRuns]
    assert [(w.run_key, w.run_id) for w in watch.runs] == [(start.run_key, "run-1")]
    engine.run_finished(start.run_key, "completed", later)
    assert not [c for c in engine.tick(later).commands if type(c) is WatchRuns], "nothing running: nothing to watch"


def test_a_tick_lists_only_the_running_runs_the_shell_does_not_watch_yet(tmp_path: pathlib.Path) -> None:
    # The loop ticks on every wake-up: with thousands of runs running, listing every one each time
    # cost milliseconds per tick. The shell says what it watches and whether it has room for more.
    spec = make_spec(tmp_path, "name: hooks\non:\n  http.request: {}\n", task_queue="tq")
    engine = Engine(spec, initial_state(spec, T0))
    keys = []
    for i in range(3):
        (start,) = engine.deliver(None, {"delivery_id": f"d{i}", "method": "POST", "body": {}}, T0).commands
        engine.run_started(start.run_key, f"run-{i}", T0)
        keys.append(start.run_key)
    (watch,) = [c for c in engine.tick(T0, watched={keys[1]}).commands if type(c) is WatchRuns]
    assert [w.run_key for w in watch.runs] == [keys[0], keys[2]]
    assert not [c for c in engine.tick(T0, watched=set(keys)).commands if type(c) is WatchRuns], "all watched"
    assert not [c for c in engine.tick(T0, watch_room=False).commands if type(c) is WatchRuns], "no room"
    dispatcher = Dispatcher(bounded=True)
    (call,) = dispatcher.plan(engine.tick(T0).commands).calls
    assert dispatcher.watched == set(keys) and dispatcher.watch_room
    assert not dispatcher.plan(engine.tick(T0, watched=dispatcher.watched).commands).calls, "nothing new to watch"


def test_runs_to_watch_say_whether_an_ending_is_awaited_at_once(tmp_path: pathlib.Path) -> None:
    # proves: TRIG-14
    # Only then may the shell gather new runs for its next watcher (core.engine.Dispatcher): a run
    # queued behind its key, an overlap policy, a concurrency cap, lifecycle events all wait on endings.
    def prompt(workfile: str, **settings: object) -> bool:
        spec = make_spec(tmp_path, workfile, task_queue="tq", **settings)
        engine = Engine(spec, initial_state(spec, T0))
        for i in range(2):
            for c in engine.deliver(None, {"delivery_id": f"d{i}", "method": "POST", "body": {"k": "one"}}, T0).commands:
                if type(c) is StartRun:
                    engine.run_started(c.run_key, f"run-{i}", T0)
        (watch,) = [c for c in engine.tick(T0).commands if type(c) is WatchRuns]
        return watch.prompt

    hooks = "name: hooks\non:\n  http.request: {}\n"
    assert prompt(hooks, lifecycle_events=False) is False, "an ending only starts its id's retention"
    assert prompt(hooks) is True, "lifecycle events to publish"
    assert prompt(hooks, lifecycle_events=False, overlap="skip") is True
    assert prompt(hooks, lifecycle_events=False, max_concurrent_runs=5) is True
    keyed = "name: keyed\non:\n  http.request: {}\n  as: hook\n  queue_by: \"{{ hook.body.k }}\"\n"
    assert prompt(keyed, lifecycle_events=False) is True, "the second run waits behind the first's key"


def test_the_counts_of_starting_and_running_runs_follow_every_transition(tmp_path: pathlib.Path) -> None:
    # The page and the summary read counts the engine keeps, not a scan of the runs in flight.
    spec = make_spec(tmp_path, "name: hooks\non:\n  http.request: {}\n", task_queue="tq", max_concurrent_runs=4)
    engine = Engine(spec, initial_state(spec, T0))
    core = engine._machine

    def counted() -> tuple[int, int, int]:
        summary = engine.summary()
        assert (core.starting, core.running) == (summary["runs_starting"], summary["runs_running"])
        by_status = [r.status for r in core.state.runs.values()]
        assert (summary["runs_starting"], summary["runs_running"]) == (by_status.count("starting"), by_status.count("running"))
        assert f"{core.running} running · {core.starting} starting · {summary['runs_pending']} pending" in engine.markdown()
        return summary["runs_pending"], summary["runs_starting"], summary["runs_running"]

    keys = [c.run_key for i in range(6) for c in engine.deliver(None, {"delivery_id": f"d{i}", "method": "POST", "body": {}}, T0).commands
            if type(c) is StartRun]
    assert counted() == (2, 4, 0)
    engine.run_started(keys[0], "r0", T0)
    engine.run_started(keys[0], "r0", T0)  # reported twice: counted once
    engine.run_started(keys[1], "r1", T0)
    assert counted() == (2, 2, 2)
    engine.run_finished(keys[2], "completed", T0)  # ended before its start was confirmed
    engine.run_start_failed(keys[3], "too big", T0)
    engine.run_finished(keys[0], "failed", T0)
    assert counted() == (0, 2, 1)
    engine = Engine(spec, decode_state(encode_state(engine)))  # continue-as-new: counted from the state
    core = engine._machine
    assert counted() == (0, 2, 1)


def _imports(path: pathlib.Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return names


def test_the_shell_imports_only_the_engines_public_package_and_never_reads_its_state() -> None:
    for path in SHELL:
        private = [n for n in _imports(path) if n.startswith("wf_initiation.core.engine.")
                   and n.rsplit(".", 1)[-1].startswith("_")]
        assert private == [], f"{path.name} imports private engine modules: {private}"
        text = path.read_text()
        for internal in ("engine.state", "engine._", "engine.outbox"):
            assert internal not in text, f"{path.name} reads {internal!r}: use the engine's read API"
