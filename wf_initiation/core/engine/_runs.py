"""Layer 2 of the engine: runs (admission, overlap, queues, concurrency, throttle, outcomes).

Owns every run record from its admission to its terminal outcome: a run waits behind its
``queue_by`` key (TRIG-11), behind the overlap policy or the concurrency cap (decided by the pure
:mod:`._overlap`) and for room in the throttle's window (:mod:`._throttle`), starts (a ``StartRun``
command), and when terminal releases its events' retention (TRIG-14, EXT-5), its queue key and its
slot, which may start the next waiting run. The throttle's waiting runs start as time passes
(:meth:`Runs.release_throttled`, at each tick; the next instant one may is :meth:`Runs.throttle_wakeup`).
Calls down only: the ledger, the lifecycle events of ``_lifecycle``, the overlap and throttle rules.
"""

from __future__ import annotations

import copy
import hashlib
from collections import deque
from datetime import datetime

from ..activation import ActivationSpec
from ..deployment import Throttle
from ..limits import clip
from . import _kept, _lanes, _lifecycle, _overlap, _throttle
from ._ledger import Ledger
from ._types import (
    EVENT_RECORD,
    TERMINAL,
    ControlRun,
    Disposition,
    EngineState,
    KeptEvent,
    OperatorRefused,
    RunRecord,
    StartRun,
)

MAX_RECENT_RUNS = 100
IN_FLIGHT = frozenset({"starting", "running"})


class Runs(Ledger):
    """The ledger plus the runs it admitted."""

    def __init__(self, spec: ActivationSpec, state: EngineState):
        super().__init__(spec, state)
        self.recent_runs: deque[RunRecord] = deque(maxlen=MAX_RECENT_RUNS)
        self._in_flight: dict[str, RunRecord] = {k: r for k, r in state.runs.items() if r.status in IN_FLIGHT}
        self.starting = sum(r.status == "starting" for r in self._in_flight.values())  # the rest are running
        # Payload bytes of pending runs (see _intake.held_bytes), kept up to date by admission and start.
        self.pending_bytes = sum(r.input_bytes for r in state.runs.values() if r.status == "pending")
        self.batch_bytes = sum(b.bytes for b in state.batches.values())  # open batches' payloads (_batch)
        # Whether a closed batch's run may be pending (_batch.pending_batches scans for them on every
        # page of the UI, i.e. every turn of the loop): only _batch.close makes such runs.
        self.batch_runs_made = any(r.input is not None and r.input.trigger.batched for r in state.runs.values())

    def in_flight(self) -> list[RunRecord]:
        return list(self._in_flight.values())

    def endings_awaited(self) -> bool:
        """Whether something waits for a run's ending as soon as it comes: a pending run (behind its
        queue key, the overlap policy, the concurrency cap or a batch partition), a queue key's head,
        an overlap policy or concurrency cap a new event meets, a schedule (``pause_on_failure``,
        overlap), lifecycle events to publish, a deactivation, a split in progress. Otherwise an ending
        only updates the books (counters, dedup retention) and may be learned a few seconds later."""
        policies, state = self.spec.policies, self.state
        return (len(state.runs) > len(self._in_flight) or bool(state.queues) or policies.overlap != "allow"
                or policies.max_concurrent_runs is not None or bool(state.schedules) or policies.lifecycle_events
                or state.deactivation is not None or (state.split is not None and not state.split.drained))

    @property
    def running(self) -> int:
        """Runs confirmed started and not ended (the page and the summary count them on every task)."""
        return len(self._in_flight) - self.starting

    def overlap_skips(self) -> bool:
        """Whether the overlap policy disposes of a new event as ``skipped`` now (EXT-13). A run the
        throttle holds waits as much as one the policy holds (``buffer_one`` keeps one of either)."""
        policy, waiting = self.spec.policies.overlap, len(self.state.waiting)
        if policy == "buffer_one" and self.state.throttle.lines:
            waiting += _throttle.waiting(self.state.throttle)
        return _overlap.skips_on_arrival(policy, len(self.state.runs), waiting)

    def admit(self, run: RunRecord, now: datetime) -> Disposition:
        """Place a new run: behind its queue key, behind the overlap policy, or start it."""
        self.state.runs[run.run_key] = run
        self.pending_bytes += run.input_bytes
        if run.queue_key is not None:
            queue = self.state.queues.setdefault(run.queue_key, [])
            queue.append(run.run_key)
            if len(queue) > 1:
                run.waiting_for = "queue_by key held by an earlier run (TRIG-11)"
                return Disposition.QUEUED
            if _lanes.held(self, run.queue_key):
                run.waiting_for = "queue_by key held by earlier events on the shard it moved from in a split"
                return Disposition.QUEUED
        if run.lane is not None and _lanes.held(self, run.lane):  # a batch whose partition's earlier one is elsewhere
            run.waiting_for = "its batch partition's earlier batch, on the shard it moved from in a split"
            self.state.lanes_waiting.append(run.run_key)
            return Disposition.QUEUED
        return Disposition.ACCEPTED if self._try_start(run, now) else Disposition.QUEUED

    def _try_start(self, run: RunRecord, now: datetime) -> bool:
        """Start ``run`` unless runs of its throttle key wait ahead of it, the overlap policy or the
        concurrency cap holds it (see _overlap), or its throttle window has no room (see _throttle).

        A run the policy holds waits in ``waiting`` (a throttle line's head stays the head of its
        line meanwhile); one the window holds waits in its key's line, and when the window has room
        it is tried again, policy first (:meth:`release_throttled`)."""
        policies, waiting = self.spec.policies, self.state.waiting
        throttle = policies.throttle
        if throttle is not None and _throttle.behind(self.state.throttle, run):
            self._throttled(run, throttle)
            return False
        decided = _overlap.admit(policies.overlap, policies.max_concurrent_runs, run.run_key, self._in_flight.values(),
                                 waiting, waiting[0] if waiting else None)
        if decided.targets:
            self._control(decided, f"overlap {policies.overlap}: superseded by {run.run_key}")
        if not decided.start:
            if decided.enqueue:
                waiting.append(run.run_key)
            run.waiting_for = decided.reason
            return False
        if throttle is not None and not _throttle.room(self.state.throttle, _throttle.key_of(run), now, throttle):
            self._throttled(run, throttle)
            self._line_up_behind(run, throttle)
            return False
        if decided.dequeue:
            waiting.remove(run.run_key)
        self._start(run, now)
        return True

    def _throttled(self, run: RunRecord, throttle: Throttle) -> None:
        """``run`` waits in its throttle key's line (out of the overlap policy's list: it is tried
        again from the line, policy first)."""
        if run.run_key in self.state.waiting:
            self.state.waiting.remove(run.run_key)
        _throttle.wait(self.state.throttle, run)
        run.waiting_for = _throttle.reason(self.state.throttle, throttle, run)

    def _line_up_behind(self, run: RunRecord, throttle: Throttle) -> None:
        """The runs of ``run``'s key the policy holds (all after it: it passed the policy) join its
        line behind it, in order, so no later run of its key passes one of them. While a key has a
        line, the policy holds none of its runs but the line's head."""
        waiting, key = self.state.waiting, _throttle.key_of(run)
        for later in [k for k in waiting if _throttle.key_of(self.state.runs[k]) == key]:
            self._throttled(self.state.runs[later], throttle)

    def _control(self, decided: _overlap.Admission, reason: str) -> None:
        for key in decided.targets:
            self._in_flight[key].cancel_requested = True
            self.outbox.append(ControlRun(run_key=key, action=decided.control, reason=reason))  # type: ignore[arg-type]

    def _start(self, run: RunRecord, now: datetime) -> None:
        if run.status == "pending":
            self.pending_bytes -= run.input_bytes
        run.status = "starting"
        self._in_flight[run.run_key] = run
        self.starting += 1
        run.waiting_for = None
        throttle = self.spec.policies.throttle
        if throttle is not None:
            _throttle.leave(self.state.throttle, run)
            _throttle.started(self.state.throttle, _throttle.key_of(run), now, throttle)
        assert run.input is not None
        self.outbox.append(StartRun(run_key=run.run_key, input=run.input))
        self.count("runs_started")

    def pending_starts(self) -> list[StartRun]:
        """Runs admitted but not confirmed started: re-issue after continue-as-new (idempotent)."""
        return [StartRun(run_key=r.run_key, input=r.input) for r in self.state.runs.values()
                if r.status == "starting" and r.input is not None]

    # ------------------------------------------------------------------ outcomes
    def run_started(self, run_key: str, temporal_run_id: str | None, now: datetime, *, published: bool = False) -> None:
        run = self.state.runs.get(run_key)
        if run is None or run.status != "starting":
            return
        run.status = "running"
        self.starting -= 1
        run.started_at = now
        run.temporal_run_id = temporal_run_id
        _lifecycle.on_run_started(self, run, now, published=published)
        run.input = None  # the run has its input now; the state need not carry it

    def run_start_failed(self, run_key: str, error: str, now: datetime) -> None:
        """A run that cannot be started (its input is over the payload limit, or the start request
        cannot be decoded): a start fault on its events, never a block on the other runs. The run is
        terminal: its events' retention starts, its queue key and concurrency slot are released."""
        run = self.state.runs.get(run_key)
        if run is None or run.status != "starting":
            return
        message = clip(f"run {run_key} could not be started: {error}") or ""
        for key in run.event_keys:
            record = self.state.events.get(key)
            if record is not None:
                record.disposition, record.detail = Disposition.START_FAULT, message
        first = self.state.events.get(run.event_keys[0]) if run.event_keys else None
        self.record_error(now, "start_fault", message, run.entry, first.delivery_id if first else None)
        self.count("start_faults")
        if self.keeps_for_redrive and run.input is not None:
            self._keep_start_fault(run, first.delivery_id if first else None, message, now)
        self.run_finished(run_key, "start_failed", now)

    def _keep_start_fault(self, run: RunRecord, delivery_id: str | None, message: str, now: datetime) -> None:
        """Keep the run as admitted (its input included) so that an operator can start it again once
        the cause is fixed (``_redrive``); one whose input is over the bound is not kept (_kept)."""
        assert run.input is not None
        text = run.input.model_dump_json()
        records = [copy.copy(r) for key in run.event_keys if (r := self.state.events.get(key)) is not None]
        size = len(text) + sum(len(EVENT_RECORD.dump_json(r).decode()) for r in records)  # a batch's records count too
        _kept.keep(self.state, KeptEvent(
            number=_kept.next_number(self.state), kind="start_fault", entry=run.entry, delivery_id=delivery_id,
            digest=hashlib.sha256(text.encode()).hexdigest()[:16], size=size, at=now, reason=message,
            run=run.model_copy(deep=True), records=records))

    def run_finished(self, run_key: str, status: str, now: datetime, *, published: bool = False) -> None:
        """A run reached a terminal outcome: release its key, start the retention clock (TRIG-14, EXT-5)."""
        run = self.state.runs.get(run_key)
        if run is None or run.status in TERMINAL:
            return
        if run.status == "pending":
            self.pending_bytes -= run.input_bytes
        elif run.status == "starting":
            self.starting -= 1
        run.status = status  # type: ignore[assignment]
        self._in_flight.pop(run_key, None)
        run.ended_at = now
        run.input = None
        _lifecycle.on_run_finished(self, run, now, published=published)
        self.count(f"runs_{status}")
        for key in run.event_keys:
            self.release(key, now)
        del self.state.runs[run_key]
        self.recent_runs.append(run)
        if run_key in self.state.waiting:
            self.state.waiting.remove(run_key)
        if run_key in self.state.lanes_waiting:  # a held batch dropped by the operator
            self.state.lanes_waiting.remove(run_key)
        if self.state.throttle.lines:
            _throttle.leave(self.state.throttle, run)
        self._advance_queue(run, now)
        self._drain_waiting(now)
        if self.state.throttle.lines:  # a line's head dropped: the next may have room
            self.release_throttled(now)

    def _advance_queue(self, run: RunRecord, now: datetime) -> None:
        if run.queue_key is None:
            return
        queue = self.state.queues.get(run.queue_key, [])
        if run.run_key in queue:
            queue.remove(run.run_key)
        if not queue:
            self.state.queues.pop(run.queue_key, None)
            _lanes.lane_done(self, run.queue_key)
            return
        self._start_head(run.queue_key, now)

    def _start_head(self, queue_key: str, now: datetime) -> None:
        """Start the first run of a queue key when it waits for nothing but its turn."""
        queue = self.state.queues.get(queue_key)
        if not queue or _lanes.held(self, queue_key):
            return
        head = self.state.runs[queue[0]]
        if head.status == "pending" and head.run_key not in self.state.waiting:
            self._try_start(head, now)

    def lanes_noticed(self, notice: _lanes.LaneNotice, now: datetime) -> None:
        """A split's parent said which moved queue keys still run there (or no longer do): start the
        heads of the keys it releases."""
        for key in _lanes.noticed(self, notice, now):
            self._start_head(key, now)
        for run_key in list(self.state.lanes_waiting):  # batches, in the order they closed
            run = self.state.runs.get(run_key)
            if run is None or run.status != "pending":
                self.state.lanes_waiting.remove(run_key)
            elif run.lane is None or not _lanes.held(self, run.lane):
                self.state.lanes_waiting.remove(run_key)
                self._try_start(run, now)
        if self.state.throttle.lines:  # a line's head may have started: the next may have room
            self.release_throttled(now)

    def _drain_waiting(self, now: datetime) -> None:
        waiting = self.state.waiting
        while waiting:
            head = waiting[0]
            if not self._try_start(self.state.runs[head], now) and waiting and waiting[0] == head:
                return  # still held by the policy (a run the throttle holds left for its line: go on)

    # ------------------------------------------------------------------ the throttle (_throttle)
    def release_throttled(self, now: datetime) -> None:
        """Start the runs the throttle's windows have room for at ``now``, each key's line in order
        (a line's head the overlap policy holds starts from ``waiting``). Without a throttle (a
        re-activation removed it) every line's runs are tried under the other rules, in order."""
        throttle, state = self.spec.policies.throttle, self.state.throttle
        if throttle is None:
            state.starts.clear()
            state.marks = state.key_chars = 0
            lines, state.lines = state.lines, {}
            for run_key in (k for line in lines.values() for k in line):
                run = self.state.runs.get(run_key)
                if run is not None and run.status == "pending":
                    self._try_start(run, now)
            return
        _throttle.forget_past(state, now, throttle)
        for key in list(state.lines):
            while line := state.lines.get(key):
                head = self.state.runs.get(line[0])
                if head is None or head.status != "pending":
                    line.pop(0)  # not waiting any more (kept defensively: every exit leaves the line)
                    if not line:
                        del state.lines[key]
                elif head.run_key in self.state.waiting or not self._try_start(head, now):
                    break

    def throttle_wakeup(self) -> datetime | None:
        """The earliest instant the throttle lets a waiting run start (the shell's timer), or None.
        A line's head with room already (none is left so: every start tries the next) gives an
        instant already past, its acceptance: the shell wakes at once and the tick starts it."""
        throttle, state = self.spec.policies.throttle, self.state.throttle
        if throttle is None or not state.lines:
            return None
        held = set(self.state.waiting)  # heads the policy holds start when a run ends, not at an instant
        instants = [_throttle.next_start(state, key, throttle) or self.state.runs[line[0]].accepted_at
                    for key, line in state.lines.items() if line[0] not in held and line[0] in self.state.runs]
        return min(instants) if instants else None

    # ------------------------------------------------------------------ operators
    def drop_pending(self, run_key: str, now: datetime, note: str | None) -> str:
        """Operator disposition of a pending run or closed batch (BATCH-5)."""
        run = self.state.runs.get(run_key)
        if run is None or run.status != "pending":
            raise OperatorRefused(f"no pending run {run_key!r}")
        self.run_finished(run_key, "dropped", now)
        for key in run.event_keys:
            if key in self.state.events:
                self.state.events[key].disposition = Disposition.DROPPED
        return "dropped"

    def admit_pending(self, run_key: str, now: datetime) -> str:
        """Operator: start a pending run now, bypassing overlap, concurrency and the throttle (whose
        window counts the start), not queue keys."""
        run = self.state.runs.get(run_key)
        if run is None or run.status != "pending":
            raise OperatorRefused(f"no pending run {run_key!r}")
        if run.queue_key is not None and self.state.queues.get(run.queue_key, [run_key])[0] != run_key:
            raise OperatorRefused(f"run {run_key!r} waits behind its queue key; admitting it would break TRIG-11")
        if run_key in self.state.waiting:
            self.state.waiting.remove(run_key)
        if run_key in self.state.lanes_waiting:
            self.state.lanes_waiting.remove(run_key)
        self._start(run, now)
        if self.state.throttle.lines:  # it may have been a line's head: the next may have room
            self.release_throttled(now)
        return "admitted"
