"""The engine's public face: events in, one :class:`Decision` out (its answer and the commands to run).

The shell (``workflows/activation.py``) and every other caller use this class only. Each call that
changes the engine returns a :class:`Decision`: the call's answer in ``value`` and, in order, the
commands the shell executes (start, control or signal a run, publish a lifecycle event, run a
poll, watch running runs). Reads (summaries, the next wake-up, the carried state) return data and
change nothing that a replay could see.

Time is always an argument; nothing here reads a clock, does I/O or imports Temporal.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Set as AbstractSet
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from wf_initiation.errors import UnknownEntry

from .._expr import ExpressionFault
from ..activation import ActivationSpec, Split
from ..limits import BYTES_PER_RETIRED_ID, CAPACITY_BYTES
from ..runinput import Causation
from . import _codec, _deactivate, _growth, _intake, _kept, _lanes, _lifecycle, _poll, _split, _subscriptions, _throttle, operator
from . import summary as _views
from ._keys import digest_and_size, identity
from ._lanes import LaneNotice
from ._ledger import KEEP_LIVE_RELEASED
from ._machine import Machine
from ._split import DrainCheck
from ._subscriptions import LifecycleEvent, SubscribeRequest, UnsubscribeRequest
from ._types import (
    CURRENT,
    Compat,
    Decision,
    DeliveryResult,
    EngineState,
    EventRecord,
    Intake,
    OperatorOutcome,
    RunRecord,
    ShardFill,
    SignalRef,
    WatchRuns,
    WatchTarget,
)

R = TypeVar("R")


class Engine:
    """One activation's engine over its carried :class:`EngineState`.

    Args:
        spec: the activation's binding.
        state: the carried state (``initial_state`` for a new activation).
        compat: what a run begun by an earlier build keeps of it (:class:`Compat`; current by default).
    """

    def __init__(self, spec: ActivationSpec, state: EngineState, *, compat: Compat = CURRENT):
        self._machine = Machine(spec, state)
        self._machine.bounded = compat.bounded
        self._machine.signals_kept = compat.signals_kept
        self._machine.capacity_checked = compat.capacity
        self._machine.keeps_for_redrive = compat.redrive_kept
        if compat.legacy_evaluation:
            self._machine.use_legacy_evaluation()
        self.compat = compat

    def _decide(self, value: R) -> Decision[R]:
        machine = self._machine
        commands, machine.outbox = machine.outbox, []
        return Decision(value, commands)

    # ------------------------------------------------------------------ reads
    @property
    def spec(self) -> ActivationSpec:
        return self._machine.spec

    @property
    def state(self) -> EngineState:
        """The carried state, as data (for tools and tests; the shell reads the views below)."""
        return self._machine.state

    @property
    def bounded(self) -> bool:
        return self._machine.bounded

    @property
    def carry_blocked(self) -> str | None:
        """Why new deliveries are deferred while the state is too large to carry, or None."""
        return self._machine.carry_blocked

    @property
    def previous_activations(self) -> list[str]:
        return list(self._machine.state.previous_activations)

    @property
    def acceptance_seq(self) -> int:
        """Sequence number of the latest disposition recorded."""
        return self._machine.state.seq

    def in_flight(self) -> list[RunRecord]:
        return self._machine.in_flight()

    def causation(self, run_key: str) -> Causation | None:
        """The causation of a run this activation started (for its lifecycle events); None if unknown."""
        run = self._machine.state.runs.get(run_key)
        return run.causation if run is not None else None

    def lookup(self, key: str) -> EventRecord | None:
        return self._machine.lookup(key)

    def key_lane(self, entry: str | None, payload: Any) -> Decision[int | None]:
        """The lane the routing function names for this delivery's key (core.sharding.event_lane; None:
        its entry relates no events, or its key cannot be computed: its id's shard judges it).
        Decides nothing (no commands): the router's question to the engine (core.routing.route)."""
        machine = self._machine
        try:
            return self._decide(machine.lane(machine.resolve_entry(entry), payload))
        except (UnknownEntry, ExpressionFault, ValueError, TypeError):
            return self._decide(None)

    def subscriptions_check(self, sub_ids: list[str]) -> Decision[dict[str, Any]]:
        """Shard 0 asked whether it holds these subscriptions as originals (their copies are its); no commands."""
        subs = self._machine.state.subscriptions
        return self._decide({"held": [i for i in sub_ids if i in subs and not subs[i].replica]})

    def holds_copy(self, sub_id: str) -> Decision[bool]:
        """Whether this shard holds a copy of shard 0's subscription ``sub_id``; no commands."""
        sub = self._machine.state.subscriptions.get(sub_id)
        return self._decide(sub is not None and sub.replica)

    def lanes_check(self, child: int, keys: list[str]) -> Decision[dict[str, Any]]:
        """A split's parent asked by ``child`` about a lane notice it got (core/engine/_lanes.py); no commands."""
        return self._decide(_lanes.lanes_check(self._machine, child, keys))

    def next_wakeup(self, wake_ahead: timedelta = timedelta(0)) -> datetime | None:
        return self._machine.next_wakeup(wake_ahead)

    def next_occurrence(self) -> datetime | None:
        return self._machine.next_occurrence()

    def deactivation_status(self) -> str | None:
        """``deactivating`` / ``deactivated``, or None while the activation is installed."""
        return _deactivate.status(self._machine)

    def deactivation_settled(self) -> bool:
        """Whether a deactivation has nothing left to wait for."""
        return _deactivate.settled(self._machine)

    def status(self) -> str:
        return _views.status(self._machine)

    def summary(self) -> dict[str, Any]:
        return _views.short(self._machine)

    def full_state(self) -> dict[str, Any]:
        return _views.full_state(self._machine)

    def events(self, after_seq: int = 0, limit: int = _views.MAX_EVENTS_IN_STATE) -> list[dict[str, Any]]:
        return _views.events(self._machine, after_seq, limit)

    def delivery(self, entry: str, delivery_id: str) -> dict[str, Any] | None:
        return _views.delivery(self._machine, entry, delivery_id)

    def markdown(self) -> str:
        return _views.markdown(self._machine)

    def error_counts(self) -> dict[str, int]:
        return dict(self._machine.state.error_counts)

    def dispositions_since(self, seq: int) -> Counter[tuple[str, str]]:
        """(entry, disposition) -> count of the dispositions recorded after ``seq``."""
        counts: Counter[tuple[str, str]] = Counter()
        # Dedup entries are kept in acceptance order (dict order = seq order): O(new entries).
        for record in reversed(self._machine.state.events.values()):
            if record.seq <= seq:
                break
            counts[(record.entry, record.disposition.value)] += 1
        return counts

    def capacity(self) -> dict[str, Any]:
        """How full the activation is: its estimated carried state against its capacity (docs/limits.md)."""
        return _intake.capacity(self._machine)

    def gauges(self) -> dict[str, int]:
        st, in_flight = self._machine.state, len(self._machine.in_flight())
        return {
            "wfi.capacity.fill_percent": int(100 * _intake.capacity_fill(self._machine)),
            "wfi.dedup.size": len(st.events) + len(self._machine.retired),
            "wfi.runs.pending": len(st.runs) - in_flight,
            "wfi.runs.in_flight": in_flight,
            "wfi.queue.keys": len(st.queues),
            "wfi.runs.throttled": _throttle.waiting(st.throttle),
            "wfi.batches.open": len(st.batches),
        }

    def retire_due(self, keep_live: int = KEEP_LIVE_RELEASED) -> bool:
        """Whether the run should continue as new to retire the released dedup entries it holds as
        full records past the ``keep_live`` newest and ``limits.RECORDS_PER_RUN`` more: the worker's
        memory per retained id."""
        return self._machine.retire_due(keep_live)

    def encode_state(self, keep_live: int = KEEP_LIVE_RELEASED) -> bytes:
        """The state to carry across continue-as-new: released dedup entries but the ``keep_live``
        newest packed first."""
        self._machine.retire_released(keep_live)
        return _codec.encode_state(self._machine.state, self._machine.retired)

    def release(self) -> Decision[None]:
        """Let go at once of what this engine holds per id (its retired ids, its records): for a run the
        worker has evicted from its cache, which decides nothing again (no command). The engine stays
        usable, empty; the run's other objects wait in reference cycles for Python's next full
        collection, which would otherwise keep these too, and a worker loading the next run alongside."""
        self._machine.retired = _codec.Retired()
        self._machine.state.events.clear()
        return self._decide(None)

    # ------------------------------------------------------------------ life of the workflow run
    def resume(self, now: datetime) -> Decision[bool]:
        """A workflow run begins with this state: what a previous run left unfinished is issued again
        (starts, kept signals and publishes, a deactivation's controls). ``value``: whether this run
        activates a deactivated activation again."""
        machine = self._machine
        _split.adopt(machine)  # a split this run's spec names, or the progress a run of an earlier build carried in it
        _poll.abandon_in_flight(machine.state)  # a poll of the previous run never reports here (POLL-10)
        machine.outbox.extend(machine.pending_starts())
        machine.outbox.extend(_lifecycle.unacked_commands(machine))
        reactivated = machine.reactivate(machine.spec, now)
        _lanes.hand_over(machine)  # a split's parent started again from its state: once per split
        _growth.resume(machine)  # a growth the previous run left unfinished is issued again
        return self._decide(reactivated)

    def begin_task(self) -> Decision[None]:
        """A new workflow task: its budget of work starts afresh (limits.ADMIT_PER_TASK)."""
        self._machine.begin_task()
        return self._decide(None)

    def tick(self, now: datetime, *, watched: AbstractSet[str] = frozenset(), watch_room: bool = True) -> Decision[None]:
        """Everything time-driven at ``now``: expiry, batch deadlines, due occurrences, admission jobs,
        subscription deadlines, a deactivation's controls; then the polls due and the runs to watch.

        ``watched``: runs the shell watches already, left out of the runs to watch; ``watch_room``
        false: the shell has no room for another watcher, so none are listed. The loop ticks on every
        wake-up: listing every running run each time cost ~5 us per run (10 ms at 2,000), and
        looking at every run, pending ones too, ~0.2 us per run."""
        machine = self._machine
        machine.tick(now)
        _deactivate.progress(machine)
        machine.outbox.extend(machine.polls_due(now))
        if not watch_room:
            return self._decide(None)
        watch = [WatchTarget(run_key=r.run_key, run_id=r.temporal_run_id)
                 for r in machine.in_flight() if r.status == "running" and r.run_key not in watched]
        if watch:
            machine.outbox.append(WatchRuns(runs=watch, prompt=machine.endings_awaited()))
        return self._decide(None)

    def tick_schedules(self, instant: datetime) -> Decision[None]:
        """Admit the schedule occurrences due at ``instant``, decided ahead of it (SCHED-6)."""
        self._machine.tick_schedules(instant)
        return self._decide(None)

    def rebind(self, spec: ActivationSpec, now: datetime) -> Decision[None]:
        """Take over with a new activation; what was accepted stays as accepted (INIT-4, INIT-5)."""
        self._machine.rebind(spec, now)
        return self._decide(None)

    def record_error(self, now: datetime, kind: str, message: str, entry: str | None = None) -> Decision[None]:
        """An initiation error the shell met (a signal it could not decode or send)."""
        self._machine.record_error(now, kind, message, entry)
        return self._decide(None)

    def shed_to_carry(self, excess: int, now: datetime) -> Decision[int]:
        """The state is ``excess`` bytes over what continue-as-new can carry although capacity was kept
        (the estimate was short): drop that many bytes of the oldest released dedup entries, recorded
        as ``capacity_shed``. ``value``: how many were dropped (0: nothing left to drop)."""
        machine = self._machine
        before = len(machine.state.events) + len(machine.retired)
        shed_through = machine.shed_oldest(excess // BYTES_PER_RETIRED_ID + 1 + CAPACITY_BYTES // 100 // BYTES_PER_RETIRED_ID)
        if shed_through is not None:
            machine.state.shed_through = max(machine.state.shed_through or shed_through, shed_through)
            machine.record_error(now, "capacity_shed", f"the state was {excess} bytes over what continue-as-new carries: "
                              f"dedup entries released up to {shed_through.isoformat()} were dropped before their "
                              "retention ended; a redelivery of one of them is taken as new")
        return self._decide(before - len(machine.state.events) - len(machine.retired))

    def block_deliveries(self, reason: str, now: datetime) -> Decision[None]:
        """The state is too large to carry: defer new deliveries with ``reason`` until the run continues as new."""
        if self._machine.carry_blocked is None:
            self._machine.carry_blocked = reason
            self._machine.record_error(now, "carry_over_limit", reason)
        return self._decide(None)

    # ------------------------------------------------------------------ deliveries
    def deliver(self, entry: str | None, payload: Any, now: datetime, *, defer_new: str | None = None,
                prior: EventRecord | None = None, lane: bool = False) -> Decision[DeliveryResult]:
        """One external delivery (EXT-1..13), or its refusal while deactivated. Durable once the task ends.

        ``defer_new``: signalled deliveries are waiting ahead of this one (:meth:`take_signal`): a new
        id is deferred with this reason, so it cannot pass them; a known id is answered as usual.
        ``prior``: the dedup entry of its id in the shard that took it before a split (``Intake.prior``).
        ``lane``: its id's shard routed it here, its queue key's shard (``Intake.lane``)."""
        machine = self._machine
        intake = Intake(defer_new=defer_new, prior=prior, lane=lane)
        result = _deactivate.refuse(machine, entry, payload, now) or machine.deliver(entry, payload, now, intake=intake)
        assert result is not None  # only a delivery that may wait is not taken
        return self._decide(result)

    def take_signal(self, entry: str | None, payload: Any, now: datetime, *, may_wait: bool,
                    prior: EventRecord | None = None, lane: bool = False,
                    run_id: str | None = None) -> Decision[DeliveryResult | None]:
        """A delivery by signal: like :meth:`deliver`, but nobody hears its disposition, so it is never
        dropped silently. ``may_wait``: when only the held-bytes budget would defer it, nothing is
        recorded and the value is None: the shell keeps it and offers it again, in arrival order.
        Deferred anyway (at capacity, the state over what it can carry, the shell cannot keep it), it
        is listed as ``deferred_signal`` with ``run_id``, the run whose history holds the signal
        (:meth:`deferred_signals`), until its id is delivered again."""
        machine = self._machine
        refused = _deactivate.refuse(machine, entry, payload, now)
        if refused is not None:
            return self._decide(refused)
        kept = self.compat.signals_kept
        return self._decide(machine.deliver(entry, payload, now, intake=Intake(signalled=kept, may_wait=kept and may_wait,
                                                                             prior=prior, lane=lane, run_id=run_id)))

    # ------------------------------------------------------------------ signals kept by reference
    @property
    def waiting_signals(self) -> list[SignalRef]:
        """Signals the previous run left waiting for room: the shell takes them first, in order."""
        return list(self._machine.state.signals_waiting)

    def carry_waiting(self, signals: list[tuple[str | None, Any, str]], now: datetime) -> Decision[int]:
        """Signals (entry, payload, run id of the history holding it) still waiting for room at
        continue-as-new: carried as references, in order (their payloads stay in history), for the
        next run to take first. ``value``: how many are carried."""
        machine = self._machine
        refs: list[SignalRef] = []
        for name, payload, run_id in signals:
            try:
                entry = machine.resolve_entry(name)
            except UnknownEntry as exc:  # a re-activation dropped its entry since: listed for the operator
                _intake.keep_deferred(machine, str(name), None, str(exc), now, None)
                continue
            ident = identity(entry, payload)
            digest, size = digest_and_size(payload)
            refs.append(SignalRef(entry=entry.name, delivery_id=ident or "", digest=digest, size=size, run_id=run_id, at=now))
        machine.state.signals_waiting += refs  # after any a continue-as-new that did not happen carried already
        return self._decide(len(refs))

    def waiting_recovered(self, n: int) -> Decision[None]:
        """The first ``n`` carried waiting signals are back in the shell's inbox (read from history)."""
        del self._machine.state.signals_waiting[:n]
        return self._decide(None)

    def waiting_lost(self, ref: SignalRef, problem: str, now: datetime) -> Decision[None]:
        """A carried waiting signal whose payload could not be read back from its run's history: it is
        listed as deferred (its history may come back: a redrive tries again); :meth:`waiting_recovered`
        then drops it with the others of its page."""
        machine = self._machine
        machine.count("deferred")
        _intake.keep_deferred(machine, ref.entry, ref.delivery_id, problem, now, ref)
        return self._decide(None)

    def waiting_record(self, entry: str, delivery_id: str, waiting: list[tuple[Any, str]]) -> dict[str, Any] | None:
        """What ``delivery`` answers for a signal of ``waiting`` (the shell's (request, run id) still
        waiting in memory) with this id: ``waiting_signal``; None when none has it."""
        machine = self._machine
        for request, run_id in waiting:
            try:
                found = machine.resolve_entry(request.entry)
            except UnknownEntry:
                continue
            if found.name == entry and identity(found, request.payload) == delivery_id:
                digest, size = digest_and_size(request.payload)
                ref = SignalRef(entry=entry, delivery_id=delivery_id, digest=digest, size=size, run_id=run_id,
                                at=datetime.min.replace(tzinfo=UTC))
                return {**_views.kept_signal(machine, ref, "waiting_signal"), "kept_at": None}
        return None

    def deferred_signals(self, offset: int = 0, limit: int = 500) -> dict[str, Any]:
        """The deferred signals listed (oldest first, ``limit`` <= 500 from ``offset``) and their total."""
        listed = self._machine.state.signals_deferred
        page = list(listed.values())[max(0, offset): max(0, offset) + max(1, min(limit, 500))]
        return {"total": len(listed), "offset": offset, "unlisted": self._machine.state.counters.get("deferred_signals_unlisted", 0),
                "signals": [r.model_dump(mode="json") for r in page]}

    def redrivable(self, offset: int = 0, limit: int = 500) -> dict[str, Any]:
        """Every event kept for re-drive, by number (oldest first), ``limit`` <= 500 from ``offset``,
        and their total: invalid deliveries and quarantined poll items (payloads kept), start faults
        (runs kept), deferred signals (in history); no payloads (``_kept``, ``_redrive``)."""
        core = self._machine
        listed = _kept.views(core.state, core.spec.policies.dedup_retention)
        page = listed[max(0, offset): max(0, offset) + max(1, min(limit, 500))]
        counters = core.state.counters
        return {"total": len(listed), "offset": offset, "events": page,
                "let_go": {name: counters.get(f"redrive_{name}", 0) for name in ("evicted", "expired", "not_kept")}}

    @property
    def last_seq(self) -> int:
        """The acceptance order of the latest dedup entry (``EventRecord.seq``)."""
        return self._machine.state.seq

    def unreleased_through(self, seq: int) -> bool:
        """Whether a dedup entry accepted at or before ``seq`` still waits for its run to end."""
        return _split.unreleased_through(self._machine, seq)

    # ------------------------------------------------------------------ splits (core.sharding, "splitting")
    @property
    def split(self) -> Split | None:
        """This shard's part in a split now (``_split.current``): None when it takes part in none or is
        a child whose parent drained; a parent's drained split stays, ``drained``."""
        return _split.current(self._machine)

    def drain_check(self) -> DrainCheck | None:
        """How this shard checks its split's drain (the shell waits ``every`` between checks), or None
        when it is no split's parent still draining."""
        return _split.drain_check(self._machine)

    def drain(self, check: DrainCheck, now: datetime) -> Decision[list[int]]:
        """One drain check of a split's parent, its progress kept in the state: ``value``, the children
        to tell that it has drained (once, when it has; they ask it before they believe it)."""
        return self._decide(_split.drain(self._machine, check, now))

    # ------------------------------------------------------------------ growth (scale.grow_at, _growth)
    def growth(self) -> dict[str, Any] | None:
        """Shard 0 of an activation that grows itself: each shard's fill as last measured and the next
        automatic step, in words (None: it does not grow by itself, or this is not shard 0)."""
        return _growth.summary(self._machine)

    def shards_measured(self, fills: list[ShardFill], now: datetime) -> Decision[None]:
        """Every shard answered how full it is: a growth (``GrowShards``, in the operator log with its
        reason) when the fullest has passed ``grow_at`` and nothing stands in the way."""
        _growth.measured(self._machine, fills, now)
        return self._decide(None)

    def measure_failed(self, error: str, now: datetime) -> Decision[None]:
        """The shards could not be asked: asked again at the next check."""
        _growth.measure_failed(self._machine, error, now)
        return self._decide(None)

    def growth_refused(self, to: int, why: str, now: datetime) -> Decision[None]:
        """The split of a growth to ``to`` shards could not be made now (recorded; measured again later)."""
        _growth.refused(self._machine, to, why, now)
        return self._decide(None)

    def split_parent_drained(self) -> Decision[None]:
        """A split's child: its parent confirmed (asked, not told) that it has drained."""
        _split.parent_drained(self._machine)
        return self._decide(None)

    def lanes_summary(self) -> dict[str, int | None] | None:
        """This shard's part in moving queue keys and batch partitions at a split (None: none now)."""
        state = self._machine.state
        if state.lanes_awaited is None and not (state.lanes_held or state.lanes_busy or state.lanes_waiting):
            return None
        return {"awaiting_parent": state.lanes_awaited, "held": len(state.lanes_held),
                "handed_over": len(state.lanes_busy), "batches_waiting": len(state.lanes_waiting)}

    def lanes_noticed(self, notice: LaneNotice, now: datetime) -> Decision[None]:
        """A split's parent said which moved queue keys still have events there (``handover``) or no
        longer have (``free``): the keys it releases start their first runs (core/engine/_lanes.py)."""
        self._machine.lanes_noticed(notice, now)
        return self._decide(None)

    def note_forwarded(self) -> Decision[None]:
        """A delivery signalled to this shard was passed to the shard that takes it (core.sharding)."""
        self._machine.count("forwarded")
        return self._decide(None)

    def unencoded_refusal(self, what: str) -> str | None:
        """Why ``what``, arrived without the team's payload codec, is refused before anything is
        recorded (an update's validator; ``core.unencoded``), or None when it would be taken."""
        return _intake.unencoded_refusal(self._machine.spec, what)

    def unencoded(self, what: str, now: datetime, *, entry: str | None = None,
                  delivery_id: str | None = None) -> Decision[str | None]:
        """``what`` arrived without the team's payload codec (``core.unencoded``): ``value`` is the answer
        that refuses it, or None when it is taken; refused or taken under ``record``, it is recorded as
        an initiation error (a refused one without its entry, id or anything else of its payload)."""
        return self._decide(_intake.unencoded(self._machine, what, now, entry=entry, delivery_id=delivery_id))

    def undecodable(self, problem: str, now: datetime) -> Decision[DeliveryResult]:
        """A delivery whose argument could not be decoded: ``invalid``, recorded without identity."""
        return self._decide(_intake.undecodable(self._machine, problem, now))

    def subscribe(self, request: SubscribeRequest, now: datetime, *, refuse_sharded: bool = False) -> Decision[None]:
        """A run waits for an event of one of this activation's entries (INIT-8). ``refuse_sharded``:
        as runs begun before sharded waits were served, refuse one for a sharded external entry."""
        if not _deactivate.refuse_subscription(self._machine, request, now):
            _subscriptions.subscribe(self._machine, request, now, refuse_sharded=refuse_sharded)
        return self._decide(None)

    def unsubscribe(self, request: UnsubscribeRequest, now: datetime) -> Decision[None]:
        _subscriptions.unsubscribe(self._machine, request, now)
        return self._decide(None)

    def refuse_lifecycle(self, event: LifecycleEvent, now: datetime) -> Decision[bool]:
        """While deactivated, refuse a lifecycle event (``value`` True); else change nothing."""
        return self._decide(_deactivate.refuse_lifecycle(self._machine, event, now))

    def route_lifecycle(self, event: LifecycleEvent, now: datetime) -> Decision[list[DeliveryResult]]:
        """A lifecycle event of another run, to the entries watching its workflow (COMP-3)."""
        return self._decide(_subscriptions.route_lifecycle(self._machine, event, now))

    def command_done(self, key: str, error: str | None, now: datetime) -> Decision[None]:
        """The shell ran a kept command (signal, publish) with this outcome."""
        _subscriptions.command_done(self._machine, key, error, now)
        return self._decide(None)

    # ------------------------------------------------------------------ runs and polls
    def run_started(self, run_key: str, temporal_run_id: str | None, now: datetime, *,
                    published: bool = False) -> Decision[None]:
        """The start activity started the run (or found it running); ``published``: it also
        published the run's ``workflow.started`` event, so nothing is kept for it."""
        self._machine.run_started(run_key, temporal_run_id, now, published=published)
        return self._decide(None)

    def run_start_failed(self, run_key: str, error: str, now: datetime) -> Decision[None]:
        """A run that can never be started: a start fault of its events, its slot released."""
        self._machine.run_start_failed(run_key, error, now)
        return self._decide(None)

    def run_finished(self, run_key: str, status: str, now: datetime, *, published: bool = False) -> Decision[None]:
        """A run reached a terminal outcome (TRIG-14, EXT-5); ``published``: the watch that learned
        it also published its lifecycle event, so nothing is kept for it."""
        self._machine.run_finished(run_key, status, now, published=published)
        return self._decide(None)

    def poll_succeeded(self, entry: str, seq_no: int, version: int, result: _poll.PollResultIn,
                       now: datetime) -> Decision[None]:
        _poll.poll_succeeded(self._machine, entry, seq_no, version, result, now)
        return self._decide(None)

    def poll_failed(self, entry: str, seq_no: int, error: str, now: datetime, *,
                    retry_after: timedelta | None = None) -> Decision[None]:
        """A poll failed; ``retry_after``: the source asked to wait at least this long (HTTP 429 / 503)."""
        _poll.poll_failed(self._machine, entry, seq_no, error, now, retry_after)
        return self._decide(None)

    # ------------------------------------------------------------------ operators
    def operate(self, request: operator.AnyRequest, now: datetime, *,
                poll_now_survives_flight: bool = True) -> Decision[OperatorOutcome]:
        """One operator action. ``poll_now_survives_flight=False`` replays a build where poll_now
        during a poll in flight was dropped."""
        self._machine.poll_now_survives_flight = poll_now_survives_flight
        return self._decide(operator.apply(self._machine, request, now))

    def deactivate(self, request: _deactivate.Request, now: datetime) -> Decision[_deactivate.Outcome]:
        """Apply (or escalate) a deactivation (docs/lifecycle.md)."""
        return self._decide(_deactivate.deactivate(self._machine, request, now))

    def runs_controlled(self, run_keys: list[str], results: list[str]) -> Decision[None]:
        """A control activity answered ``results`` (``applied`` / ``not applied: ...``) for ``run_keys``."""
        _deactivate.controlled(self._machine, run_keys, results)
        return self._decide(None)

    def finish_deactivation(self, now: datetime) -> Decision[dict[str, Any]]:
        """Mark a settled deactivation complete; ``value`` is its record for the workflow's result."""
        return self._decide(_deactivate.finish(self._machine, now))

