"""The activation engine: pure, deterministic initiation rules.

State in, event in, new state and commands out. Time is always an argument (``now``); nothing
here reads a clock, does I/O or imports Temporal. The Temporal shell (``workflows/activation.py``)
feeds it deliveries, timer wake-ups, activity results and operator actions, and executes the
commands it leaves in :attr:`Core.outbox` (start a run, cancel/terminate one, signal one).

Pipeline of one event (external delivery, poll item, scheduled occurrence):
validate payload -> dedup by identity -> cycle guard -> ``when`` -> ``queue_by``/``partition_by``
-> ``into`` -> overlap -> batch or queue -> start. Every step's outcome is a :class:`Disposition`.
"""

from __future__ import annotations

import json
from collections import deque
from datetime import datetime, timedelta
from typing import Any

import jsonschema

from .._expr import Evaluator, ExpressionFault, canonical_key
from ..activation import ActivationSpec, EntrySpec
from .. import schedule as seq
from ..limits import ADMIT_PER_TASK, clip, retained_id
from ..runinput import Causation, Initiation, RunInput, TriggerInfo
from . import _batch, _intake, _jobs, _overlap, _poll, _schedule, _subscriptions
from ._codec import Retired
from ._keys import digest_and_size, event_key, identity_text, payload_digest, run_ident
from ._types import OperatorRefused
from ._types import (
    RELEASED_AT_ACCEPTANCE,
    TERMINAL,
    Command,
    ControlRun,
    DeliveryResult,
    Disposition,
    EngineState,
    ErrorRecord,
    EventRecord,
    RunPoll,
    RunRecord,
    StartRun,
)

MAX_ERRORS = 200
MAX_RECENT_RUNS = 100
KEEP_LIVE_RELEASED = 2000
IN_FLIGHT = frozenset({"starting", "running"})


class Core:
    """Wraps one :class:`EngineState`; methods mutate it and append commands to ``outbox``."""

    def __init__(self, spec: ActivationSpec, state: EngineState):
        self.spec = spec
        self.state = state
        self.outbox: list[Command] = []
        self.recent_runs: deque[RunRecord] = deque(maxlen=MAX_RECENT_RUNS)
        self._eval = Evaluator()
        self._validators: dict[str, jsonschema.protocols.Validator] = {}
        self._schedules: dict[str, seq.ScheduleSpec] = {}
        self.zones: dict[str, Any] = {}  # time zones by name, loaded once (_schedule.local_iso)
        self._legacy_schedules = False
        self._release_queue: deque[tuple[datetime, str]] = deque(
            sorted((r.released_at, k) for k, r in state.events.items() if r.released_at is not None)
        )
        self._in_flight: dict[str, RunRecord] = {k: r for k, r in state.runs.items() if r.status in IN_FLIGHT}
        # Payload bytes of pending runs (see _intake.held_bytes), kept up to date by admission and start.
        self.pending_bytes = sum(r.input_bytes for r in state.runs.values() if r.status == "pending")
        self.batch_bytes = sum(b.bytes for b in state.batches.values())  # open batches' payloads (_batch)
        self.retired = Retired.unpack(state.compact_events)
        state.compact_events = b""
        # Whether poll_now during a poll in flight polls again when it ends (the shell turns this off
        # for histories recorded before it did: see workflows/activation.py POLL_NOW_PATCH).
        self.poll_now_survives_flight = True
        # Whether the budgets of core.limits apply (depth, id length, held bytes, batch bytes, work
        # per task). The shell turns this off for runs begun before them (BOUNDED_PATCH): their
        # recorded decisions must replay. Checks for input that always failed apply regardless.
        self.bounded = True
        self.task_budget = ADMIT_PER_TASK  # occurrence admissions left in this workflow task
        # Set by the shell while the carried state is over its limit: new deliveries are deferred.
        self.carry_blocked: str | None = None

    def use_legacy_evaluation(self) -> None:
        """Evaluate expressions and schedules as activations of a spec before evaluation 2 (``ActivationSpec.evaluation``) did, to replay
        their histories (see ``Evaluator(legacy=True)`` and ``ScheduleSpec.legacy``)."""
        self._eval = Evaluator(legacy=True)
        self._legacy_schedules = True
        self._schedules.clear()

    # ------------------------------------------------------------------ helpers
    def entry(self, name: str) -> EntrySpec:
        found = self.spec.entry(name)
        if found is None:
            raise KeyError(name)
        return found

    def _count(self, name: str, n: int = 1) -> None:
        self.state.counters[name] = self.state.counters.get(name, 0) + n

    def _next_seq(self) -> int:
        self.state.seq += 1
        return self.state.seq

    def begin_task(self) -> None:
        """A new workflow task: its budget of work starts afresh (limits.ADMIT_PER_TASK)."""
        self.task_budget = ADMIT_PER_TASK

    def record_error(self, now: datetime, kind: str, message: str, entry: str | None = None, delivery_id: str | None = None) -> None:
        # Bounded: a record never keeps more of a sender's text than limits allow (ids, messages).
        self.state.errors.append(ErrorRecord(at=now, kind=kind, entry=entry, delivery_id=retained_id(delivery_id),
                                             message=clip(message) or ""))
        self.state.error_counts[kind] = self.state.error_counts.get(kind, 0) + 1
        if len(self.state.errors) > MAX_ERRORS:
            del self.state.errors[: len(self.state.errors) - MAX_ERRORS]

    def validate_payload(self, entry: EntrySpec, payload: Any) -> str | None:
        """None when the payload satisfies the manifest's schema, else a message (EXT-2)."""
        validator = self._validators.get(entry.name)
        if validator is None:
            validator = jsonschema.Draft202012Validator(entry.payload_schema, format_checker=jsonschema.FormatChecker())
            self._validators[entry.name] = validator
        errors = sorted(validator.iter_errors(payload), key=lambda e: list(map(str, e.absolute_path)))
        if not errors:
            return None
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "payload"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return f"{where}: {first.message}{more}"

    def _scope(self, entry: EntrySpec, value: Any) -> dict[str, Any]:
        return {entry.name: value, "inputs": self.spec.inputs}

    # ------------------------------------------------------------------ external delivery
    def resolve_entry(self, name: str | None, kinds: tuple[str, ...] = ("external",)) -> EntrySpec | str:
        """The entry a delivery targets, or a message naming the choices."""
        candidates = [e for e in self.spec.entries if e.kind in kinds]
        if name is None:
            if len(candidates) == 1:
                return candidates[0]
            names = ", ".join(e.name for e in candidates) or "none"
            return f"name the trigger entry: this activation's external entries are {names}"
        found = self.spec.entry(name)
        if found is None or found.kind not in kinds:
            names = ", ".join(e.name for e in candidates) or "none"
            return f"no external trigger entry {name!r}; this activation's external entries are {names}"
        return found

    def deliver(self, entry_name: str | None, payload: Any, now: datetime) -> DeliveryResult:
        """One external delivery (EXT-1..13). The result is durable once the workflow task ends."""
        self._count("deliveries")
        entry = self.resolve_entry(entry_name)
        if isinstance(entry, str):
            self._count("refused_unknown_entry")
            return DeliveryResult(entry=entry_name, delivery_id=None, disposition=Disposition.INVALID,
                                  message=entry, activation_id=self.spec.activation_id)
        return self.deliver_event(entry, payload, now)

    def deliver_event(self, entry: EntrySpec, payload: Any, now: datetime) -> DeliveryResult:
        delivery_id = _intake.identity(entry, payload)
        problem = _intake.payload_problem(self, payload, delivery_id) or self.validate_payload(entry, payload)
        if problem is not None:
            return self._invalid(entry, delivery_id, problem, now)
        assert delivery_id is not None  # the schema requires it (manifest contract)
        key = event_key(entry.name, delivery_id)
        digest, size = digest_and_size(payload)
        too_large = _intake.size_problem(self, size)
        if too_large is not None:
            return self._invalid(entry, delivery_id, too_large, now)
        existing = self.lookup(key)
        if existing is not None:
            return self._repeat(entry, existing, delivery_id, digest, now)
        deferred = _intake.defer_reason(self, size)
        if deferred is not None:
            return _intake.deferred(self, entry, delivery_id, deferred, now)
        disposition, run_key, message = self._accept(entry, payload, key, digest, now, delivery_id=delivery_id, size=size)
        return DeliveryResult(entry=entry.name, delivery_id=delivery_id, disposition=disposition, run_key=run_key,
                              message=message, activation_id=self.spec.activation_id)

    def lookup(self, key: str) -> EventRecord | None:
        """The retained dedup entry of an event key, live or retired (see _codec)."""
        record = self.state.events.get(key)
        if record is not None:
            return record
        retired = self.retired.get(key)
        if retired is None:
            return None
        digest, disposition, released = retired
        entry, _, ident = key.partition("\x1f")
        return EventRecord(entry=entry, delivery_id=ident, digest=digest, disposition=disposition, accepted_at=released,
                           released_at=released, activation_id=self.spec.activation_id, detail="retired")

    def retire_released(self, keep_live: int = KEEP_LIVE_RELEASED) -> int:
        """Move released dedup entries, all but the ``keep_live`` most recent, into the compact form
        (called before continue-as-new). Recent ones keep their full record for operators."""
        moved = 0
        while len(self._release_queue) > keep_live:
            _, key = self._release_queue.popleft()
            record = self.state.events.pop(key, None)
            if record is not None and record.released_at is not None:
                self.retired.add(key, record.digest, record.disposition, record.released_at)
                moved += 1
        return moved

    def _invalid(self, entry: EntrySpec, delivery_id: str | None, problem: str, now: datetime) -> DeliveryResult:
        # EXT-9/10: no run, not suppression, identity left unconsumed; recorded when identifiable.
        # What is kept and returned is bounded: an over-long id as its digest, the message cut.
        self._count("invalid")
        kept = retained_id(delivery_id)
        ident = f"delivery {kept!r}" if kept else "a delivery without a usable delivery id"
        self.record_error(now, "invalid", f"{ident} failed validation: {problem}", entry.name, kept)
        return DeliveryResult(entry=entry.name, delivery_id=kept, disposition=Disposition.INVALID,
                              message=clip(problem), activation_id=self.spec.activation_id)

    def _repeat(self, entry: EntrySpec, existing: EventRecord, delivery_id: str, digest: str, now: datetime) -> DeliveryResult:
        if existing.digest == digest or (existing.detail == "retired" and digest.startswith(existing.digest)):
            self._count("duplicates")
            return DeliveryResult(entry=entry.name, delivery_id=delivery_id, disposition=Disposition.DUPLICATE,
                                  run_key=existing.run_key, retained=existing.disposition,
                                  activation_id=self.spec.activation_id)
        self._count("conflicts")
        message = (f"delivery {delivery_id!r} was accepted with a different payload at "
                   f"{existing.accepted_at.isoformat()}; the first payload stands (EXT-3, EXT-4)")
        self.record_error(now, "conflict", message, entry.name, delivery_id)
        return DeliveryResult(entry=entry.name, delivery_id=delivery_id, disposition=Disposition.CONFLICT,
                              run_key=existing.run_key, retained=existing.disposition, message=message,
                              activation_id=self.spec.activation_id)

    def _accept(
        self, entry: EntrySpec, payload: Any, key: str, digest: str, now: datetime, *,
        delivery_id: str | None = None, scheduled_at: str | None = None, ident: str | None = None,
        size: int = 0, offer: bool = True,
    ) -> tuple[Disposition, str | None, str | None]:
        """Admit a validated, new event: guard, key, projection, overlap, batch/queue (INIT-6).

        ``offer=False``: not to subscriptions (an event released after its subscriber was gone)."""
        causation, refused = self._causation(entry, payload)
        if refused:
            return self._retain(entry, key, digest, delivery_id, Disposition.REFUSED, now, refused, kind="refused")
        delivered = _subscriptions.offer(self, entry, payload, key, digest, delivery_id, now) if offer else None
        if delivered is not None:
            return delivered
        scope = self._scope(entry, payload)
        if entry.when:
            try:
                if not self._eval.guard(entry.when, scope):
                    self._count("suppressed")
                    return self._retain(entry, key, digest, delivery_id, Disposition.SUPPRESSED, now, None)
            except ExpressionFault as exc:
                return self._retain(entry, key, digest, delivery_id, Disposition.GUARD_FAULT, now, str(exc), kind="guard_fault")
        queue_key = partition = None
        try:
            if entry.queue_by:
                queue_key = self._eval.key(entry.queue_by, scope)
            if entry.batch and entry.batch.partition_by:
                partition = self._eval.key(entry.batch.partition_by, scope)
        except ExpressionFault as exc:
            return self._retain(entry, key, digest, delivery_id, Disposition.KEY_FAULT, now, str(exc), kind="key_fault")
        try:
            into = self._eval.render_tree(entry.into, scope) if entry.into else {}
        except ExpressionFault as exc:
            return self._retain(entry, key, digest, delivery_id, Disposition.PROJECTION_FAULT, now, str(exc), kind="projection_fault")
        if entry.batch:
            return _batch.add(self, entry, payload, key, digest, now, partition=partition or "",
                              into=into, delivery_id=delivery_id, scheduled_at=scheduled_at, size=size)
        if self._overlap_skips():
            self._count("skipped")
            return self._retain(entry, key, digest, delivery_id, Disposition.SKIPPED, now, None)
        run_key = f"{self.spec.activation_id}/{entry.name}/{run_ident(ident or delivery_id or key)}"
        run_input = self._run_input(entry, payload, into, run_key, [delivery_id] if delivery_id else [], scheduled_at, now, causation)
        run = RunRecord(run_key=run_key, entry=entry.name, queue_key=queue_key, input=run_input, event_keys=[key],
                        accepted_at=now, activation_id=self.spec.activation_id, scheduled_at=scheduled_at,
                        input_bytes=size)
        disposition = self._admit(run, now)
        self._retain(entry, key, digest, delivery_id, disposition, now, None, run_key=run_key)
        return disposition, run_key, None

    def _retain(
        self, entry: EntrySpec, key: str, digest: str, delivery_id: str | None, disposition: Disposition,
        now: datetime, detail: str | None, *, run_key: str | None = None, kind: str | None = None,
    ) -> tuple[Disposition, str | None, str | None]:
        record = EventRecord(entry=entry.name, delivery_id=delivery_id or key.split("\x1f", 1)[1], digest=digest,
                             disposition=disposition, run_key=run_key, accepted_at=now,
                             activation_id=self.spec.activation_id, detail=clip(detail), seq=self._next_seq())
        self.state.events[key] = record
        if disposition in RELEASED_AT_ACCEPTANCE:
            self._release(key, now)
        if kind:
            self._count(kind)
            self.record_error(now, kind, detail or kind, entry.name, delivery_id)
        return disposition, run_key, detail

    def _release(self, key: str, now: datetime) -> None:
        record = self.state.events.get(key)
        if record is not None and record.released_at is None:
            record.released_at = now
            self._release_queue.append((now, key))

    def _causation(self, entry: EntrySpec, payload: Any) -> tuple[Causation, str | None]:
        if not entry.connector.startswith("workflow."):
            return Causation(), None
        upstream = payload.get("causation", {}) if isinstance(payload, dict) else {}
        depth = int(upstream.get("depth", 0)) + 1
        chain = [*upstream.get("chain", []), str(payload.get("workflow_id", "?"))]
        bound = self.spec.policies.max_causation_depth
        if depth > bound:
            return Causation(depth=depth, chain=chain), (
                f"cycle guard: causation depth {depth} exceeds the bound {bound} (COMP-6); chain: {' -> '.join(chain)}"
            )
        return Causation(depth=depth, chain=chain), None

    def _run_input(
        self, entry: EntrySpec, value: Any, into: dict[str, Any], run_key: str, delivery_ids: list[str],
        scheduled_at: str | None, now: datetime, causation: Causation, batched: bool = False,
    ) -> RunInput:
        bindings: dict[str, Any] = {e.name: None for e in self.spec.entries}
        bindings[entry.name] = value
        return RunInput(
            trigger=TriggerInfo(name=entry.name, connector=entry.connector, kind=entry.kind, batched=batched),
            bindings=bindings, into=into, inputs=self.spec.inputs,
            initiation=Initiation(activation_id=self.spec.activation_id, workflow=self.spec.workflow, run_key=run_key,
                                  delivery_ids=delivery_ids, scheduled_at=scheduled_at, accepted_at=now,
                                  causation=causation),
        )

    # ------------------------------------------------------------------ overlap and admission
    def in_flight(self) -> list[RunRecord]:
        return list(self._in_flight.values())

    def _overlap_skips(self) -> bool:
        return _overlap.skips_on_arrival(self.spec.policies.overlap, len(self.state.runs), len(self.state.waiting))

    def _admit(self, run: RunRecord, now: datetime) -> Disposition:
        """Place a new run: behind its queue key, behind the overlap policy, or start it."""
        self.state.runs[run.run_key] = run
        self.pending_bytes += run.input_bytes
        if run.queue_key is not None:
            queue = self.state.queues.setdefault(run.queue_key, [])
            queue.append(run.run_key)
            if len(queue) > 1:
                run.waiting_for = "queue_by key held by an earlier run (TRIG-11)"
                return Disposition.QUEUED
        return Disposition.ACCEPTED if self._try_start(run, now) else Disposition.QUEUED

    def _try_start(self, run: RunRecord, now: datetime) -> bool:
        """Start ``run`` unless the overlap policy or the concurrency cap holds it (see _overlap)."""
        policies, waiting = self.spec.policies, self.state.waiting
        decided = _overlap.admit(policies.overlap, policies.max_concurrent_runs, run.run_key, self._in_flight.values(),
                                 waiting, waiting[0] if waiting else None)
        self._control(decided, f"overlap {policies.overlap}: superseded by {run.run_key}")
        if not decided.start:
            if decided.enqueue:
                waiting.append(run.run_key)
            run.waiting_for = decided.reason
            return False
        if decided.dequeue:
            waiting.remove(run.run_key)
        self._start(run, now)
        return True

    def _control(self, decided: _overlap.Admission, reason: str) -> None:
        for key in decided.targets:
            self._in_flight[key].cancel_requested = True
            self.outbox.append(ControlRun(run_key=key, action=decided.control, reason=reason))  # type: ignore[arg-type]

    def _start(self, run: RunRecord, now: datetime) -> None:
        if run.status == "pending":
            self.pending_bytes -= run.input_bytes
        run.status = "starting"
        self._in_flight[run.run_key] = run
        run.waiting_for = None
        assert run.input is not None
        self.outbox.append(StartRun(run_key=run.run_key, input=run.input))
        self._count("runs_started")

    def pending_starts(self) -> list[StartRun]:
        """Runs admitted but not confirmed started: re-issue after continue-as-new (idempotent)."""
        return [StartRun(run_key=r.run_key, input=r.input) for r in self.state.runs.values()
                if r.status == "starting" and r.input is not None]

    def run_started(self, run_key: str, temporal_run_id: str | None, now: datetime) -> None:
        run = self.state.runs.get(run_key)
        if run is None or run.status != "starting":
            return
        run.status = "running"
        run.started_at = now
        run.temporal_run_id = temporal_run_id
        _subscriptions.on_run_started(self, run, now)
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
        self._count("start_faults")
        self.run_finished(run_key, "start_failed", now)

    def run_finished(self, run_key: str, status: str, now: datetime) -> None:
        """A run reached a terminal outcome: release its key, start the retention clock (TRIG-14, EXT-5)."""
        run = self.state.runs.get(run_key)
        if run is None or run.status in TERMINAL:
            return
        if run.status == "pending":
            self.pending_bytes -= run.input_bytes
        run.status = status  # type: ignore[assignment]
        self._in_flight.pop(run_key, None)
        run.ended_at = now
        run.input = None
        _subscriptions.on_run_finished(self, run, now)
        self._count(f"runs_{status}")
        for key in run.event_keys:
            self._release(key, now)
        del self.state.runs[run_key]
        self.recent_runs.append(run)
        if run_key in self.state.waiting:
            self.state.waiting.remove(run_key)
        self._advance_queue(run, now)
        self._drain_waiting(now)

    def _advance_queue(self, run: RunRecord, now: datetime) -> None:
        if run.queue_key is None:
            return
        queue = self.state.queues.get(run.queue_key, [])
        if run.run_key in queue:
            queue.remove(run.run_key)
        if not queue:
            self.state.queues.pop(run.queue_key, None)
            return
        head = self.state.runs[queue[0]]
        if head.status == "pending" and head.run_key not in self.state.waiting:
            self._try_start(head, now)

    def _drain_waiting(self, now: datetime) -> None:
        while self.state.waiting:
            head = self.state.runs[self.state.waiting[0]]
            if not self._try_start(head, now):
                return

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
        """Operator: start a pending run now, bypassing overlap and concurrency (not queue keys)."""
        run = self.state.runs.get(run_key)
        if run is None or run.status != "pending":
            raise OperatorRefused(f"no pending run {run_key!r}")
        if run.queue_key is not None and self.state.queues.get(run.queue_key, [run_key])[0] != run_key:
            raise OperatorRefused(f"run {run_key!r} waits behind its queue key; admitting it would break TRIG-11")
        if run_key in self.state.waiting:
            self.state.waiting.remove(run_key)
        self._start(run, now)
        return "admitted"

    # ------------------------------------------------------------------ batches (see _batch)
    def close_due_batches(self, now: datetime) -> None:
        """Close batches whose max_wait elapsed, never earlier (BATCH-3)."""
        _batch.close_due(self, now)

    # ------------------------------------------------------------------ time
    def expire(self, now: datetime) -> int:
        """Drop dedup entries whose retention elapsed (EXT-5, EXT-7); later deliveries count as new."""
        retention = self.spec.policies.dedup_retention
        expired = 0
        while self._release_queue and self._release_queue[0][0] + retention <= now:
            _, key = self._release_queue.popleft()
            record = self.state.events.get(key)
            if record is not None and record.released_at is not None and record.released_at + retention <= now:
                del self.state.events[key]
                expired += 1
        oldest = self.retired.oldest()
        if oldest is not None and oldest + retention <= now:
            expired += self.retired.pop_expired(now - retention)
        if expired:
            self._count("dedup_expired", expired)
        return expired

    def next_expiry(self) -> datetime | None:
        fronts = [t for t in (self._release_queue[0][0] if self._release_queue else None, self.retired.oldest()) if t]
        return min(fronts) + self.spec.policies.dedup_retention if fronts else None

    def next_batch_deadline(self) -> datetime | None:
        return _batch.next_deadline(self)


    def parsed_schedule(self, name: str) -> seq.ScheduleSpec:
        parsed = self._schedules.get(name)
        if parsed is None:
            parsed = seq.parse_schedule(self.entry(name).config, legacy=self._legacy_schedules)
            self._schedules[name] = parsed
        return parsed

    def tick(self, now: datetime) -> None:
        """Everything time-driven: dedup expiry, batch deadlines, due occurrences, admission jobs."""
        self.expire(now)
        self.close_due_batches(now)
        _schedule.schedule_tick(self, now)
        _jobs.run_jobs(self, now)
        _subscriptions.expire(self, now)

    def tick_schedules(self, instant: datetime) -> None:
        """Admit the schedule occurrences due at ``instant`` (at most the next one), decided ahead of
        it: the shell holds whatever follows until the instant (SCHED-6)."""
        _schedule.schedule_tick(self, instant)

    def next_wakeup(self, wake_ahead: timedelta = timedelta(0)) -> datetime | None:
        """When the shell must next look at the clock: the earliest deadline, and each schedule
        instant ``wake_ahead`` early (the shell then waits for the instant itself, see
        :meth:`next_occurrence`). Other deadlines are never anticipated: max_wait MUST NOT close a
        batch early (BATCH-3), and an expiry or poll early would be early."""
        candidates = [self.next_expiry(), self.next_batch_deadline(), _poll.next_poll_wakeup(self),
                      _subscriptions.next_expiry(self), _jobs.next_wakeup(self)]
        occurrence = self.next_occurrence()
        candidates.append(occurrence - wake_ahead if occurrence is not None else None)
        present = [c for c in candidates if c is not None]
        return min(present) if present else None

    def next_occurrence(self) -> datetime | None:
        """The earliest intended instant of an active, unpaused schedule entry, if any."""
        instants = [st.next_instant for st in self.state.schedules.values()
                    if st.active and not st.paused and st.next_instant is not None]
        return min(instants) if instants else None

    def polls_due(self, now: datetime) -> list[RunPoll]:
        return _poll.polls_due(self, now)

    def poll_succeeded(self, entry: str, seq_no: int, version: int, result: _poll.PollResultIn, now: datetime) -> None:
        _poll.poll_succeeded(self, entry, seq_no, version, result, now)

    def poll_failed(self, entry: str, seq_no: int, error: str, now: datetime) -> None:
        _poll.poll_failed(self, entry, seq_no, error, now)

    def rebind(self, spec: ActivationSpec, now: datetime) -> None:
        """Take over with a new activation; what was accepted stays as accepted (INIT-4, INIT-5)."""
        old = self.spec
        self.state.previous_activations.append(old.activation_id)
        self.state.activation_id = spec.activation_id
        _batch.close_orphans(self, {e.name for e in spec.entries}, now)
        self.spec = spec
        self._validators.clear()
        self._schedules.clear()
        sync_sources(self, now, previous=old)


def initial_state(spec: ActivationSpec, now: datetime, *, legacy: bool = False) -> EngineState:
    state = EngineState(activation_id=spec.activation_id)
    engine = Core(spec, state)
    if legacy:
        engine.use_legacy_evaluation()
    sync_sources(engine, now, previous=None)
    return state


def sync_sources(engine: Core, now: datetime, previous: ActivationSpec | None) -> None:
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
                fresh.last_instant, fresh.occurrences, fresh.counts, fresh.overflow, fresh.jobs = (
                    current.last_instant, current.occurrences, current.counts, current.overflow, current.jobs)
                fresh.paused = current.paused
                _schedule.refresh_next(fresh, engine.parsed_schedule(entry.name))
            state.schedules[entry.name] = fresh
        elif entry.kind == "poll" and entry.name not in state.polls:
            state.polls[entry.name] = _poll.new_poll_state(entry, spec, now)


entry_delivery_id = _intake.entry_delivery_id  # kept here too: the poll module and callers use this name


def dumps_state(state: EngineState) -> bytes:
    return json.dumps(state.model_dump(mode="json"), separators=(",", ":")).encode()
