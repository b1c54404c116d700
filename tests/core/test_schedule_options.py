"""The schedule options teams know from Temporal Schedules, in the pure engine (no server):
``jitter``, ``pause_on_failure`` with the notes of pause and resume, ``remaining_runs`` and the
``trigger`` operator action (deployment ``schedule:``, docs/deployment.md "Schedule options").

Each test drives a real activation spec like tests/core/test_schedule_engine.py does, and ends by
showing the activation still works: a normal occurrence is admitted and starts its run.
"""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from tests.support.activation import make_spec
from tests.support.engine import Driver, drive
from wf_initiation.cli.state import render_state
from wf_initiation.core import schedule as seq
from wf_initiation.core._diagnostics import DiagnosticError
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.engine import Engine, StartRun, decode_state, initial_state
from wf_initiation.core.engine._schedule import due_at, jitter_delay
from wf_initiation.core.engine._types import EngineState
from wf_initiation.wire import DeactivateRequest as Deactivate
from wf_initiation.wire import OperatorRequest
from wf_initiation.workflows.activation import encode_state

T0 = datetime(2026, 3, 1, tzinfo=UTC)
H = timedelta(hours=1)
MS = timedelta(milliseconds=1)


def spec_for(tmp_path: pathlib.Path, config: str = '{cron: "0 * * * *"}', *, extra: str = "", **settings: Any) -> ActivationSpec:
    """A one-entry schedule activation (entry ``schedule``); ``settings`` go to the deployment's workflow."""
    return make_spec(tmp_path, f"name: sched\non:\n  time.schedule: {config}\n{extra}", task_queue="tq", **settings)


def engine_for(spec: ActivationSpec, t0: datetime = T0) -> Driver:
    return drive(Engine(spec, initial_state(spec, t0)))


def starts(engine: Driver) -> list[StartRun]:
    return [c for c in engine.take_commands() if isinstance(c, StartRun)]


def sched(engine: Driver, name: str = "schedule") -> Any:
    return engine.state.schedules[name]


def continue_as_new(engine: Driver, spec: ActivationSpec) -> Driver:
    """What continue-as-new carries: the encoded state, decoded by the next run."""
    return drive(Engine(spec, decode_state(encode_state(engine.engine))))


def operate(engine: Driver, now: datetime, **fields: Any) -> tuple[bool, str]:
    return engine.operate(OperatorRequest(**fields), now)


def admits_its_next_occurrence(engine: Driver, *, entry: str = "schedule", after: datetime | None = None) -> StartRun:
    """The activation still works: its next occurrence is admitted when due and starts a run keyed by its
    instant. ``after``: a tick first (a resumed schedule finds its next occurrence at its next tick)."""
    if after is not None:
        engine.tick(after)
        engine.take_commands()
    due = engine.next_occurrence()
    assert due is not None, "the schedule has a next occurrence"
    instant = sched(engine, entry).next_instant
    engine.begin_task()
    engine.tick(due)
    (run,) = [r for r in starts(engine) if r.input.trigger.name == entry]
    assert run.run_key.endswith("/" + instant.strftime("%Y%m%dT%H%M%SZ"))
    assert seq.parse_instant(run.input.payload["scheduled_at"]) == instant
    return run


# ------------------------------------------------------------------------------- jitter


@settings(max_examples=200, deadline=None)
@given(
    seed=hs.text(min_size=1, max_size=40),
    instant=hs.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2199, 1, 1), timezones=hs.just(UTC)),
    bound_ms=hs.integers(min_value=0, max_value=10 * 24 * 3600 * 1000),
)
def test_the_jitter_delay_is_a_pure_function_under_its_bound_and_never_negative(seed: str, instant: datetime, bound_ms: int) -> None:
    # proves: SCHED-6
    bound = timedelta(milliseconds=bound_ms)
    delay = jitter_delay(seed, instant, bound)
    assert delay == jitter_delay(seed, instant, bound), "the same on every replay, restart and worker"
    assert timedelta(0) <= delay and (delay < bound or delay == bound == timedelta(0))
    assert delay % MS == timedelta(0), "whole milliseconds"


def test_jittered_delays_spread_over_the_bound_and_differ_by_binding() -> None:
    bound = timedelta(minutes=10)
    delays = [jitter_delay("sched@a\x1fschedule", T0 + k * H, bound) for k in range(500)]
    assert len(set(delays)) > 400 and min(delays) < bound / 10 and max(delays) > bound * 9 / 10
    others = [jitter_delay("sched@b\x1fschedule", T0 + k * H, bound) for k in range(500)]
    assert sum(a == b for a, b in zip(delays, others, strict=True)) < 5, "another binding, other delays"


@pytest.mark.parametrize(("config", "jitter", "gap"), [
    ('{cron: "0 * * * *"}', "10m", H),                          # jitter under the period
    ('{interval: 1m}', "1h", timedelta(minutes=1)),             # jitter over the period: bounded by the gap
    ('{cron: "30 2 * * *", timezone: America/New_York}', "30m", None),  # DST days: instants unchanged
])
def test_a_jittered_occurrence_is_admitted_at_its_own_delay_never_before_its_instant(
    tmp_path: pathlib.Path, config: str, jitter: str, gap: timedelta | None,
) -> None:
    # proves: SCHED-5, SCHED-6, SCHED-7, SCHED-12, SCHED-13
    plain, jittered = spec_for(tmp_path, config), spec_for(tmp_path, config, schedule={"jitter": jitter})
    assert plain.activation_id != jittered.activation_id, "a changed policy is a new binding"
    t0 = datetime(2026, 3, 6, tzinfo=UTC)  # the New York spring-forward day (8 Mar) falls within the days driven
    reference, engine = engine_for(plain, t0), engine_for(jittered, t0)
    instants = seq.next_occurrences(engine.core.parsed_schedule("schedule"), t0, 5)
    delays = []
    for instant in instants:
        due = engine.next_occurrence()
        assert sched(engine).next_instant == instant == reference.next_occurrence(), "the sequence is the one without jitter"
        assert instant <= due < instant + timedelta(minutes=int(jitter[:-1]) * (60 if jitter[-1] == "h" else 1))
        if gap is not None:
            assert due < instant + gap, "delayed less than the gap to the next occurrence: the order stays"
        engine.begin_task()
        engine.tick(due - MS)
        assert starts(engine) == [] and sched(engine).occurrences[-1:] != [instant], "never before its delay ends"
        engine.tick(due)
        (run,) = starts(engine)
        reference.tick(instant)
        (plain_run,) = starts(reference)
        payload = run.input.payload
        assert run.run_key.rsplit("/", 1)[1] == plain_run.run_key.rsplit("/", 1)[1], "identity: the intended instant"
        assert payload["scheduled_at"] == plain_run.input.payload["scheduled_at"]
        assert seq.parse_instant(payload["fired_at"]) == due, "fired_at is the admitted (jittered) instant"
        assert sched(engine).occurrences[-1].fired_at == due and sched(engine).occurrences[-1].disposition == "admitted"
        delays.append(due - instant)
    assert len(set(delays)) > 1, "each occurrence has a delay of its own"


def test_a_jittered_instant_is_the_same_after_a_restart_and_a_continue_as_new(tmp_path: pathlib.Path) -> None:
    # proves: SCHED-5, SCHED-6
    spec = spec_for(tmp_path, schedule={"jitter": "20m"})
    engine = engine_for(spec)
    first = engine.next_occurrence()
    assert first is not None and first != T0 + H
    assert engine_for(spec).next_occurrence() == first, "a restarted worker computes the same instant"
    carried = continue_as_new(engine, spec)
    assert carried.next_occurrence() == first
    carried.tick(first)
    (run,) = starts(carried)
    engine.tick(first)
    assert starts(engine) == [run], "both admit it once, at the same instant, with the same run"
    again = continue_as_new(carried, spec)
    again.tick(first + MS)
    assert starts(again) == [], "admitted once: the carried state knows it"
    admits_its_next_occurrence(again)


def test_woken_ahead_the_shell_admits_a_jittered_occurrence_at_its_delay_not_at_its_instant(tmp_path: pathlib.Path) -> None:
    # proves: SCHED-6, SCHED-12
    engine = engine_for(spec_for(tmp_path, schedule={"jitter": "10m"}))
    due = engine.next_occurrence()
    assert due is not None and due > T0 + H
    assert engine.next_wakeup(timedelta(milliseconds=200)) == due - timedelta(milliseconds=200), "woken ahead of the delay"
    engine.tick_schedules(T0 + H)  # the intended instant: not due yet
    assert starts(engine) == [] and sched(engine).occurrences == []
    engine.tick_schedules(due)  # what the woken-ahead shell does; it holds the task until then
    (run,) = starts(engine)
    assert seq.parse_instant(run.input.payload["fired_at"]) == due
    admits_its_next_occurrence(engine)


def test_lateness_counts_from_the_jittered_instant(tmp_path: pathlib.Path) -> None:
    # proves: SCHED-6, SCHED-8, SCHED-9
    spec = spec_for(tmp_path, schedule={"jitter": "30m"}, late_after="1m")
    engine = engine_for(spec)
    due = engine.next_occurrence()
    assert due is not None and due - (T0 + H) > timedelta(minutes=1), "this binding's first delay is past late_after"
    engine.tick(due + timedelta(seconds=59))
    (run,) = starts(engine)
    assert sched(engine).occurrences[-1].disposition == "admitted", "on time: within late_after of its admission instant"
    second = engine.next_occurrence()
    assert second is not None
    engine.tick(second + timedelta(minutes=2))
    assert starts(engine) == [] and sched(engine).occurrences[-1].disposition == "skipped_missed"
    assert [(r.first, r.count) for r in sched(engine).missed_ranges] == [(T0 + 2 * H, 1)]
    admits_its_next_occurrence(engine)


@pytest.mark.parametrize("policy", [{"policy": "skip"}, {"policy": "catch_up", "bound": 2}])
def test_missed_occurrences_of_a_jittered_schedule_follow_the_missed_policy_unchanged(tmp_path: pathlib.Path, policy: dict) -> None:
    # proves: SCHED-6, SCHED-8, SCHED-10
    spec = spec_for(tmp_path, schedule={"jitter": "5m"}, missed=policy, late_after="1m")
    engine = engine_for(spec)
    engine.tick(T0 + 4 * H + timedelta(minutes=30))  # 01:00, 02:00, 03:00, 04:00 all past their jitter and late_after
    runs = starts(engine)
    caught = [seq.parse_instant(r.input.payload["scheduled_at"]) for r in runs]
    assert caught == ([] if policy["policy"] == "skip" else [T0 + H, T0 + 2 * H])
    assert all(r.input.payload["fired_at"] == "2026-03-01T04:30:00+00:00" for r in runs), "caught up now, never early"
    st = sched(engine)
    ranged = [(r.first, r.last, r.count) for r in [*st.missed_ranges, *st.overflow]]
    assert ranged == ([(T0 + H, T0 + 4 * H, 4)] if policy["policy"] == "skip" else [(T0 + 3 * H, T0 + 4 * H, 2)])
    admits_its_next_occurrence(engine)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=hs.lists(hs.integers(min_value=0, max_value=3 * 3600), min_size=1, max_size=10), finish=hs.booleans())
def test_every_occurrence_of_a_jittered_schedule_is_disposed_once_never_before_its_delay(
    tmp_path_factory: pytest.TempPathFactory, steps: list[int], finish: bool,
) -> None:
    # proves: SCHED-5, SCHED-6, SCHED-12
    spec = spec_for(tmp_path_factory.mktemp("jitter"), '{cron: "*/20 * * * *", timezone: Europe/Berlin}',
                    schedule={"jitter": "15m"}, missed={"policy": "catch_up", "bound": 3, "overflow": "skip_overflow"},
                    late_after="10m")
    engine = engine_for(spec)
    now, runs = T0, []
    for step in steps:
        now += timedelta(seconds=step)
        engine.begin_task()
        engine.tick(now)
        for r in starts(engine):
            instant = seq.parse_instant(r.input.payload["scheduled_at"])
            assert seq.parse_instant(r.input.payload["fired_at"]) == now >= due_at(engine.core, "schedule", instant) >= instant
            runs.append(r)
            if finish:
                engine.run_started(r.run_key, "rid", now)
                engine.run_finished(r.run_key, "completed", now)
    st = sched(engine)
    parsed = engine.core.parsed_schedule("schedule")
    started = [seq.parse_instant(r.input.payload["scheduled_at"]) for r in runs]
    ranged = [t for rng in [*st.missed_ranges, *st.overflow]
              for t in seq.occurrences_between(parsed, rng.first - timedelta(microseconds=1), rng.last, rng.count)]
    disposed = seq.occurrences_between(parsed, T0, st.last_instant, 10_000) if st.last_instant else []
    assert len(set(r.run_key for r in runs)) == len(runs)
    assert sorted(started + ranged) == disposed, "each instant disposed is a run or inside exactly one recorded range"
    assert st.next_instant is not None and due_at(engine.core, "schedule", st.next_instant) > now, "the next one is not due yet"


# ------------------------------------------------------------------------------- pause_on_failure and notes


@pytest.mark.parametrize(("status", "pauses"), [
    ("failed", True), ("timed_out", True), ("completed", False), ("cancelled", False), ("terminated", False),
])
def test_a_failed_or_timed_out_run_pauses_its_schedule_with_a_note_naming_the_run(
    tmp_path: pathlib.Path, status: str, pauses: bool,
) -> None:
    spec = spec_for(tmp_path, schedule={"pause_on_failure": True})
    engine = engine_for(spec)
    engine.tick(T0 + H)
    (run,) = starts(engine)
    engine.run_started(run.run_key, "rid", T0 + H)
    engine.run_finished(run.run_key, status, T0 + H + timedelta(minutes=5))
    st = sched(engine)
    assert st.paused is pauses and engine.status() == ("paused" if pauses else "active")
    if not pauses:
        assert st.note is None and st.failed_run is None
        admits_its_next_occurrence(engine)
        return
    assert st.failed_run == run.run_key and st.paused_at == T0 + H + timedelta(minutes=5)
    assert run.run_key in st.note and status.replace("_", " ") in st.note and "wfi operate resume" in st.note
    assert engine.next_occurrence() is None, "a paused schedule admits nothing"
    assert engine.state.operator_log[-1].action == "pause_on_failure" and run.run_key in engine.state.operator_log[-1].detail
    summary = engine.summary()["schedules"]["schedule"]
    assert (summary["paused"], summary["failed_run"], summary["note"]) == (True, run.run_key, st.note)
    assert run.run_key in engine.markdown() and "paused" in render_state(engine.summary(), None)
    engine.tick(T0 + 2 * H)
    assert starts(engine) == []
    resumed_at = T0 + 2 * H + timedelta(minutes=10)
    ok, message = operate(engine, resumed_at, action="resume", entry="schedule", note="fixed the warehouse", action_id="r1")
    assert ok and message == "resumed schedule (note: fixed the warehouse)"
    assert (st.paused, st.failed_run, st.note, st.resumed_at) == (False, None, "fixed the warehouse", resumed_at)
    assert "resumed 2026-03-01 02:10:00 UTC: fixed the warehouse" in engine.markdown()
    assert "    resumed at 2026-03-01T02:10:00+00:00: fixed the warehouse" in render_state(engine.summary(), None)
    engine.tick(resumed_at)
    assert starts(engine) == [] and sched(engine).counts.get("skipped_missed") == 1, "02:00 fell while paused: missed"
    admits_its_next_occurrence(engine)


def test_without_pause_on_failure_a_failed_run_pauses_nothing(tmp_path: pathlib.Path) -> None:
    engine = engine_for(spec_for(tmp_path))
    engine.tick(T0 + H)
    (run,) = starts(engine)
    engine.run_finished(run.run_key, "failed", T0 + H)
    assert not sched(engine).paused and sched(engine).note is None
    admits_its_next_occurrence(engine)


def test_a_failure_keeps_an_operators_pause_and_its_note(tmp_path: pathlib.Path) -> None:
    engine = engine_for(spec_for(tmp_path, schedule={"pause_on_failure": True}))
    engine.tick(T0 + H)
    (run,) = starts(engine)
    assert operate(engine, T0 + H, action="pause", note="maintenance until 03:00")[0]
    engine.run_finished(run.run_key, "failed", T0 + H + timedelta(minutes=1))
    st = sched(engine)
    assert (st.paused, st.note, st.failed_run, st.paused_at) == (True, "maintenance until 03:00", None, T0 + H)
    assert operate(engine, T0 + H + timedelta(minutes=2), action="resume")[0]
    admits_its_next_occurrence(engine, after=T0 + H + timedelta(minutes=2))


def test_pause_and_resume_notes_are_recorded_and_shown_for_schedules_and_polls(tmp_path: pathlib.Path) -> None:
    (tmp_path / "s.csv").write_text("id\n")
    spec = make_spec(tmp_path, 'name: both\non:\n  - time.schedule: {cron: "0 * * * *"}\n    as: tick\n'
                     '  - sheet.row_added: {sheet: s}\n    as: row\n', task_queue="tq",
                     connections={"sheets": {"connector": "sheet", "sheets": {"s": str(tmp_path / "s.csv")}}})
    engine = engine_for(spec)
    ok, message = operate(engine, T0, action="pause", note="supplier outage, ticket OPS-12", action_id="p1")
    assert ok and message == "paused tick, row (note: supplier outage, ticket OPS-12)"
    assert sched(engine, "tick").note == engine.state.polls["row"].note == "supplier outage, ticket OPS-12"
    assert engine.state.operator_log[-1].detail == message
    page, text = engine.markdown(), render_state(engine.summary(), None)
    assert "**paused** since 2026-03-01 00:00:00 UTC: supplier outage, ticket OPS-12" in page
    assert "- paused: `tick` (supplier outage, ticket OPS-12), `row` (supplier outage, ticket OPS-12)" in page
    assert "schedule tick: next 2026-03-01T01:00:00+00:00 (paused at 2026-03-01T00:00:00+00:00: supplier outage, ticket OPS-12)" in text
    assert "poll row: no cursor yet (reads from the start) (paused: supplier outage, ticket OPS-12)" in text
    assert operate(engine, T0 + timedelta(minutes=5), action="resume", entry="tick", action_id="r1") == (True, "resumed tick")
    assert sched(engine, "tick").note is None and engine.state.polls["row"].paused
    admits_its_next_occurrence(engine, entry="tick", after=T0 + timedelta(minutes=5))


# ------------------------------------------------------------------------------- remaining_runs


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_after_remaining_runs_the_schedule_is_inactive_and_says_why(tmp_path: pathlib.Path, limit: int) -> None:
    # proves: SCHED-9
    spec = spec_for(tmp_path, schedule={"remaining_runs": limit})
    engine = engine_for(spec)
    for k in range(1, limit + 1):
        assert engine.summary()["schedules"]["schedule"]["remaining_runs"] == limit - k + 1
        engine.tick(T0 + k * H)
        assert len(starts(engine)) == 1
    st = sched(engine)
    assert (st.active, st.next_instant, st.runs_counted, st.run_limit) == (False, None, limit, limit)
    assert st.inactive_reason is not None and f"its {limit} occurrence(s) were admitted" in st.inactive_reason
    assert engine.next_wakeup() is None and engine.status() == "inactive"
    engine.tick(T0 + 10 * H)
    assert starts(engine) == [] and st.counts == {"admitted": limit}, "nothing more, and nothing counted as missed"
    assert "remaining runs: 0 of" in engine.markdown() and "(remaining_runs)" in render_state(engine.summary(), None)
    ok, message = operate(engine, T0 + 10 * H, action="resume")
    assert ok and "stays inactive: remaining_runs" in message
    assert engine.operate(OperatorRequest(action="trigger", action_id="after-the-last"), T0 + 10 * H)[0]
    (triggered,) = starts(engine)
    assert triggered.run_key.endswith("/schedule/trigger-after-the-last"), "an operator can still start a run"


def test_only_occurrences_the_schedule_admits_by_itself_count(tmp_path: pathlib.Path) -> None:
    # proves: SCHED-14
    guard = "{{ schedule.scheduled_at[11:13] != '02' }}"
    spec = spec_for(tmp_path, extra=f'  when: "{guard}"\n', schedule={"remaining_runs": 2})
    engine = engine_for(spec)
    assert operate(engine, T0, action="trigger", action_id="t-1")[0]
    assert operate(engine, T0 + 5 * H, action="backfill", entry="schedule", start="2026-02-28T20:00:00+00:00",
                   end="2026-02-28T22:00:00+00:00")[0]
    assert len(starts(engine)) == 4 and sched(engine).runs_counted == 0, "a trigger and a backfill do not count"
    engine.tick(T0 + H)
    engine.tick(T0 + 2 * H)  # suppressed by `when`: no run, not counted
    assert len(starts(engine)) == 1 and sched(engine).runs_counted == 1 and sched(engine).active
    admits_its_next_occurrence(engine)
    assert not sched(engine).active and sched(engine).counts == {"admitted": 2, "suppressed": 1, "backfilled": 3}


def test_catch_up_stops_at_remaining_runs_and_holds_nothing_past_it(tmp_path: pathlib.Path) -> None:
    # proves: SCHED-8, SCHED-9
    spec = spec_for(tmp_path, schedule={"remaining_runs": 2}, missed={"policy": "catch_up", "bound": 5}, late_after="1m")
    engine = engine_for(spec)
    engine.tick(T0 + 4 * H + timedelta(minutes=30))
    caught = [seq.parse_instant(r.input.payload["scheduled_at"]) for r in starts(engine)]
    st = sched(engine)
    assert caught == [T0 + H, T0 + 2 * H] and st.overflow == [] and not st.active
    assert st.last_instant == T0 + 2 * H and st.counts == {"caught_up": 2}


@pytest.mark.parametrize(("new_limit", "counted", "active"), [(2, 2, False), (5, 0, True), (None, 0, True)])
def test_re_activation_keeps_the_count_of_an_unchanged_limit_and_a_new_limit_counts_afresh(
    tmp_path: pathlib.Path, new_limit: int | None, counted: int, active: bool,
) -> None:
    # proves: INIT-4, INIT-5
    old = spec_for(tmp_path, schedule={"remaining_runs": 2})
    engine = engine_for(old)
    for k in (1, 2):
        engine.tick(T0 + k * H)
    assert len(starts(engine)) == 2 and not sched(engine).active
    new = old if new_limit == 2 else spec_for(tmp_path, schedule={"remaining_runs": new_limit} if new_limit else {})
    carried = continue_as_new(engine, old)
    if new is not old:
        carried.rebind(new, T0 + 2 * H + timedelta(minutes=1))
    st = sched(carried)
    assert (st.runs_counted, st.active, st.run_limit) == (counted, active, new_limit)
    assert st.counts == {"admitted": 2}, "the records stay"
    if active:
        admits_its_next_occurrence(carried)
    else:
        carried.tick(T0 + 5 * H)
        assert starts(carried) == [] and "remaining_runs" in (st.inactive_reason or "")


def test_a_re_activation_after_deactivation_does_not_give_an_exhausted_schedule_more_runs(tmp_path: pathlib.Path) -> None:
    spec = spec_for(tmp_path, schedule={"remaining_runs": 1})
    engine = engine_for(spec)
    engine.tick(T0 + H)
    (run,) = starts(engine)
    engine.run_finished(run.run_key, "completed", T0 + H)
    engine.deactivate(Deactivate(queued="cancel"), T0 + H)
    engine.finish_deactivation(T0 + H)
    again = continue_as_new(engine, spec)
    assert again.resume(T0 + 3 * H)
    assert not sched(again).active and "remaining_runs" in (sched(again).inactive_reason or "")
    again.tick(T0 + 5 * H)
    assert starts(again) == []


# ------------------------------------------------------------------------------- trigger


def test_trigger_starts_one_run_now_with_its_own_identity_and_moves_no_occurrence(tmp_path: pathlib.Path) -> None:
    # proves: SCHED-5, SCHED-7, SCHED-13
    spec = spec_for(tmp_path, '{cron: "0 * * * *", timezone: Europe/Berlin}', schedule={"jitter": "10m"})
    engine = engine_for(spec)
    before = sched(engine).model_copy(deep=True)
    at = T0 + timedelta(minutes=17)
    ok, message = operate(engine, at, action="trigger", action_id="rerun-1", note="the report was empty")
    run_key = f"{spec.activation_id}/schedule/trigger-rerun-1"
    assert ok and message == f"triggered schedule: run {run_key} (accepted) (note: the report was empty)"
    (run,) = starts(engine)
    payload = run.input.payload
    assert run.run_key == run_key and payload["triggered_by"] == "rerun-1"
    assert payload["scheduled_at"] == payload["fired_at"] == "2026-03-01T01:17:00+01:00", "now, not an instant of the sequence"
    st = sched(engine)
    assert (st.last_instant, st.next_instant, st.occurrences, st.counts) == (
        before.last_instant, before.next_instant, before.occurrences, before.counts), "no occurrence consumed or moved"
    assert [(t.action_id, t.run_key, t.disposition) for t in st.triggers] == [("rerun-1", run_key, "accepted")]
    assert engine.state.operator_log[-1].action == "trigger" and engine.state.operator_log[-1].action_id == "rerun-1"
    assert "triggered 2026-03-01 00:17:00 UTC → **accepted**" in engine.markdown()
    assert f"triggered at 2026-03-01T00:17:00Z by rerun-1: accepted, run {run_key}" in render_state(engine.summary(), None)
    assert operate(engine, at, action="trigger", action_id="rerun-1", note="the report was empty") == (True, "already applied")
    carried = continue_as_new(engine, spec)
    assert operate(carried, at + H, action="trigger", action_id="rerun-1", note="the report was empty") == (True, "already applied")
    assert starts(carried) == [], "once-only per action id, across continue-as-new"
    assert operate(carried, at + H, action="trigger", action_id="rerun-1")[0] is False, "the same id for another action"
    assert operate(carried, at + H, action="trigger", action_id="rerun-2")[0]
    assert [r.run_key.rsplit("/", 1)[1] for r in starts(carried)] == ["trigger-rerun-2"]
    admits_its_next_occurrence(carried)


def test_a_trigger_whose_action_id_was_forgotten_is_still_answered_by_its_dedup_entry(tmp_path: pathlib.Path) -> None:
    # proves: SCHED-5
    engine = engine_for(spec_for(tmp_path))
    assert operate(engine, T0, action="trigger", action_id="t1")[0]
    (run,) = starts(engine)
    del engine.state.seen_action_ids[:]  # past the last 1,000 action ids remembered
    engine.state.action_digests.clear()
    ok, message = operate(engine, T0 + H / 2, action="trigger", action_id="t1")
    assert ok and message == f"already triggered by action 't1': run {run.run_key} (accepted)"
    assert starts(engine) == [], "its run key is its dedup id: no second run"
    admits_its_next_occurrence(engine)


def test_a_triggered_run_passes_the_overlap_policy_and_starts_while_the_schedule_is_paused(tmp_path: pathlib.Path) -> None:
    # proves: SCHED-14
    engine = engine_for(spec_for(tmp_path, overlap="skip"))
    assert operate(engine, T0, action="pause", action_id="p")[0]
    assert operate(engine, T0, action="trigger", action_id="t1")[1].endswith("(accepted)")
    (run,) = starts(engine)
    ok, message = operate(engine, T0, action="trigger", action_id="t2")
    assert ok and message == "triggered schedule: no run (skipped)", "a run is in flight: overlap skip"
    assert [t.disposition for t in sched(engine).triggers] == ["accepted", "skipped"]
    engine.run_started(run.run_key, "rid", T0)
    engine.run_finished(run.run_key, "completed", T0 + timedelta(minutes=1))
    assert operate(engine, T0 + timedelta(minutes=2), action="resume", action_id="r")[0]
    admits_its_next_occurrence(engine, after=T0 + timedelta(minutes=2))


def test_a_failed_triggered_run_pauses_a_schedule_with_pause_on_failure(tmp_path: pathlib.Path) -> None:
    engine = engine_for(spec_for(tmp_path, schedule={"pause_on_failure": True}))
    assert operate(engine, T0, action="trigger", action_id="t1")[0]
    (run,) = starts(engine)
    engine.run_finished(run.run_key, "timed_out", T0 + timedelta(minutes=3))
    assert sched(engine).paused and sched(engine).failed_run == run.run_key
    assert operate(engine, T0 + timedelta(minutes=4), action="resume")[0]
    admits_its_next_occurrence(engine, after=T0 + timedelta(minutes=4))


@pytest.mark.parametrize(("fields", "refusal"), [
    ({"action": "trigger", "entry": "nope"}, "no schedule entry 'nope'; entries: schedule"),
    ({"action": "trigger"}, "trigger needs an action_id"),
    ({"action": "trigger", "action_id": "t", "note": "\ud800"}, "note is not valid Unicode text"),
    ({"action": "pause", "note": "n" * 1025}, "note has 1025 characters; the limit is 1024"),
    ({"action": "resume", "note": "n" * 1025}, "note has 1025 characters; the limit is 1024"),
])
def test_an_action_that_cannot_be_applied_is_refused_and_changes_nothing(
    tmp_path: pathlib.Path, fields: dict[str, Any], refusal: str,
) -> None:
    engine = engine_for(spec_for(tmp_path))
    before = engine.full_state()
    ok, message = engine.operate(OperatorRequest(**fields), T0)
    assert not ok and refusal in message, message
    assert starts(engine) == [] and engine.full_state() == before
    admits_its_next_occurrence(engine)


def test_trigger_names_the_entry_when_there_are_several_and_is_refused_once_deactivated(tmp_path: pathlib.Path) -> None:
    spec = make_spec(tmp_path, 'name: two\non:\n  - time.schedule: {cron: "0 * * * *"}\n    as: hourly\n'
                     '  - time.schedule: {cron: "0 0 * * *"}\n    as: daily\n  - http.request: {}\n    as: hook\n', task_queue="tq")
    engine = engine_for(spec)
    ok, message = operate(engine, T0, action="trigger", action_id="t1")
    assert not ok and message == "trigger needs --entry, one of the schedule entries: hourly, daily"
    assert not operate(engine, T0, action="trigger", entry="hook", action_id="t1")[0], "not a schedule entry"
    assert operate(engine, T0, action="trigger", entry="daily", action_id="t1")[0]
    assert [r.run_key.split("/", 1)[1] for r in starts(engine)] == ["daily/trigger-t1"]
    admits_its_next_occurrence(engine, entry="hourly")
    engine.deactivate(Deactivate(queued="cancel"), T0 + 2 * H)
    ok, message = operate(engine, T0 + 2 * H, action="trigger", entry="daily", action_id="t2")
    assert not ok and "deactivated" in message and starts(engine) == []


# ------------------------------------------------------------------------------- the deployment and old states


@pytest.mark.parametrize(("settings", "fragment"), [
    ({"jitter": "-1s"}, "schedule.jitter"),
    ({"jitter": "soon"}, "schedule.jitter"),
    ({"jitter": "3651d"}, "schedule.jitter: the duration is longer than"),
    ({"remaining_runs": 0}, "schedule.remaining_runs"),
    ({"remaining_runs": 10**10}, "is more than 1,000,000,000, the limit"),
    ({"pause_on_failure": "sometimes"}, "schedule.pause_on_failure"),
    ({"paused": True}, "schedule.paused: Extra inputs are not permitted"),
    ({"entries": {"nightly": {"jitter": "1m"}}}, "schedule.entries names 'nightly', which is not a schedule entry"),
])
def test_bad_schedule_options_are_refused_naming_the_key(tmp_path: pathlib.Path, settings: dict[str, Any], fragment: str) -> None:
    with pytest.raises(DiagnosticError) as refused:
        spec_for(tmp_path, schedule=settings)
    assert fragment in str(refused.value), str(refused.value)
    admits_its_next_occurrence(engine_for(spec_for(tmp_path)))


def test_options_apply_per_entry_and_their_defaults_keep_earlier_activation_ids(tmp_path: pathlib.Path) -> None:
    # proves: INIT-4
    workfile = ('{cron: "0 * * * *"}\n    as: hourly\n  - time.schedule: {cron: "30 * * * *"}\n    as: half\n')
    two = 'name: two\non:\n  - time.schedule: ' + workfile
    default = make_spec(tmp_path, two, task_queue="tq")
    assert make_spec(tmp_path, two, task_queue="tq", schedule={"jitter": "0s"}).activation_id == default.activation_id
    spec = make_spec(tmp_path, two, task_queue="tq",
                     schedule={"remaining_runs": 1, "entries": {"half": {"pause_on_failure": True}}})
    assert spec.activation_id != default.activation_id
    engine = engine_for(spec)
    assert (sched(engine, "hourly").run_limit, sched(engine, "half").run_limit) == (1, None), "an entry's own options replace"
    engine.tick(T0 + timedelta(minutes=30))
    (half,) = starts(engine)
    engine.run_finished(half.run_key, "failed", T0 + timedelta(minutes=31))
    assert sched(engine, "half").paused and not sched(engine, "hourly").paused
    admits_its_next_occurrence(engine, entry="hourly")
    assert not sched(engine, "hourly").active, "its one run"


def test_a_state_carried_by_the_build_before_the_options_decodes_with_their_defaults(tmp_path: pathlib.Path) -> None:
    spec = spec_for(tmp_path)
    engine = engine_for(spec)
    dumped = engine.state.model_dump(mode="json")
    for key in ("note", "resumed_at", "failed_run", "run_limit", "runs_counted", "triggers"):
        del dumped["schedules"]["schedule"][key]
    del dumped["polls"]  # none here; the poll's note is optional alike
    old = EngineState.model_validate(dumped)
    st = old.schedules["schedule"]
    assert (st.note, st.failed_run, st.run_limit, st.runs_counted, st.triggers) == (None, None, None, 0, [])
    admits_its_next_occurrence(drive(Engine(spec, old)))
