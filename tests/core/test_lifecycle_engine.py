"""Lifecycle events a start or watch activity already published (issue 19 item 2): the engine keeps
nothing for them, and the event such an activity builds is the one the engine would have kept."""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime, timedelta

from tests.support.activation import make_spec
from wf_initiation.core.engine import Engine, PublishEvent, StartRun, initial_state, transition_event

T0 = datetime(2026, 3, 1, tzinfo=UTC)
HOOK = "name: hooks\non:\n  http.request: {}\n"


def _started(tmp_path: pathlib.Path, *, published: bool) -> tuple[Engine, str, list[PublishEvent]]:
    spec = make_spec(tmp_path, HOOK, task_queue="tq", lifecycle_events=True)
    engine = Engine(spec, initial_state(spec, T0))
    (start,) = engine.deliver(None, {"delivery_id": "d1", "method": "POST", "body": {}}, T0).commands
    assert type(start) is StartRun
    commands = engine.run_started(start.run_key, "rid-1", T0 + timedelta(seconds=1), published=published).commands
    return engine, start.run_key, [c for c in commands if type(c) is PublishEvent]


def test_a_started_event_the_start_activity_published_is_not_kept(tmp_path: pathlib.Path) -> None:
    # proves: COMP-3
    engine, run_key, kept = _started(tmp_path, published=False)
    assert [c.connector for c in kept] == ["workflow.started"] and len(engine.state.unacked) == 1
    at = T0 + timedelta(seconds=1)
    built = transition_event("hooks", run_key, "rid-1", None, engine.causation(run_key), at)
    assert (built.connector, built.payload) == (kept[0].connector, kept[0].payload), "the activity builds the engine's event"

    engine, run_key, kept = _started(tmp_path, published=True)
    assert kept == [] and engine.state.unacked == {}
    assert engine.summary()["runs_running"] == 1, "the run is running all the same"


def test_an_ending_the_watch_published_is_not_kept(tmp_path: pathlib.Path) -> None:
    # proves: COMP-3
    for published in (False, True):
        engine, run_key, _ = _started(tmp_path, published=True)
        at = T0 + timedelta(seconds=2)
        commands = engine.run_finished(run_key, "failed", at, published=published).commands
        kept = [c for c in commands if type(c) is PublishEvent]
        if published:
            assert kept == [] and engine.state.unacked == {}
            continue
        assert [c.connector for c in kept] == ["workflow.failed"]
        built = transition_event("hooks", run_key, "rid-1", "failed", None, at)
        assert built.payload == kept[0].payload and built.payload["outcome"] == "failed"


def test_with_lifecycle_events_off_nothing_is_kept_either_way(tmp_path: pathlib.Path) -> None:
    spec = make_spec(tmp_path, HOOK, task_queue="tq", lifecycle_events=False)
    engine = Engine(spec, initial_state(spec, T0))
    (start,) = engine.deliver(None, {"delivery_id": "d1", "method": "POST", "body": {}}, T0).commands
    assert [c for c in engine.run_started(start.run_key, "r", T0).commands if type(c) is PublishEvent] == []
    assert [c for c in engine.run_finished(start.run_key, "completed", T0).commands if type(c) is PublishEvent] == []
