"""Layer 3 of the engine: the acceptance pipeline of one event (external delivery, poll item, occurrence).

validate payload -> dedup by identity -> cycle guard -> subscriptions -> ``when`` -> ``queue_by`` /
``partition_by`` / the throttle's ``key`` -> ``into`` -> batch, or overlap and admission (INIT-6). Every step's outcome is a
:class:`Disposition`, recorded in the ledger. The sources above (schedule, poll, subscriptions)
feed their events in here; everything below is called down to.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import jsonschema

from wf_initiation.errors import UnknownEntry

from .. import schedule
from .._expr import Evaluator, ExpressionFault
from ..activation import ActivationSpec, EntrySpec
from ..limits import clip, retained_id
from ..runinput import Causation
from ..sharding import activation_wide, event_lane, shard_of
from . import _batch, _intake, _kept, _offer
from ._inputs import run_input
from ._keys import digest_and_size, event_key, identity, run_ident
from ._runs import Runs
from ._throttle import stored_key
from ._types import (
    NO_INTAKE,
    ROUTED_TO,
    DeliveryResult,
    Disposition,
    EngineState,
    EventRecord,
    Intake,
    KeptEvent,
    Outcome,
    RunRecord,
    SignalRef,
)


class Pipeline(Runs):
    """Runs and ledger plus the acceptance of events into them."""

    def __init__(self, spec: ActivationSpec, state: EngineState):
        super().__init__(spec, state)
        self._eval = Evaluator()
        self._validators: dict[str, jsonschema.protocols.Validator] = {}
        self._schedules: dict[str, schedule.ScheduleSpec] = {}
        self.zones: dict[str, Any] = {}  # time zones by name, loaded once (_schedule.local_iso)
        self.due_times: dict[tuple[str, str, datetime], datetime] = {}  # jittered occurrences (_schedule.due_at)
        self._legacy_schedules = False

    def use_legacy_evaluation(self) -> None:
        """Evaluate expressions and schedules as activations of a spec before evaluation 2
        (``ActivationSpec.evaluation``) did, to replay their histories (``Evaluator(legacy=True)``,
        ``ScheduleSpec.legacy``)."""
        self._eval = Evaluator(legacy=True)
        self._legacy_schedules = True
        self._schedules.clear()

    def parsed_schedule(self, name: str) -> schedule.ScheduleSpec:
        parsed = self._schedules.get(name)
        if parsed is None:
            parsed = schedule.parse_schedule(self.entry(name).config, legacy=self._legacy_schedules)
            self._schedules[name] = parsed
        return parsed

    def rebound(self, spec: ActivationSpec) -> None:
        """A new binding: what was parsed for the previous one is parsed again."""
        self.spec = spec
        self._validators.clear()
        self._schedules.clear()
        self.due_times.clear()

    def validate_payload(self, entry: EntrySpec, payload: Any) -> str | None:
        """None when the payload satisfies the manifest's schema, else a message (EXT-2)."""
        validator = self._validators.get(entry.name)
        if validator is None:
            validator = jsonschema.Draft202012Validator(entry.payload_schema, format_checker=jsonschema.FormatChecker())
            self._validators[entry.name] = validator
        errors = sorted(validator.iter_errors(payload), key=lambda e: list(map(str, e.absolute_path)))
        if not errors:
            return None
        return listed_problems([("/".join(str(p) for p in e.absolute_path) or "payload", e.message) for e in errors])

    def resolve_entry(self, name: str | None) -> EntrySpec:
        """The external entry a delivery targets; :class:`UnknownEntry` names the choices."""
        candidates = [e for e in self.spec.entries if e.kind == "external"]
        names = ", ".join(e.name for e in candidates) or "none"
        if name is None:
            if len(candidates) == 1:
                return candidates[0]
            raise UnknownEntry(f"name the trigger entry: this activation's external entries are {names}")
        found = self.spec.entry(name)
        if found is None or found.kind != "external":
            raise UnknownEntry(f"no external trigger entry {name!r}; this activation's external entries are {names}")
        return found

    # ------------------------------------------------------------------ deliveries
    def deliver(self, entry_name: str | None, payload: Any, now: datetime, *, intake: Intake = NO_INTAKE) -> DeliveryResult | None:
        """One external delivery (EXT-1..13). The result is durable once the workflow task ends; None
        only for a delivery that may wait (:meth:`offer_event`), which is then not counted yet."""
        try:
            entry = self.resolve_entry(entry_name)
        except UnknownEntry as exc:
            self.count("deliveries")
            self.count("refused_unknown_entry")
            return DeliveryResult(entry=entry_name, delivery_id=None, disposition=Disposition.INVALID,
                                  message=str(exc), activation_id=self.spec.activation_id)
        result = self.offer_event(entry, payload, now, intake=intake)
        if result is not None:
            self.count("deliveries")
            if result.disposition is Disposition.INVALID and self.keeps_for_redrive:
                self.keep_payload("invalid", entry, payload, result.delivery_id, result.message or "invalid", now)
        return result

    def keep_payload(self, kind: Literal["invalid", "quarantined"], entry: EntrySpec, payload: Any,
                     delivery_id: str | None, reason: str, now: datetime) -> None:
        """Keep an event that did not run with its payload, for a re-drive once its cause is fixed
        (``_kept``): only a payload within the intake limits (one past them can never pass them, so
        there is nothing to offer again: the manifest's schema is what a fix can change)."""
        if _intake.payload_problem(self, payload, identity(entry, payload)) is not None:
            return
        digest, size = digest_and_size(payload)
        if _intake.size_problem(self, size) is not None:
            return
        _kept.keep(self.state, KeptEvent(number=_kept.next_number(self.state), kind=kind, entry=entry.name,
                                         delivery_id=delivery_id, digest=digest, size=size, at=now,
                                         reason=clip(reason) or kind, payload=payload))

    def deliver_event(self, entry: EntrySpec, payload: Any, now: datetime, *, intake: Intake = NO_INTAKE) -> DeliveryResult:
        """One event of any entry: validated, deduplicated, then accepted (or not)."""
        result = self.offer_event(entry, payload, now, intake=intake)
        assert result is not None  # only an event that may wait is not taken
        return result

    def offer_event(self, entry: EntrySpec, payload: Any, now: datetime, *, intake: Intake = NO_INTAKE) -> DeliveryResult | None:
        """:meth:`deliver_event`, or None when ``intake.may_wait`` and only the held-bytes budget would
        defer the event: then nothing is recorded and the event is offered again later."""
        delivery_id = identity(entry, payload)
        problem = _intake.payload_problem(self, payload, delivery_id) or self.validate_payload(entry, payload)
        if problem is not None:
            return self.invalid(entry, delivery_id, problem, now)
        assert delivery_id is not None  # the schema requires it (manifest contract)
        key = event_key(entry.name, delivery_id)
        digest, size = digest_and_size(payload)
        too_large = _intake.size_problem(self, size)
        if too_large is not None:
            return self.invalid(entry, delivery_id, too_large, now)
        existing = self.lookup(key) or intake.prior
        if existing is not None and not (intake.lane and existing.disposition is Disposition.ROUTED
                                         and _same(existing, digest)):
            return self._repeat(entry, payload, existing, delivery_id, digest, now)
        full = intake.defer_new is None and _intake.capacity_reason(self, size, now)  # lasting: ids expire in hours
        deferred = intake.defer_new or full or None
        if deferred is None:
            deferred = _intake.defer_reason(self, size)
            if deferred is not None and intake.may_wait and self.carry_blocked is None:
                return None  # held payloads: room comes as runs start; the shell keeps the event waiting
        if deferred is not None:
            # At capacity every new id is deferred for hours: counted, not each recorded (one
            # capacity_reached error says so), so the error list keeps what else happened.
            ref = None if intake.run_id is None else SignalRef(entry=entry.name, delivery_id=delivery_id, digest=digest,
                                                               size=size, run_id=intake.run_id, at=now)
            return _intake.deferred(self, entry, delivery_id, deferred, now, signalled=intake.signalled, quiet=bool(full),
                                    ref=ref)
        if self.state.signals_deferred:
            self.state.signals_deferred.pop(key, None)  # a deferred signal's id delivered again: disposed now
        outcome = self.accept(entry, payload, key, digest, now, delivery_id=delivery_id, size=size, laned=intake.lane)
        if outcome.disposition is Disposition.ROUTED:
            return self._routed(entry, payload, delivery_id, outcome.detail)
        return DeliveryResult(entry=entry.name, delivery_id=delivery_id, disposition=outcome.disposition,
                              run_key=outcome.run_key, message=outcome.detail, activation_id=self.spec.activation_id)

    def invalid(self, entry: EntrySpec, delivery_id: str | None, problem: str, now: datetime) -> DeliveryResult:
        """EXT-9/10: no run, not suppression, identity left unconsumed; recorded when identifiable.
        What is kept and returned is bounded: an over-long id as its digest, the message cut."""
        self.count("invalid")
        kept = retained_id(delivery_id)
        ident = f"delivery {kept!r}" if kept else "a delivery without a usable delivery id"
        self.record_error(now, "invalid", f"{ident} failed validation: {problem}", entry.name, kept)
        return DeliveryResult(entry=entry.name, delivery_id=kept, disposition=Disposition.INVALID,
                              message=clip(problem), activation_id=self.spec.activation_id)

    def _repeat(self, entry: EntrySpec, payload: Any, existing: EventRecord, delivery_id: str, digest: str,
                now: datetime) -> DeliveryResult:
        if _same(existing, digest):
            if existing.disposition is Disposition.ROUTED:  # the lane answers it (a retry after the first was lost)
                return self._routed(entry, payload, delivery_id, existing.detail)
            self.count("duplicates")
            return DeliveryResult(entry=entry.name, delivery_id=delivery_id, disposition=Disposition.DUPLICATE,
                                  run_key=existing.run_key, retained=existing.disposition,
                                  activation_id=self.spec.activation_id)
        self.count("conflicts")
        message = (f"delivery {delivery_id!r} was accepted with a different payload at "
                   f"{existing.accepted_at.isoformat()}; the first payload stands (EXT-3, EXT-4)")
        self.record_error(now, "conflict", message, entry.name, delivery_id)
        return DeliveryResult(entry=entry.name, delivery_id=delivery_id, disposition=Disposition.CONFLICT,
                              run_key=existing.run_key, retained=existing.disposition, message=message,
                              activation_id=self.spec.activation_id)

    # ------------------------------------------------------------------ lanes (core.sharding)
    def lane(self, entry: EntrySpec, payload: Any) -> int | None:
        """The shard that takes an admitted event of ``entry`` with ``payload`` (core.sharding.event_lane;
        None: this one, the id's); computed again for a repeat (a routed entry keeps only the digest)."""
        if self.spec.shards <= 1 or entry.kind != "external" or not (entry.queue_by or entry.batch
                                                                     or activation_wide(self.spec)):
            return None
        scope = {entry.name: payload, "inputs": self.spec.inputs}
        queue_key = self._eval.key(entry.queue_by, scope) if entry.queue_by else None
        partition = self._eval.key(entry.batch.partition_by, scope) if entry.batch and entry.batch.partition_by else None
        return event_lane(self.spec, entry, queue_key, partition)

    def _home_unless_keyed(self, entry: EntrySpec, delivery_id: str | None) -> int | None:
        """For an event routed here by another shard: its id's shard when that is not this one and its
        entry orders no events by key (only a subscription copy's match routes such an event, to
        shard 0, core.engine._offer); None when this shard may take it."""
        home = shard_of(entry.name, delivery_id, self.spec.shards)
        if home == self.spec.shard or entry.kind != "external" or entry.queue_by or entry.batch \
                or activation_wide(self.spec):
            return None
        return home

    def _routed(self, entry: EntrySpec, payload: Any, delivery_id: str, detail: str | None) -> DeliveryResult:
        """The answer for an id this shard took and another shard takes: where to send it (named by
        the routed record's detail, else computed again from the payload: a retired record keeps only
        the digest)."""
        named = (detail or "").removeprefix(ROUTED_TO)
        try:
            lane = int(named) if named.isdigit() else self.lane(entry, payload)
        except ExpressionFault:
            lane = None  # a re-activation changed queue_by: the first routing stands
        if lane is None:  # nowhere to send it: what this shard holds is the answer
            self.count("duplicates")
            return DeliveryResult(entry=entry.name, delivery_id=delivery_id, disposition=Disposition.DUPLICATE,
                                  retained=Disposition.ROUTED, activation_id=self.spec.activation_id)
        return DeliveryResult(entry=entry.name, delivery_id=delivery_id, disposition=Disposition.ROUTED, shard=lane,
                              message=f"shard {lane} orders the events of its queue key: it takes this one "
                              "(WfiClient sends it on)", activation_id=self.spec.activation_id)

    # ------------------------------------------------------------------ acceptance
    def accept(
        self, entry: EntrySpec, payload: Any, key: str, digest: str, now: datetime, *,
        delivery_id: str | None = None, scheduled_at: str | None = None, ident: str | None = None,
        size: int = 0, offer: bool = True, laned: bool = False,
    ) -> Outcome:
        """Admit a validated, new event: guard, key, projection, overlap, batch/queue (INIT-6).

        ``offer=False``: not to subscriptions (an event released after its subscriber was gone).
        ``laned``: routed here by its id's shard (``Intake.lane``)."""
        retain = _Retain(self, entry, key, digest, delivery_id, now)
        causation, refused = self._causation(entry, payload)
        if refused:
            return retain(Disposition.REFUSED, refused, kind="refused")
        # A lane's event was offered to the subscriptions where its id was judged (core.engine._offer).
        offered = offer and not (laned and self.spec.shard != 0)
        delivered = _offer.offer(self, entry, payload, key, digest, delivery_id, now) if offered else None
        if delivered is not None:
            if delivered.disposition is Disposition.ROUTED:  # a replica matched: shard 0 selects (_offer)
                self.count("routed")
                return retain(Disposition.ROUTED, delivered.detail)
            return delivered
        home = self._home_unless_keyed(entry, delivery_id) if laned else None
        if home is not None:  # shard 0 takes another shard's event only for a subscription (core.routing)
            self.count("routed")
            return Outcome(Disposition.ROUTED, None, f"{ROUTED_TO}{home}")
        scope = {entry.name: payload, "inputs": self.spec.inputs}
        try:
            if entry.when and not self._eval.guard(entry.when, scope):
                self.count("suppressed")
                return retain(Disposition.SUPPRESSED, None)
        except ExpressionFault as exc:
            return retain(Disposition.GUARD_FAULT, str(exc), kind="guard_fault")
        throttle = self.spec.policies.throttle
        try:
            queue_key = self._eval.key(entry.queue_by, scope) if entry.queue_by else None
            partition = self._eval.key(entry.batch.partition_by, scope) if entry.batch and entry.batch.partition_by else None
            # The throttle's key: evaluated like queue_by, over this event (a fault is a key fault, TRIG-13).
            throttle_key = stored_key(self._eval.key(throttle.key, scope)) if throttle is not None and throttle.key else None
        except ExpressionFault as exc:
            return retain(Disposition.KEY_FAULT, str(exc), kind="key_fault")
        lane = event_lane(self.spec, entry, queue_key, partition)
        # Its key's shard takes it, with the routing (WfiClient sends it on, also when that is this
        # shard: then every event of a deliver_many reaches its key's queue in the order given).
        if lane is not None and not (laned and lane == self.spec.shard):
            self.count("routed")
            return retain(Disposition.ROUTED, f"{ROUTED_TO}{lane}")
        try:
            into = self._eval.render_tree(entry.into, scope) if entry.into else {}
        except ExpressionFault as exc:
            return retain(Disposition.PROJECTION_FAULT, str(exc), kind="projection_fault")
        if entry.batch:
            return _batch.add(self, entry, payload, key, digest, now, partition=partition or "", into=into,
                              delivery_id=delivery_id, scheduled_at=scheduled_at, size=size, throttle_key=throttle_key)
        if self.overlap_skips():
            self.count("skipped")
            return retain(Disposition.SKIPPED, None)
        run_key = f"{self.spec.activation_id}/{entry.name}/{run_ident(ident or delivery_id or key)}"
        made = run_input(self.spec, entry, payload, into, run_key, [delivery_id] if delivery_id else [], scheduled_at,
                         now, causation)
        run = RunRecord(run_key=run_key, entry=entry.name, queue_key=queue_key, input=made, event_keys=[key],
                        accepted_at=now, activation_id=self.spec.activation_id, scheduled_at=scheduled_at,
                        input_bytes=size, throttle_key=throttle_key)
        return retain(self.admit(run, now), None, run_key=run_key)

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


def _same(existing: EventRecord, digest: str) -> bool:
    """Whether a payload of ``digest`` is the one a dedup entry holds (a retired entry keeps a prefix)."""
    return existing.digest == digest or (existing.detail == "retired" and digest.startswith(existing.digest))


class _Retain:
    """Records one event's disposition in the ledger and answers it as an :class:`Outcome`."""

    __slots__ = ("ledger", "entry", "key", "digest", "delivery_id", "now")

    def __init__(self, ledger: Runs, entry: EntrySpec, key: str, digest: str, delivery_id: str | None, now: datetime):
        self.ledger, self.entry, self.key, self.digest, self.delivery_id, self.now = ledger, entry, key, digest, delivery_id, now

    def __call__(self, disposition: Disposition, detail: str | None, *, run_key: str | None = None,
                 kind: str | None = None) -> Outcome:
        self.ledger.retain(self.entry, self.key, self.digest, self.delivery_id, disposition, self.now, detail,
                           run_key=run_key, kind=kind)
        return Outcome(disposition, run_key, detail)


LISTED_PROBLEM_CHARS = 400  # the list within the recorded message's bound (MAX_MESSAGE_CHARS), the id before it
MIN_PROBLEM_CHARS = 60


def listed_problems(problems: list[tuple[str, str]], budget: int = LISTED_PROBLEM_CHARS) -> str:
    """Every schema problem as ``where: message``, ``; ``-separated, so a sender fixes them all at
    once: each message cut (in its middle, where a quoted value is) to its share of ``budget``; the
    problems that do not fit even so are named by where they are."""
    if len(problems) == 1:
        where, message = problems[0]
        return f"{where}: {message}"
    head = f"{len(problems)} problems: "
    share = max(MIN_PROBLEM_CHARS, (budget - len(head)) // len(problems) - 2)
    parts: list[str] = []
    used = len(head)
    for i, (where, message) in enumerate(problems):
        part = f"{where}: {_cut_middle(message, max(share - len(where) - 2, 20))}"
        if parts and used + len(part) > budget:
            parts.append(f"and {len(problems) - i} more at " + ", ".join(w for w, _ in problems[i:]))
            break
        parts.append(part)
        used += len(part) + 2
    return head + "; ".join(parts)


def _cut_middle(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    keep = (limit - 1) // 2
    return f"{text[:keep]}…{text[len(text) - (limit - 1 - keep):]}"
