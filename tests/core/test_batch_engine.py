"""Batch closure in the pure engine: property tests over random interleavings, plus the fixed cases
(pending admission, `into` per event, faults, restart and schedule order) that the properties imply.

The engine is driven directly (``deliver``/``tick``/``take_commands``), with time as an argument:
no Temporal server is involved.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.activation import make_spec
from tests.support.engine import drive
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.engine import Disposition, Engine, EngineState, StartRun, decode_state, initial_state
from wf_initiation.workflows.activation import encode_state

T0 = datetime(2030, 1, 1, tzinfo=UTC)

BATCHED = """
name: batched
on:
  http.request: {{}}
  batch: {batch}
"""

SIZES_AND_WAITS = {
    "size_and_wait": "{size: 3, max_wait: 10s, partition_by: \"{{ request.body.p }}\"}",
    "size_only": "{size: 4, partition_by: \"{{ request.body.p }}\"}",
    "wait_only": "{max_wait: 7s, partition_by: \"{{ request.body.p }}\"}",
    "unpartitioned": "{size: 2, max_wait: 5s}",
}


@pytest.fixture(scope="module")
def specs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ActivationSpec]:
    base = tmp_path_factory.mktemp("batch-specs")
    return {name: make_spec(base, BATCHED.format(batch=batch), task_queue="unused")
            for name, batch in SIZES_AND_WAITS.items()}


def request(ident: str, partition: str | None = "a", **body: Any) -> dict[str, Any]:
    return {"delivery_id": ident, "method": "POST", "body": {"p": partition, **body} if partition is not None else body}


@dataclass
class Driver:
    """Feeds an engine and records every batch run it starts, with the instant it started."""

    engine: Engine
    now: datetime = T0
    accepted: dict[str, datetime] = field(default_factory=dict)  # delivery id -> acceptance instant
    order: list[str] = field(default_factory=list)  # delivery ids in acceptance order
    runs: list[tuple[datetime, StartRun]] = field(default_factory=list)

    @classmethod
    def for_spec(cls, spec: ActivationSpec) -> Driver:
        return cls(drive(Engine(spec, initial_state(spec, T0))))

    def deliver(self, ident: str, partition: str | None) -> Disposition:
        result = self.engine.deliver(None, request(ident, partition), self.now)
        if result.disposition == Disposition.BATCHED:
            self.accepted[ident] = self.now
            self.order.append(ident)
        self._collect()
        return result.disposition

    def advance(self, seconds: float) -> None:
        # The shell wakes at next_wakeup() at the earliest; hypothesis also wakes it early and late.
        self.now += timedelta(seconds=seconds)
        self.engine.tick(self.now)
        self._collect()

    def _collect(self) -> None:
        for command in self.engine.take_commands():
            if isinstance(command, StartRun):
                self.runs.append((self.now, command))


steps = st.lists(
    st.one_of(
        st.tuples(st.just("event"), st.sampled_from(["a", "b", "c"])),
        st.tuples(st.just("advance"), st.floats(min_value=0, max_value=12, allow_nan=False)),
        st.tuples(st.just("wake"), st.just(0.0)),
    ),
    max_size=60,
)


def run_steps(spec: ActivationSpec, plan: list[tuple[str, Any]]) -> Driver:
    driver = Driver.for_spec(spec)
    for i, (kind, arg) in enumerate(plan):
        if kind == "event":
            assert driver.deliver(f"e{i}", arg) == Disposition.BATCHED
        elif kind == "advance":
            driver.advance(arg)
        else:  # wake exactly at the engine's own next wake-up, as the shell does
            wake = driver.engine.next_wakeup()
            if wake is not None and wake > driver.now:
                driver.advance((wake - driver.now).total_seconds())
    return driver


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(SIZES_AND_WAITS)), plan=steps)
def test_batches_never_exceed_size_never_close_early_and_keep_every_event_once_in_order(
    specs: dict[str, ActivationSpec], name: str, plan: list[tuple[str, Any]]
) -> None:
    # proves: BATCH-1, BATCH-2, BATCH-3, BATCH-4, TRIG-15, TRIG-16, EXT-11
    spec = specs[name]
    batch = spec.entries[0].batch
    assert batch is not None
    driver = run_steps(spec, plan)
    seen: list[str] = []
    for started, command in driver.runs:
        ids = command.input.initiation.delivery_ids
        payloads = command.input.payload
        assert command.input.trigger.batched and len(payloads) == len(ids) >= 1
        assert batch.size is None or len(ids) <= batch.size, "BATCH-2: a batch never holds more than size"
        full = batch.size is not None and len(ids) == batch.size
        first = driver.accepted[ids[0]]
        assert full or (batch.max_wait_seconds is not None
                        and started - first >= timedelta(seconds=batch.max_wait_seconds)), "BATCH-3: closed early"
        assert [p["delivery_id"] for p in payloads] == ids
        if batch.partition_by:
            assert len({p["body"]["p"] for p in payloads}) == 1, "TRIG-15: one partition per batch"
        assert ids == sorted(ids, key=driver.order.index), "EXT-11: acceptance order within the batch"
        seen.extend(ids)
    still_open = [e.delivery_id for b in driver.engine.state.batches.values() for e in b.events]
    assert sorted(seen + still_open) == sorted(driver.order), "every accepted event lands in exactly one batch"
    assert len(seen) == len(set(seen))
    for b in driver.engine.state.batches.values():  # BATCH-1: a due batch does not stay open past a tick
        assert b.deadline is None or b.deadline > driver.now
        assert batch.size is None or len(b.events) < batch.size


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=steps, cut=st.integers(min_value=0, max_value=60))
def test_a_restart_through_the_carried_state_closes_the_same_batches_at_the_same_instants(
    specs: dict[str, ActivationSpec], plan: list[tuple[str, Any]], cut: int
) -> None:
    # proves: POLL-13, BATCH-3, INIT-7
    spec = specs["size_and_wait"]
    straight = run_steps(spec, plan)
    resumed = run_steps(spec, plan[:cut])
    carried = EngineState.model_validate_json(resumed.engine.state.model_dump_json())  # what continue-as-new carries
    resumed.engine = drive(Engine(spec, carried))
    for i, (kind, arg) in enumerate(plan[cut:], start=cut):
        if kind == "event":
            resumed.deliver(f"e{i}", arg)
        elif kind == "advance":
            resumed.advance(arg)
        else:
            wake = resumed.engine.next_wakeup()
            if wake is not None and wake > resumed.now:
                resumed.advance((wake - resumed.now).total_seconds())
    shape = lambda d: [(t, c.run_key, c.input.initiation.delivery_ids) for t, c in d.runs]  # noqa: E731
    assert shape(resumed) == shape(straight)


def test_a_batch_closes_at_its_deadline_and_not_a_microsecond_before(specs: dict[str, ActivationSpec]) -> None:
    # proves: BATCH-3, BATCH-1
    driver = Driver.for_spec(specs["size_and_wait"])
    driver.deliver("x1", "a")
    driver.advance(4)
    driver.deliver("x2", "a")
    assert driver.engine.next_wakeup() == T0 + timedelta(seconds=10), "deadline counts from the first acceptance"
    assert driver.engine.next_wakeup(timedelta(seconds=1)) == T0 + timedelta(seconds=10), "schedule_wake_ahead never anticipates a batch"
    driver.advance(6 - 1e-6)
    assert driver.runs == []
    driver.advance(1e-6)
    [(started, run)] = driver.runs
    assert started == T0 + timedelta(seconds=10)
    assert run.input.initiation.delivery_ids == ["x1", "x2"]
    assert run.input.initiation.accepted_at == T0


def test_the_size_threshold_closes_a_batch_at_once(specs: dict[str, ActivationSpec]) -> None:
    # proves: BATCH-1, BATCH-2, BATCH-4
    driver = Driver.for_spec(specs["size_and_wait"])
    for ident in ("s1", "s2", "s3", "s4"):
        driver.deliver(ident, "a")
    [(started, run)] = driver.runs
    assert started == T0 and run.input.initiation.delivery_ids == ["s1", "s2", "s3"]
    assert [b.events[0].delivery_id for b in driver.engine.state.batches.values()] == ["s4"]


SKIP_BATCHED = """
name: skipper
on:
  - http.request: {{path: /a}}
    as: hook
    batch: {{size: 2}}
  - mail.received: {{inbox: x@y.z}}
    as: message
"""


def test_a_closed_batch_is_never_skipped_by_overlap_and_waits_until_admitted_or_dropped(tmp_path: pathlib.Path) -> None:
    # proves: BATCH-5, EXT-6
    spec = make_spec(tmp_path, SKIP_BATCHED.format(), task_queue="unused", overlap="skip")
    engine = drive(Engine(spec, initial_state(spec, T0)))
    mail = {"message_id": "m1", "from": "a@b.c", "recipient": "x@y.z", "subject": "s"}
    busy = engine.deliver("message", mail, T0)
    assert busy.disposition == Disposition.ACCEPTED
    engine.run_started(busy.run_key, "r1", T0)
    for ident in ("h1", "h2", "h3", "h4"):
        assert engine.deliver("hook", request(ident), T0).disposition == Disposition.BATCHED
    assert [c.run_key for c in engine.take_commands() if isinstance(c, StartRun)] == [busy.run_key]
    pending = engine.summary()["pending_batches"]
    assert [p["events"] for p in pending] == [2, 2], "overlap: skip never discards a closed batch"
    skipped = engine.deliver("message", {**mail, "message_id": "m2"}, T0)
    assert skipped.disposition == Disposition.SKIPPED, "an unbatched event is still skipped while busy"

    dropped = engine.operate(_req("drop_pending", pending[1]["run_key"], "d1"), T0)
    assert dropped == (True, "dropped")
    assert engine.state.events["hook\x1fh3"].disposition == Disposition.DROPPED
    engine.run_finished(busy.run_key, "completed", T0 + timedelta(seconds=1))
    [start] = [c for c in engine.take_commands() if isinstance(c, StartRun)]
    assert start.run_key == pending[0]["run_key"] and start.input.initiation.delivery_ids == ["h1", "h2"]
    assert engine.summary()["pending_batches"] == []
    assert [a.action for a in engine.state.operator_log] == ["drop_pending"]


def test_a_pending_batch_is_on_the_page_after_continue_as_new_and_after_a_rebind_without_batches(tmp_path: pathlib.Path) -> None:
    # proves: BATCH-5
    # The page skips the scan for pending batches until a batch was closed into a run: the carried
    # state's runs count, and so does a batch an entry without `batch` any more still closes.
    spec = make_spec(tmp_path, SKIP_BATCHED.format(), task_queue="unused", overlap="skip")
    engine = drive(Engine(spec, initial_state(spec, T0)))
    engine.deliver("message", {"message_id": "m1", "from": "a@b.c", "recipient": "x@y.z", "subject": "s"}, T0)
    assert "pending batch" not in engine.markdown() and engine.summary()["pending_batches"] == []
    engine.deliver("hook", request("h1"), T0)
    engine.deliver("hook", request("h2"), T0)
    [pending] = engine.summary()["pending_batches"]
    assert pending["run_key"] in engine.markdown()
    carried = drive(Engine(spec, decode_state(encode_state(engine.engine))))
    assert [p["run_key"] for p in carried.summary()["pending_batches"]] == [pending["run_key"]]
    assert pending["run_key"] in carried.markdown()

    # The batched entry removed: its open batch is closed into a run at the rebind (INIT-5), which
    # waits for the busy run like any closed batch, under a spec that has no batched entry at all.
    mail_only = make_spec(tmp_path, "name: skipper\non:\n  mail.received: {inbox: x@y.z}\n  as: message\n",
                          task_queue="unused", overlap="skip")
    fresh = drive(Engine(spec, initial_state(spec, T0)))
    fresh.deliver("message", {"message_id": "m1", "from": "a@b.c", "recipient": "x@y.z", "subject": "s"}, T0)
    fresh.deliver("hook", request("h1"), T0)
    moved = drive(Engine(spec, decode_state(encode_state(fresh.engine))))
    moved.rebind(mail_only, T0)
    [orphan] = moved.summary()["pending_batches"]
    assert orphan["events"] == 1 and orphan["run_key"] in moved.markdown()


@dataclass
class _Req:
    action: str
    run_key: str | None
    action_id: str | None
    entry: str | None = None
    cursor: str | None = None
    note: str | None = None
    choice: str | None = None
    count: int | None = None
    range_id: str | None = None
    start: str | None = None
    end: str | None = None


def _req(action: str, run_key: str, action_id: str) -> _Req:
    return _Req(action=action, run_key=run_key, action_id=action_id)


def test_an_operator_admits_a_pending_batch_past_the_overlap_policy(tmp_path: pathlib.Path) -> None:
    # proves: BATCH-5
    spec = make_spec(tmp_path, SKIP_BATCHED.format(), task_queue="unused", overlap="skip")
    engine = drive(Engine(spec, initial_state(spec, T0)))
    busy = engine.deliver("message", {"message_id": "m1", "from": "a@b.c", "recipient": "x@y.z", "subject": "s"}, T0)
    engine.deliver("hook", request("h1"), T0)
    engine.deliver("hook", request("h2"), T0)
    engine.take_commands()
    [pending] = engine.summary()["pending_batches"]
    assert engine.operate(_req("admit_pending", pending["run_key"], "a1"), T0) == (True, "admitted")
    assert [c.run_key for c in engine.take_commands() if isinstance(c, StartRun)] == [pending["run_key"]]
    assert engine.state.runs[busy.run_key].status == "starting", "the other run is untouched"
    again = engine.operate(_req("admit_pending", pending["run_key"], "a1"), T0)
    assert again == (True, "already applied") and engine.take_commands() == []


PROJECTED = """
name: projected
on:
  - http.request: {{path: /a}}
    as: hook
    batch: {{size: 3, max_wait: 1m}}
    into:
      post: {{title: "{{{{ hook.body.title | upper }}}}", n: "{{{{ hook.body.n }}}}"}}
  - mail.received: {{inbox: x@y.z}}
    as: message
    into:
      post: {{title: "{{{{ message.subject }}}}", n: 0}}
"""


def test_into_is_taken_per_event_at_acceptance_and_a_fault_keeps_the_event_out_of_the_batch(tmp_path: pathlib.Path) -> None:
    # proves: BATCH-6, BATCH-7, TRIG-16, TRIG-19, TRIG-18
    spec = make_spec(tmp_path, PROJECTED.format(), task_queue="unused")
    engine = drive(Engine(spec, initial_state(spec, T0)))
    assert engine.deliver("hook", request("p1", title="one", n=1), T0).disposition == Disposition.BATCHED
    fault = engine.deliver("hook", request("p2", n=2), T0)  # `title` missing: the projection faults
    assert fault.disposition == Disposition.PROJECTION_FAULT and fault.run_key is None
    resent = engine.deliver("hook", request("p2", n=2), T0)
    assert (resent.disposition, resent.retained) == (Disposition.DUPLICATE, Disposition.PROJECTION_FAULT)
    assert engine.state.events["hook\x1fp2"].released_at == T0, "retained from now for the retention period"
    engine.deliver("hook", request("p3", title="three", n=3), T0 + timedelta(seconds=1))
    engine.deliver("hook", request("p4", title="four", n=4), T0 + timedelta(seconds=2))
    [start] = [c for c in engine.take_commands() if isinstance(c, StartRun)]
    assert start.input.initiation.delivery_ids == ["p1", "p3", "p4"]
    assert start.input.into == {"post": [{"title": "ONE", "n": 1}, {"title": "THREE", "n": 3}, {"title": "FOUR", "n": 4}]}
    assert start.input.bindings["message"] is None and start.input.trigger.name == "hook"
    assert engine.summary()["error_counts"] == {"projection_fault": 1}


SCHEDULED = """
name: ticker
on:
  time.schedule: {{cron: "*/5 * * * *", timezone: UTC}}
  batch: {{size: 3}}
"""


def test_scheduled_occurrences_enter_a_batch_in_increasing_instant_order(tmp_path: pathlib.Path) -> None:
    # proves: SCHED-15, BATCH-4
    spec = make_spec(tmp_path, SCHEDULED.format(), task_queue="unused")
    engine = drive(Engine(spec, initial_state(spec, T0)))
    starts: list[StartRun] = []
    now = T0
    for _ in range(40):
        wake = engine.next_wakeup()
        assert wake is not None
        now = max(now, wake)
        engine.tick(now)
        starts += [c for c in engine.take_commands() if isinstance(c, StartRun)]
        if len(starts) >= 2:
            break
    assert len(starts) == 2
    instants = [p["scheduled_at"] for s in starts for p in s.input.payload]
    assert instants == sorted(instants) and len(set(instants)) == 6
    assert all(len(s.input.payload) == 3 for s in starts)


def test_the_summary_lists_open_batches_with_their_deadline(specs: dict[str, ActivationSpec]) -> None:
    # proves: POLL-13
    driver = Driver.for_spec(specs["size_and_wait"])
    driver.deliver("o1", "a")
    [listed] = driver.engine.summary()["batches"]
    assert (listed["events"], listed["partition"], listed["deadline"]) == (1, '"a"', (T0 + timedelta(seconds=10)).isoformat())
    state = EngineState.model_validate_json(driver.engine.state.model_dump_json())
    assert drive(Engine(specs["size_and_wait"], state)).next_wakeup() == T0 + timedelta(seconds=10)
