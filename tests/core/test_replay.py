"""Determinism: a recorded activation history replays with the current code (Replayer)."""

from __future__ import annotations

import asyncio
import gzip

import pytest
from temporalio.client import WorkflowHistory

from tests.support.paths import HISTORIES
from tests.support.replay import replay_failure
from wf_initiation.core.engine import _intake
from wf_initiation.wire import WAIT_ACTIVITY
from wf_initiation.workflows._compat import GATHERED_WATCHES_PATCH, QUIET_WAITING_PATCH, RunCompat


def test_a_history_recorded_by_an_earlier_build_still_replays() -> None:
    # proves: INIT-7
    # Recorded on 30 Nov 2026 (12 updates, a signal, starts, watches, wfi.publish_lifecycle
    # activities): an activation running when its worker is upgraded must replay with the new code,
    # so a change to the commands the shell emits fails here before it reaches a deployment.
    history = WorkflowHistory.from_json("wfi-activation:recorded", HISTORIES.joinpath(
        "activation-2026-11-30.json").read_text())
    kinds = {e.activity_task_scheduled_event_attributes.activity_type.name for e in history.events if e.event_type == 10}
    assert "wfi.publish_lifecycle" in kinds, "the fixture must exercise lifecycle publishing"
    failure = asyncio.run(replay_failure(history))
    assert failure is None, failure


def test_a_schedule_history_recorded_before_wake_ahead_still_replays() -> None:
    # proves: INIT-7, SCHED-5
    # Recorded on 30 Nov 2026 by the build before `schedule_wake_ahead` (an every-second schedule,
    # paused and resumed; timers at the instants, no wait activities): the new behaviour is behind a
    # patch, so this run replays as it was recorded.
    history = WorkflowHistory.from_json("wfi-activation:recorded", HISTORIES.joinpath(
        "schedule-2026-11-30.json").read_text())
    assert sum(e.event_type == 18 for e in history.events) >= 5, "the fixture must hold fired schedule timers"
    failure = asyncio.run(replay_failure(history))
    assert failure is None, failure


@pytest.mark.parametrize(("fixture", "marker"), [
    # 400f7d1: handlers past a task's budget waited for the next task on 1 ms timers
    ("budget-timers-2026-12-01.json.gz", "timer"),
    # the delivery inbox (workflows/_inbox.py): the rest wait in arrival order; a no-op activity brings the next task
    ("budget-inbox-2026-12-01.json.gz", WAIT_ACTIVITY),
])
def test_a_history_past_the_per_task_delivery_budget_replays(fixture: str, marker: str) -> None:
    # proves: INIT-7, EXT-11
    # Recorded with tests/histories/record_budget.py (four bulk updates of 500 and 600 signals at
    # once, so tasks went past DELIVERIES_PER_TASK), once by each build: a run begun before the inbox
    # keeps its timers after an upgrade, a run begun with it keeps its activities.
    history = WorkflowHistory.from_json("wfi-activation:recorded-budget",
                                        gzip.decompress(HISTORIES.joinpath(fixture).read_bytes()).decode())
    if marker == "timer":
        assert any(e.HasField("timer_started_event_attributes") for e in history.events), "the fixture must hold its timers"
    else:
        assert any(e.activity_task_scheduled_event_attributes.activity_type.name == marker for e in history.events)
    assert sum(e.event_type == 26 for e in history.events) == 600, "the fixture must hold the signal burst"
    failure = asyncio.run(replay_failure(history))
    assert failure is None, failure


@pytest.mark.parametrize(("fixture", "updates"), [
    # before patch wfi-fewer-records: 2,000 newest carried as full records, continue-as-new past 4,000
    ("records-2026-12-06.json.gz", 9),
    # with it: 500 carried, continue-as-new past 2,500
    ("records-fewer-2026-12-06.json.gz", 6),
])
def test_a_run_that_retired_its_records_replays_with_the_bound_it_was_recorded_with(fixture: str, updates: int) -> None:
    # proves: INIT-7
    # Recorded with tests/histories/record_records.py (bulk updates of 500 suppressed deliveries, one
    # at a time, until the run continued as new to retire its released dedup entries), once by each
    # build: an earlier run keeps its bound after an upgrade, so it does not continue as new sooner.
    history = WorkflowHistory.from_json("wfi-activation:recorded-records",
                                        gzip.decompress(HISTORIES.joinpath(fixture).read_bytes()).decode())
    accepted = sum(e.HasField("workflow_execution_update_accepted_event_attributes") for e in history.events)
    assert accepted == 1 + updates, "the fixture: the activation and its bulk updates"
    assert history.events[-1].HasField("workflow_execution_continued_as_new_event_attributes"), "it ends in continue-as-new"
    failure = asyncio.run(replay_failure(history))
    assert failure is None, failure


@pytest.mark.parametrize(("fixture", "quiet"), [
    # before patch wfi-quiet-waiting: each signal behind a waiting one tried the oldest again
    ("waiting-2026-12-06.json.gz", False),
    # with it: they join the waiting ones without a try
    ("waiting-quiet-2026-12-06.json.gz", True),
])
def test_a_burst_behind_a_waiting_signal_replays_as_it_was_recorded(
    fixture: str, quiet: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: INIT-7, EXT-11
    # Recorded with tests/histories/record_waiting.py (700 signals taken in one task while the
    # held-bytes budget, lowered to 2,500 bytes as there, has no room), once by each build: a run
    # begun before the patch keeps trying the oldest per signal (so its tries bring more tasks).
    monkeypatch.setattr(_intake, "MAX_HELD_BYTES", 2_500)
    history = WorkflowHistory.from_json("wfi-activation:recorded-waiting",
                                        gzip.decompress(HISTORIES.joinpath(fixture).read_bytes()).decode())
    assert sum(e.event_type == 26 for e in history.events) == 700, "the fixture must hold the signal burst"
    marker = any(QUIET_WAITING_PATCH in str(e.marker_recorded_event_attributes.details) for e in history.events
                 if e.HasField("marker_recorded_event_attributes"))
    assert marker == quiet, "each build's history: the patch's marker only in the one recorded with it"
    failure = asyncio.run(replay_failure(history))
    assert failure is None, failure
    if not quiet:  # the fixture holds what differs: the earlier build's history fails with the patch forced on
        monkeypatch.setattr(RunCompat, "quiet_waiting", lambda self: True)
        assert "Nondeterminism" in str(asyncio.run(replay_failure(history)))


@pytest.mark.parametrize(("fixture", "gathered"), [
    # before patch wfi-gathered-watches: a watch activity per start
    ("watches-2026-12-07.json.gz", False),
    # with it: runs started while a first look is out waited for the next
    ("watches-gathered-2026-12-07.json.gz", True),
])
def test_runs_started_one_after_another_replay_with_the_watches_they_were_recorded_with(
    fixture: str, gathered: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: INIT-7, EXT-5
    # Recorded with tests/histories/record_watches.py (ten held runs, each delivered once the one
    # before runs, lifecycle events off), once by each build: a run begun before the patch keeps
    # watching each start's runs at once after an upgrade.
    history = WorkflowHistory.from_json("wfi-activation:recorded-watches",
                                        gzip.decompress(HISTORIES.joinpath(fixture).read_bytes()).decode())
    kinds = [e.activity_task_scheduled_event_attributes.activity_type.name for e in history.events if e.event_type == 10]
    assert kinds.count("wfi.start_runs") == 10, "the fixture must hold a start per run"
    assert (kinds.count("wfi.watch_runs") < 5) == gathered, kinds
    marker = any(GATHERED_WATCHES_PATCH in str(e.marker_recorded_event_attributes.details) for e in history.events
                 if e.HasField("marker_recorded_event_attributes"))
    assert marker == gathered, "each build's history: the patch's marker only in the one recorded with it"
    failure = asyncio.run(replay_failure(history))
    assert failure is None, failure
    if not gathered:  # the fixture holds what differs: the earlier build's history fails with the patch forced on
        monkeypatch.setattr(RunCompat, "gathers_watches", lambda self: True)
        assert "Nondeterminism" in str(asyncio.run(replay_failure(history)))
