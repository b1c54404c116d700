"""The throttle (deployment ``throttle: {runs, per, key}``) in the pure engine: the sliding window's
arithmetic, then runs past the rate waiting in order and starting as the window allows, per key, with
``queue_by``, batches, the overlap policy and the concurrency cap, across continue-as-new, through
re-activation, operator actions and deactivation; the deployment's bounds. No server: the test shell
below ticks the engine at each instant it asks for (``next_wakeup``), as the activation workflow does."""

from __future__ import annotations

import itertools
import json
import pathlib
import zlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.activation import make_spec
from tests.support.engine import Driver, drive
from tests.support.hostile import hook
from wf_initiation.core._diagnostics import DiagnosticError
from wf_initiation.core.deployment import Throttle, parse_deployment
from wf_initiation.core.engine import Disposition, Engine, StartRun, _codec, _throttle, decode_state, initial_state
from wf_initiation.core.engine._types import EngineState, RunRecord, ThrottleState
from wf_initiation.core.sharding import activation_wide
from wf_initiation.wire import AdmitPending, DeactivateRequest, DropPending

T0 = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
HOOK = 'name: {name}\non:\n  http.request: {{}}\n  as: hook\n'
KEYED = 'name: {name}\non:\n  http.request: {{}}\n  as: hook\n  queue_by: "{{{{ hook.body.q }}}}"\n'
BATCHED = 'name: {name}\non:\n  http.request: {{}}\n  as: hook\n  batch: {{size: 2, max_wait: 10s}}\n'


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def policy(runs: int, per: timedelta, key: str | None = None) -> Throttle:
    return Throttle(runs=runs, per=per, key=key)


def counted(state: ThrottleState) -> ThrottleState:
    """``state``, once its counts are checked against what it holds and its keys' order (by newest start)."""
    assert state.marks == sum(len(m) for m in state.starts.values())
    assert state.key_chars == sum(len(k) for k in state.starts)
    newest = [m[-1][0] for m in state.starts.values()]
    assert newest == sorted(newest), "keys in the order of their newest start"
    return state


# ---------------------------------------------------------------------------- the window (pure)
def test_a_run_may_start_once_fewer_than_runs_started_in_the_sliding_window() -> None:
    state, rule = ThrottleState(), policy(3, MINUTE)
    for s in (0, 10, 20):
        assert _throttle.room(state, "", at(s), rule)
        _throttle.started(state, "", at(s), rule)
    assert not _throttle.room(state, "", at(59.999), rule), "three started within the minute before"
    assert _throttle.next_start(state, "", rule) == at(60), "a minute after the oldest of the three"
    assert _throttle.room(state, "", at(60), rule), "the start at 0 left the window (t - per, t]"
    _throttle.started(state, "", at(60), rule)
    assert _throttle.next_start(state, "", rule) == at(70)


def test_starts_at_one_instant_share_a_mark_and_only_the_last_runs_starts_are_kept() -> None:
    state, rule = ThrottleState(), policy(2, MINUTE)
    for _ in range(5):  # an operator's admit_pending may start past the rate: the window keeps the last two
        _throttle.started(state, "", at(0), rule)
    assert state.starts[""] == [(at(0), 2)]
    _throttle.started(state, "", at(1), rule)
    assert state.starts[""] == [(at(0), 1), (at(1), 1)]
    assert _throttle.next_start(state, "", rule) == at(60)


def test_past_the_mark_bound_a_key_s_oldest_marks_merge_into_the_later_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_throttle, "MAX_THROTTLE_MARKS", 3)
    state, rule = ThrottleState(), policy(10, MINUTE)
    for s in (0, 1, 2, 3):
        _throttle.started(state, "", at(s), rule)
    assert state.starts[""] == [(at(1), 2), (at(2), 1), (at(3), 1)], "counted later: stricter, never looser"
    assert counted(state).marks == 3
    for key, s in (("k1", 4), ("k2", 5)):  # new keys take their mark from the key with the most
        _throttle.started(state, key, at(s), rule)
    assert counted(state).marks == 3 and state.starts[""] == [(at(3), 4)]


def test_with_every_mark_a_key_of_its_own_a_new_key_waits_until_one_leaves_its_window(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_throttle, "MAX_THROTTLE_MARKS", 2)
    state, rule = ThrottleState(), policy(5, MINUTE, "k")
    _throttle.started(state, "a", at(0), rule)
    _throttle.started(state, "b", at(5), rule)
    assert not _throttle.room(state, "c", at(30), rule)
    assert _throttle.next_start(state, "c", rule) == at(60), "when key a's only start leaves its window"
    assert _throttle.room(state, "a", at(30), rule), "a tracked key still has its own window"
    waiting = RunRecord(run_key="r", entry="hook", accepted_at=T0, activation_id="a", throttle_key="c")
    assert "2 keys have started runs in their windows, the most it keeps" in _throttle.reason(state, rule, waiting)
    assert _throttle.room(state, "c", at(60), rule)
    assert "a" not in counted(state).starts, "a key whose starts all left its window is forgotten"


def test_a_long_key_is_kept_as_its_digest() -> None:
    short, long = json.dumps("customer-1"), json.dumps("x" * 500)
    assert _throttle.stored_key(short) == short
    assert _throttle.stored_key(long).startswith("#") and len(_throttle.stored_key(long)) == 33
    assert _throttle.stored_key(long) == _throttle.stored_key(long) != _throttle.stored_key(json.dumps("y" * 500))


# ---------------------------------------------------------------------------- the engine
class Shell:
    """Feeds the engine as the activation workflow does: deliveries at instants, and a tick at every
    instant ``next_wakeup`` names up to the next delivery. Every run started is recorded with its
    instant; a started run completes after ``run_time`` (None: when the test finishes it)."""

    def __init__(self, spec: Any, run_time: timedelta | None = timedelta(0)) -> None:
        self.engine: Driver = drive(Engine(spec, initial_state(spec, T0)))
        self.now, self.run_time = T0, run_time
        self.started: list[tuple[datetime, str]] = []
        self.ends: dict[str, datetime] = {}

    def deliver(self, when: datetime, ident: str, *, woken: bool = True, **body: Any) -> Any:
        """One delivery at ``when``; ``woken=False``: before the wake-ups due by then (the workflow runs a
        delivery's handler before its main loop when a timer fires in the same task)."""
        if woken:
            self.advance(when)
        self.now = max(self.now, when)
        result = self.engine.deliver("hook", hook(ident, **body), when)
        self._collect(when)
        return result

    def advance(self, until: datetime) -> None:
        """Run time forward to ``until``: run ends and the engine's wake-ups, in order."""
        for _ in range(10_000):  # a wake-up that changes nothing would loop: fail instead
            wake = self.engine.next_wakeup()
            end = min(self.ends.values(), default=None)
            due = min((t for t in (wake, end) if t is not None and t <= until), default=None)
            if due is None:
                break
            self.now = max(self.now, due)
            for key in [k for k, t in self.ends.items() if t <= self.now]:
                del self.ends[key]
                self.engine.run_finished(key, "completed", self.now)
            self.engine.tick(self.now)
            self._collect(self.now)
        else:
            raise AssertionError(f"the engine kept asking to be woken before {until}")
        self.now = max(self.now, until)

    def _collect(self, now: datetime) -> None:
        for command in self.engine.take_commands():
            if isinstance(command, StartRun):
                self.started.append((now, command.run_key))
                self.engine.run_started(command.run_key, "r", now)
                if self.run_time is not None:
                    self.ends[command.run_key] = now + self.run_time

    def order(self) -> list[str]:
        return [key.rsplit("/", 1)[1] for _, key in self.started]

    def instants(self) -> list[float]:
        return [(when - T0).total_seconds() for when, _ in self.started]


def spec_of(tmp_path: pathlib.Path, workfile: str = HOOK, **settings: Any) -> Any:
    return make_spec(tmp_path, workfile.format(name="throttled"), task_queue="tq", lifecycle_events=False, **settings)


def test_runs_past_the_rate_wait_in_acceptance_order_and_start_as_the_window_slides(tmp_path: pathlib.Path) -> None:
    # proves: EXT-11 (runs held by the throttle start in acceptance order), INIT-7 (nothing accepted is lost)
    shell = Shell(spec_of(tmp_path, throttle={"runs": 2, "per": "1m"}))
    answers = [shell.deliver(at(s), f"e{n}") for n, s in enumerate((0, 1, 2, 3, 4, 5))]
    assert [a.disposition for a in answers] == [Disposition.ACCEPTED] * 2 + [Disposition.QUEUED] * 4
    run = shell.engine.state.runs[answers[2].run_key]
    assert run.status == "pending" and run.waiting_for.startswith("throttle: at most 2 run(s) start per 1m")
    assert shell.engine.next_wakeup() == at(60), "the engine asks to be woken when the window has room"
    shell.advance(at(200))
    assert shell.order() == ["e0", "e1", "e2", "e3", "e4", "e5"], "acceptance order"
    assert shell.instants() == [0, 1, 60, 61, 120, 121], "each as soon as the sliding window allowed it"
    assert not shell.engine.state.runs and not shell.engine.state.throttle.lines, "nothing left waiting or dropped"
    assert shell.engine.state.counters["runs_completed"] == 6


def test_a_delivery_handled_before_the_wake_up_never_passes_the_runs_waiting(tmp_path: pathlib.Path) -> None:
    # proves: EXT-11
    shell = Shell(spec_of(tmp_path, throttle={"runs": 1, "per": "1m"}))
    shell.deliver(at(0), "e0")
    shell.deliver(at(1), "e1")
    late = shell.deliver(at(70), "e2", woken=False)  # the window has room since 60; e1 has not been woken yet
    assert late.disposition is Disposition.QUEUED, "e1 waits ahead of it"
    shell.advance(at(200))
    assert list(zip(shell.order(), shell.instants(), strict=True)) == [("e0", 0), ("e1", 70), ("e2", 130)]


def test_each_key_has_its_window_and_a_busy_key_holds_no_other(tmp_path: pathlib.Path) -> None:
    shell = Shell(spec_of(tmp_path, throttle={"runs": 1, "per": "1m", "key": "{{ hook.body.customer }}"}))
    for n, customer in enumerate(["a", "a", "b", "a", "b", "c"]):
        shell.deliver(at(n), f"{customer}{n}", customer=customer)
    shell.advance(at(300))
    assert list(zip(shell.order(), shell.instants(), strict=True)) == [
        ("a0", 0), ("b2", 2), ("c5", 5), ("a1", 60), ("b4", 62), ("a3", 120)]


def test_a_throttle_key_that_faults_is_a_key_fault_and_starts_no_run(tmp_path: pathlib.Path) -> None:
    # proves: TRIG-13 (a null key is a fault, handled like a fault in `when`), BATCH-7
    shell = Shell(spec_of(tmp_path, throttle={"runs": 1, "per": "1m", "key": "{{ hook.body.customer }}"}))
    for answer in (shell.deliver(at(0), "no-key"), shell.deliver(at(1), "null-key", customer=None)):
        assert answer.disposition is Disposition.KEY_FAULT and answer.run_key is None
    assert shell.engine.state.error_counts["key_fault"] == 2
    assert shell.deliver(at(2), "no-key").disposition is Disposition.DUPLICATE, "the delivery id is consumed"
    normal = shell.deliver(at(3), "fine", customer="a")
    assert normal.disposition is Disposition.ACCEPTED and shell.order() == ["fine"]


def test_a_key_in_a_multi_trigger_workfile_sees_the_firing_entry_s_binding(tmp_path: pathlib.Path) -> None:
    workfile = ('name: {name}\non:\n  - http.request: {{}}\n    as: hook\n'
                '  - mail.received: {{inbox: "x@y.z"}}\n    as: mail\n')
    spec = spec_of(tmp_path, workfile, throttle={"runs": 1, "per": "1m",
                                                 "key": "{{ hook.body.c if hook is defined else mail.from }}"})
    engine = drive(Engine(spec, initial_state(spec, T0)))
    assert engine.deliver("hook", hook("h1", c="z@y.z"), T0).disposition is Disposition.ACCEPTED
    mail = {"message_id": "m1", "from": "z@y.z", "recipient": "x@y.z", "subject": "s", "thread_id": "t"}
    assert engine.deliver("mail", mail, T0).disposition is Disposition.QUEUED, "the same key: one per minute"


def test_queue_by_order_holds_and_the_throttle_orders_the_runs_ready_to_start(tmp_path: pathlib.Path) -> None:
    # proves: TRIG-11 (one run at a time per key, in arrival order, under a throttle too), EXT-11
    shell = Shell(spec_of(tmp_path, KEYED, throttle={"runs": 2, "per": "1m"}), run_time=timedelta(seconds=30))
    for n, q in enumerate(["x", "x", "y", "z", "x"]):
        shell.deliver(at(n), f"{q}{n}", q=q)
    shell.advance(at(600))
    assert list(zip(shell.order(), shell.instants(), strict=True)) == [
        ("x0", 0), ("y2", 2),
        ("z3", 60),  # ready at 3, waits for the window
        ("x1", 62),  # ready when x0 ended (30), behind z3 in the throttle's line, then a window slot
        ("x4", 120)]  # ready when x1 ended (92), the window full until 120
    assert not shell.engine.state.queues and not shell.engine.state.throttle.lines


def test_a_closed_batch_waits_for_the_window_and_its_events_stay_batched(tmp_path: pathlib.Path) -> None:
    # proves: BATCH-5 (a closed batch that cannot yet be admitted stays pending until admission), BATCH-4
    shell = Shell(spec_of(tmp_path, BATCHED, throttle={"runs": 1, "per": "1m"}))
    answers = [shell.deliver(at(n), f"b{n}") for n in range(6)]
    assert {a.disposition for a in answers} == {Disposition.BATCHED}, "batched, whatever the throttle says"
    summary = shell.engine.summary()
    pending = summary["pending_batches"]
    assert [(p["events"], p["throttled"]) for p in pending] == [(2, True), (2, True)]
    assert "closed batch" not in shell.engine.markdown(), "a batch the throttle holds needs no operator"
    shell.advance(at(200))
    assert shell.instants() == [1, 61, 121], "one batch run a minute"
    firsts = [shell.engine.lookup(f"hook\x1fb{n}") for n in (0, 2, 4)]
    assert all(r is not None and r.disposition is Disposition.BATCHED for r in firsts)


def test_scheduled_occurrences_are_admitted_at_their_instants_and_their_runs_start_at_the_rate(
        tmp_path: pathlib.Path) -> None:
    # proves: SCHED-6 (admitted no earlier than its instant; the run may start later)
    spec = make_spec(tmp_path, "name: ticking\non:\n  time.schedule: {interval: 10s}\n", task_queue="tq",
                     lifecycle_events=False, throttle={"runs": 1, "per": "30s"})
    shell = Shell(spec)
    shell.advance(at(95))
    occurrences = shell.engine.state.schedules["schedule"].occurrences
    assert {o.disposition for o in occurrences} == {"admitted"} and len(occurrences) >= 9
    assert all(o.fired_at == o.utc for o in occurrences), "each admitted at its instant, the throttle notwithstanding"
    started = [when for when, _ in shell.started]
    assert [b - a for a, b in itertools.pairwise(started)] == [timedelta(seconds=30)] * (len(started) - 1)
    keys = [key for _, key in shell.started]
    assert keys == [o.run_key for o in occurrences[:len(keys)]], "in the order of their instants"
    assert shell.engine.summary()["throttle"]["waiting"] == len(occurrences) - len(keys)


def test_under_a_concurrency_cap_a_key_s_runs_start_in_acceptance_order(tmp_path: pathlib.Path) -> None:
    # proves: EXT-11
    spec = spec_of(tmp_path, throttle={"runs": 1, "per": "1m", "key": "{{ hook.body.k }}"}, max_concurrent_runs=1)
    shell = Shell(spec, run_time=timedelta(seconds=10))
    shell.deliver(at(0), "a0", k="a")  # starts; runs until 10
    shell.deliver(at(1), "a1", k="a")  # capped; when a0 ends, key a's window is full: it waits for that
    shell.deliver(at(2), "b2", k="b")  # capped; starts when a0 ends
    shell.deliver(at(3), "a3", k="a")  # capped; when a0 ends it joins key a's line behind a1, never before it
    shell.advance(at(1000))
    assert list(zip(shell.order(), shell.instants(), strict=True)) == [("a0", 0), ("b2", 10), ("a1", 60), ("a3", 120)]


def test_a_key_s_runs_the_cap_holds_join_its_line_when_one_of_them_waits_for_the_window(tmp_path: pathlib.Path) -> None:
    # proves: EXT-11
    spec = spec_of(tmp_path, throttle={"runs": 1, "per": "5s", "key": "{{ hook.body.k }}"}, max_concurrent_runs=2)
    shell = Shell(spec, run_time=timedelta(seconds=5))
    for n, (offset, k) in enumerate([(0, "a"), (0, "b"), (0, "a"), (0, "b"), (0, "a"), (1, "a"), (1, "b"), (1, "b"),
                                     (1, "a"), (10, "a")]):
        shell.deliver(at(offset), f"e{n}", k=k)
    shell.advance(at(200))
    of_a = [e for e in shell.order() if e in ("e0", "e2", "e4", "e5", "e8", "e9")]
    assert of_a == ["e0", "e2", "e4", "e5", "e8", "e9"], "e9, delivered when e5 waited for the window, after e8"


def test_under_buffer_one_a_run_the_throttle_holds_is_the_one_that_waits(tmp_path: pathlib.Path) -> None:
    # proves: EXT-13
    shell = Shell(spec_of(tmp_path, throttle={"runs": 1, "per": "1m"}, overlap="buffer_one"))
    answers = [shell.deliver(at(n), f"e{n}") for n in range(4)]
    assert [a.disposition for a in answers] == [Disposition.ACCEPTED, Disposition.QUEUED, Disposition.SKIPPED,
                                                Disposition.SKIPPED]
    shell.advance(at(120))
    assert shell.order() == ["e0", "e1"]


def test_waiting_runs_and_their_windows_are_carried_across_continue_as_new(tmp_path: pathlib.Path) -> None:
    # proves: INIT-7 (ordering state survives a restart)
    spec = spec_of(tmp_path, throttle={"runs": 2, "per": "1m", "key": "{{ hook.body.k }}"})
    shell = Shell(spec)
    for n in range(5):
        shell.deliver(at(n), f"e{n}", k="same")
    carried = decode_state(shell.engine.encode_state())
    assert carried.throttle == shell.engine.state.throttle
    again = Shell(spec)
    again.engine = drive(Engine(spec, carried))
    again.engine.resume(at(5))
    assert again.engine.next_wakeup() == at(60)
    again.advance(at(200))
    assert again.order() == ["e2", "e3", "e4"] and again.instants() == [60, 61, 120]


def test_a_state_carried_before_the_throttle_decodes_with_nothing_throttled() -> None:
    state = EngineState(activation_id="a@1", runs={"k": RunRecord(run_key="k", entry="e", accepted_at=T0,
                                                                   activation_id="a@1")})
    data = json.loads(state.model_dump_json())
    del data["throttle"]
    del data["runs"]["k"]["throttle_key"]
    body = zlib.compress(json.dumps(data).encode())
    blob = _codec._STATE_HEADER.pack(_codec._STATE_MAGIC, len(body)) + body
    decoded = decode_state(blob)
    assert decoded.throttle == ThrottleState() and decoded.runs["k"].throttle_key is None


def test_a_re_activation_without_the_throttle_starts_its_waiting_runs_at_once(tmp_path: pathlib.Path) -> None:
    shell = Shell(spec_of(tmp_path, throttle={"runs": 1, "per": "1h"}))
    for n in range(3):
        shell.deliver(at(n), f"e{n}")
    unthrottled = spec_of(tmp_path)
    shell.engine.rebind(unthrottled, at(10))
    shell._collect(at(10))
    assert shell.order() == ["e0", "e1", "e2"] and shell.instants() == [0, 10, 10]
    assert shell.engine.state.throttle == ThrottleState()


def test_a_re_activation_with_another_rate_keeps_the_starts_and_applies_the_new_window(tmp_path: pathlib.Path) -> None:
    shell = Shell(spec_of(tmp_path, throttle={"runs": 1, "per": "1h"}))
    for n in range(4):
        shell.deliver(at(n), f"e{n}")
    shell.engine.rebind(spec_of(tmp_path, throttle={"runs": 2, "per": "1m"}), at(10))
    shell._collect(at(10))
    shell.advance(at(200))
    assert list(zip(shell.order(), shell.instants(), strict=True)) == [("e0", 0), ("e1", 10), ("e2", 60), ("e3", 70)]


def test_an_operator_admits_a_throttled_run_now_and_it_counts_in_the_window(tmp_path: pathlib.Path) -> None:
    # proves: BATCH-5 (explicit operator disposition of a pending run)
    shell = Shell(spec_of(tmp_path, throttle={"runs": 1, "per": "1m"}))
    answers = [shell.deliver(at(n), f"e{n}") for n in range(4)]
    ok, _ = shell.engine.operate(AdmitPending(run_key=answers[2].run_key), at(10))
    shell._collect(at(10))
    ok_drop, _ = shell.engine.operate(DropPending(run_key=answers[1].run_key), at(11))
    assert ok and ok_drop
    assert shell.engine.lookup("hook\x1fe1").disposition is Disposition.DROPPED
    shell.advance(at(200))
    assert list(zip(shell.order(), shell.instants(), strict=True)) == [("e0", 0), ("e2", 10), ("e3", 70)]


def test_a_deactivation_drains_throttled_runs_at_the_rate_or_drops_them(tmp_path: pathlib.Path) -> None:
    for queued, expected in (("drain", ["e0", "e1", "e2"]), ("cancel", ["e0"])):
        shell = Shell(spec_of(tmp_path, throttle={"runs": 1, "per": "1m"}))
        for n in range(3):
            shell.deliver(at(n), f"e{n}")
        shell.engine.deactivate(DeactivateRequest(queued=queued, running="leave"), at(5))
        shell.advance(at(300))
        assert shell.order() == expected, queued
        assert not shell.engine.state.throttle.lines and shell.engine.deactivation_settled()


def test_the_summary_and_the_page_show_what_waits_and_when_the_next_may_start(tmp_path: pathlib.Path) -> None:
    shell = Shell(spec_of(tmp_path, throttle={"runs": 1, "per": "1m", "key": "{{ hook.body.k }}"}))
    for n, k in enumerate(["a", "a", "a", "b", "b"]):
        shell.deliver(at(n), f"e{n}", k=k)
    view = shell.engine.summary()["throttle"]
    assert {k: view[k] for k in ("runs", "per", "waiting", "keys_waiting", "next_start_at")} == {
        "runs": 1, "per": "1m", "waiting": 3, "keys_waiting": 2, "next_start_at": at(60).isoformat()}
    assert [(line["key"], line["waiting"]) for line in view["lines"]] == [('"a"', 2), ('"b"', 1)]
    page = shell.engine.markdown()
    assert "**throttle** 1 run(s) per 1m per key `{{ hook.body.k }}` · **3 waiting** (2 keys) · next start " \
           "2026-12-04 09:01:00 UTC" in page
    assert shell.engine.gauges()["wfi.runs.throttled"] == 3
    full = shell.engine.full_state()
    assert "throttle" not in full and full["summary"]["throttle"] == view, "its marks are not listed in the state"


def test_without_a_throttle_nothing_is_kept_for_one(tmp_path: pathlib.Path) -> None:
    shell = Shell(spec_of(tmp_path, max_concurrent_runs=1))
    for n in range(3):
        shell.deliver(at(n), f"e{n}")
    assert shell.engine.state.throttle == ThrottleState() and shell.engine.summary()["throttle"] is None
    assert all(r.throttle_key is None for r in shell.engine.state.runs.values())


# ---------------------------------------------------------------------------- a property
ARRIVALS = st.lists(st.tuples(st.integers(0, 400), st.sampled_from("abc"), st.sampled_from("xyz")),
                    min_size=1, max_size=25)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arrivals=ARRIVALS, runs=st.integers(1, 3), per=st.integers(5, 90), run_time=st.integers(0, 120),
       keyed=st.booleans(), queued=st.booleans(), cap=st.sampled_from([None, 1, 2]), woken=st.lists(st.booleans()))
def test_no_window_ever_holds_more_than_runs_starts_and_every_run_starts_in_order(
        tmp_path: pathlib.Path, arrivals: list[tuple[int, str, str]], runs: int, per: int, run_time: int,
        keyed: bool, queued: bool, cap: int | None, woken: list[bool]) -> None:
    # proves: EXT-11, TRIG-11, INIT-7
    throttle: dict[str, Any] = {"runs": runs, "per": f"{per}s", **({"key": "{{ hook.body.k }}"} if keyed else {})}
    spec = spec_of(tmp_path, KEYED if queued else HOOK, throttle=throttle,
                   **({"max_concurrent_runs": cap} if cap else {}))
    shell = Shell(spec, run_time=timedelta(seconds=run_time))
    accepted: dict[str, tuple[str, str]] = {}
    for n, (offset, k, q) in enumerate(sorted(arrivals, key=lambda a: a[0])):
        first = n >= len(woken) or woken[n]  # or the delivery is handled before the wake-ups due
        answer = shell.deliver(at(offset), f"e{n}", woken=first, k=k, q=q)
        assert answer.disposition in (Disposition.ACCEPTED, Disposition.QUEUED)
        accepted[f"e{n}"] = (k if keyed else "", q)
    shell.advance(at(100_000))
    assert sorted(shell.order()) == sorted(accepted), "every accepted run started, none twice"
    counted(shell.engine.state.throttle)
    window = timedelta(seconds=per)
    by_key: dict[str, list[datetime]] = {}
    for when, run_key in shell.started:
        by_key.setdefault(accepted[run_key.rsplit("/", 1)[1]][0], []).append(when)
    for key, instants in by_key.items():
        for i in range(len(instants) - runs):
            assert instants[i + runs] - instants[i] >= window, f"key {key!r}: {runs + 1} starts within {per}s"
    if queued:  # each queue key's runs in acceptance order (TRIG-11)
        for q in "xyz":
            mine = [e for e in shell.order() if accepted[e][1] == q]
            assert mine == sorted(mine, key=lambda e: int(e[1:])), f"queue {q}"
    else:  # each throttle key's runs in acceptance order, under a concurrency cap too
        for key in sorted({k for k, _ in accepted.values()}):
            mine = [e for e in shell.order() if accepted[e][0] == key]
            assert mine == sorted(mine, key=lambda e: int(e[1:])), f"throttle key {key!r}"


# ---------------------------------------------------------------------------- the deployment
@pytest.mark.parametrize(("throttle", "problem"), [
    ({"runs": 0, "per": "1m"}, "greater than or equal to 1"),
    ({"runs": 10_001, "per": "1m"}, "10,001 is more than 10,000"),
    ({"runs": 5, "per": "500ms"}, "shorter than 1s"),
    ({"runs": 5, "per": "3651d"}, "longer than"),
    ({"runs": 5}, "per"),
    ({"runs": 5, "per": "1m", "key": "{{ order.customer "}, "does not parse"),
    ({"runs": 5, "per": "1m", "key": "  "}, "an expression such as"),
    ({"runs": 5, "per": "1m", "burst": 3}, "Extra inputs are not permitted"),
])
def test_a_throttle_outside_its_bounds_is_refused_with_the_fix(throttle: dict[str, Any], problem: str) -> None:
    deployment = {"workflows": {"w": {"run": {"workflow_type": "T", "task_queue": "q"}, "throttle": throttle}}}
    with pytest.raises(DiagnosticError) as raised:
        parse_deployment(deployment)
    (diagnostic,) = raised.value.diagnostics
    assert diagnostic.code == "DEPLOY-INVALID" and "throttle" in diagnostic.message and problem in diagnostic.message


@pytest.mark.parametrize(("key", "problem"), [
    ("{{ message.customer }}", "references 'message', but it may reference only inputs and the bindings"),
    ("{{ inputs.region }}", "references inputs.region, which the Workfile's `inputs:` does not declare"),
])
def test_a_throttle_key_outside_the_workfile_s_bindings_is_refused(tmp_path: pathlib.Path, key: str, problem: str) -> None:
    with pytest.raises(DiagnosticError) as raised:
        spec_of(tmp_path, throttle={"runs": 1, "per": "1m", "key": key})
    assert [d.code for d in raised.value.diagnostics] == ["DEPLOY-THROTTLE-KEY"]
    assert problem in raised.value.diagnostics[0].message


def test_an_unchanged_deployment_keeps_its_activation_id_and_a_throttle_gives_a_new_one(tmp_path: pathlib.Path) -> None:
    # proves: INIT-4
    plain, again = spec_of(tmp_path), spec_of(tmp_path)
    throttled = spec_of(tmp_path, throttle={"runs": 1, "per": "1m"})
    assert plain.activation_id == again.activation_id != throttled.activation_id


def test_a_sharded_throttle_is_kept_on_shard_zero(tmp_path: pathlib.Path) -> None:
    spec = spec_of(tmp_path, KEYED, throttle={"runs": 1, "per": "1m", "key": "{{ hook.body.k }}"}, scale={"shards": 4})
    assert activation_wide(spec), "every run is admitted by shard 0, which keeps every window"
    shards = [drive(Engine(part, initial_state(part, T0))) for part in (spec.as_shard(k).shard_part() for k in range(4))]
    routed = [s.deliver("hook", hook("d-1", k="a", q="x"), T0) for s in shards[1:]]
    assert {(r.disposition, r.shard) for r in routed} == {(Disposition.ROUTED, 0)}
