"""The engine's machine: every source run over the pipeline, as one object (no Temporal import).

State in, event in, new state and commands out; time is always an argument (``now``). Below it:
the ledger (``_ledger``), runs (``_runs``), the acceptance pipeline (``_pipeline``), and the
sources that feed it (``_schedule`` + ``_jobs``, ``_poll``, ``_batch`` deadlines,
``_subscriptions``); above it: the operator views (``summary``) and the facade (``_facade.Engine``),
which turns each call into a Decision. See docs/architecture.md.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ..activation import ActivationSpec
from . import _batch, _deactivate, _growth, _jobs, _lanes, _poll, _schedule, _split, _subscriptions, operator
from ._pipeline import Pipeline
from ._types import CURRENT, TERMINAL, Compat, EngineState, RunPoll


class Machine(Pipeline):
    """The pipeline, its runs and ledger, plus the time-driven work of every source: the one object
    the facade (``Engine``) drives."""

    def tick(self, now: datetime) -> None:
        """Everything time-driven: dedup expiry, the runs the throttle lets start (before anything
        admitted now), batch deadlines, due occurrences, admission jobs."""
        self.expire(now)
        if self.state.throttle.lines or self.state.throttle.starts:
            self.release_throttled(now)
        _batch.close_due(self, now)
        _schedule.schedule_tick(self, now)
        _jobs.run_jobs(self, now)
        _subscriptions.expire(self, now)
        _growth.tick(self, now)

    def tick_schedules(self, instant: datetime) -> None:
        """Admit the schedule occurrences due at ``instant`` (at most the next one), decided ahead of
        it: the shell holds whatever follows until the instant (SCHED-6)."""
        _schedule.schedule_tick(self, instant)

    def polls_due(self, now: datetime) -> list[RunPoll]:
        return _poll.polls_due(self, now)

    def next_wakeup(self, wake_ahead: timedelta = timedelta(0)) -> datetime | None:
        """When the shell must next look at the clock: the earliest deadline, and each schedule
        instant ``wake_ahead`` early (the shell then waits for the instant itself, see
        :meth:`next_occurrence`). Other deadlines are never anticipated: max_wait MUST NOT close a
        batch early (BATCH-3), and an expiry or poll early would be early; nor is a throttle's next
        start, which would find its window still full."""
        candidates = [self.next_expiry(), _batch.next_deadline(self), _poll.next_poll_wakeup(self),
                      _subscriptions.next_expiry(self), _jobs.next_wakeup(self), self.throttle_wakeup(),
                      _growth.next_wakeup(self)]
        occurrence = self.next_occurrence()
        candidates.append(occurrence - wake_ahead if occurrence is not None else None)
        present = [c for c in candidates if c is not None]
        return min(present) if present else None

    def next_occurrence(self) -> datetime | None:
        """When the earliest next occurrence of an active, unpaused schedule entry is due: its intended
        instant, plus its jitter where the entry has one (``_schedule.due_at``)."""
        instants = [_schedule.due_at(self, name, st.next_instant) for name, st in self.state.schedules.items()
                    if st.active and not st.paused and st.next_instant is not None]
        return min(instants) if instants else None

    def run_finished(self, run_key: str, status: str, now: datetime, *, published: bool = False) -> None:
        """A run reached a terminal outcome (``Runs.run_finished``); a failed run of a schedule entry with
        ``pause_on_failure`` then pauses its schedule, recorded in the operator log."""
        run = self.state.runs.get(run_key)
        ending = run is not None and run.status not in TERMINAL
        super().run_finished(run_key, status, now, published=published)
        if ending and run is not None:
            note = _schedule.run_failed(self, run, status, now)
            if note is not None:
                operator.record(self, "pause_on_failure", f"paused {run.entry}: {note}", None, now)

    def rebind(self, spec: ActivationSpec, now: datetime) -> None:
        """Take over with a new activation; what was accepted stays as accepted (INIT-4, INIT-5)."""
        old = self.spec
        self.state.previous_activations.append(old.activation_id)
        self.state.activation_id = spec.activation_id
        _batch.close_orphans(self, {e.name for e in spec.entries}, now)
        self.rebound(spec)
        _split.adopt(self)  # a split begins with the new binding (a parent records where it stood)
        _growth.rebound(self)  # a growth ends with the binding on its shard count
        sync_sources(self, now, previous=old)
        if self.state.throttle.lines or self.state.throttle.starts:
            self.release_throttled(now)  # another window (or none): its waiting runs are tried at once
        _lanes.hand_over(self)  # a split's parent: its moved queue keys (core.sharding, lanes)
        if spec.shard == 0 and spec.shards > old.shards:  # a split: the new shards offer events to copies too
            _subscriptions.copy_to_new_shards(self, old.shards)

    def reactivate(self, spec: ActivationSpec, now: datetime) -> bool:
        """This run was started with ``spec`` and a deactivated activation's state: activate it again
        (True), rebinding when the binding changed (INIT-4, INIT-5). See ``_deactivate``."""
        d = _deactivate.on_start(self)
        if d is None:
            return False
        if spec.activation_id != d.spec.activation_id:
            self.rebind(spec, now)  # a changed binding: a new activation id, everything kept
        _deactivate.restart(self, d, now)
        return True


def initial_state(spec: ActivationSpec, now: datetime, *, compat: Compat = CURRENT) -> EngineState:
    """The state of a new activation: a schedule and a poll state per entry, nothing accepted."""
    state = EngineState(activation_id=spec.activation_id)
    engine = Machine(spec, state)
    _split.adopt(engine)  # a new shard of a split: its part in it
    state.lanes_awaited = _lanes.awaited_parent(engine)
    if compat.legacy_evaluation:
        engine.use_legacy_evaluation()
    sync_sources(engine, now, previous=None)
    return state


def sync_sources(engine: Machine, now: datetime, previous: ActivationSpec | None) -> None:
    """Schedule and poll state per entry: kept across rebinding when the entry keeps its connector."""
    state, spec = engine.state, engine.spec
    old_entries = {e.name: e for e in previous.entries} if previous else {}
    for name in list(state.schedules):
        if spec.entry(name) is None or spec.entry(name).kind != "schedule":  # type: ignore[union-attr]
            del state.schedules[name]
    for name in list(state.polls):
        keep = spec.entry(name)
        if keep is None or keep.kind != "poll" or old_entries.get(name, keep).connector != keep.connector:
            del state.polls[name]
    for entry in spec.entries:
        if entry.kind == "schedule":
            current = state.schedules.get(entry.name)
            fresh = _schedule.new_schedule_state(entry, spec, now, engine.parsed_schedule(entry.name))
            if current is not None:
                _schedule.carry_over(fresh, current)
                _schedule.refresh_next(fresh, engine.parsed_schedule(entry.name))
            state.schedules[entry.name] = fresh
        elif entry.kind == "poll" and entry.name not in state.polls:
            state.polls[entry.name] = _poll.new_poll_state(entry, spec, now)

