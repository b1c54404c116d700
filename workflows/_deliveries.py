"""The activation's handlers for what outsiders send: deliveries (updates and signals), lifecycle
events of other runs, and subscriptions of waiting runs (a mixin of ``ActivationWorkflow``).

Arguments anyone with a Temporal client can send arrive raw and are decoded here (``_decode``): an
undecodable one is recorded (``invalid``) or refused, never a dropped signal or a failed workflow
task. A delivery that reached the worker without the team's payload codec is refused (an update by
its validator, before anything is recorded; a signal recorded as refused, not taken) or recorded, as
the deployment's ``temporal.unencoded`` says (the engine decides, ``core.unencoded``). Deliveries share the workflow task's budget through the inbox (``_inbox``; the tickets of
``_admission`` for runs begun before it) and are taken in arrival order. With the budgets
(``Compat.bounded``) a failure the input caused fails only its update, or is recorded for a signal.
What the router says of a delivery this shard does not take is acted on in ``_verdicts``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar, cast

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from wf_initiation._trace_context import current_carrier
    from wf_initiation.core.activation import ActivationSpec
    from wf_initiation.core.engine import (
        Decision,
        DeliveryResult,
        Disposition,
        Engine,
        LifecycleEvent,
        SubscribeRequest,
        UnsubscribeRequest,
    )
    from wf_initiation.core.limits import KIB, MAX_BULK_BYTES, MAX_DELIVERY_BYTES, MIB
    from wf_initiation.core.routing import Verdict, lane_route
    from wf_initiation.wire import (
        DELIVER_MANY_UPDATE,
        DELIVER_SIGNAL,
        DELIVER_UPDATE,
        HANDLER_FAILED,
        INVALID_ARGUMENT,
        LIFECYCLE_SIGNAL,
        MAX_BULK,
        REBINDING,
        SUBSCRIBE_SIGNAL,
        UNENCODED,
        UNSUBSCRIBE_SIGNAL,
        DeliveryRequest,
        LaneClaim,
    )

    from ._admission import TicketAdmission
    from ._compat import RunCompat
    from ._decode import Undecodable, decode, unencoded
    from ._inbox import Inbox, Turn
    from ._tasks import Tasks
    from ._telemetry import ActivationTelemetry
    from ._verdicts import VerdictHandlers

R = TypeVar("R")
NO_PRESSURE = Turn(signals_waiting=False, may_wait=False)  # runs begun before the inbox
WAIT = object()
TAKEN = object()
SIGNALS_AHEAD = ("signalled deliveries are waiting ahead of it for room in the activation's held-bytes budget; "
                 "deliver it again later")
ENVELOPE = 4 * KIB  # a request's own fields around its payload(s)
# What a refusal or record of a delivery arrived without the team's codec calls it (core.unencoded).
WHAT = {DELIVER_UPDATE: f"a {DELIVER_UPDATE} update", DELIVER_MANY_UPDATE: f"a {DELIVER_MANY_UPDATE} update",
        DELIVER_SIGNAL: f"a {DELIVER_SIGNAL} signal"}
SIGNAL_ERRORS = (ValueError, TypeError, KeyError, IndexError, ArithmeticError, RecursionError, UnicodeError)


class DeliveryHandlers(VerdictHandlers):
    """Handlers of ``ActivationWorkflow``; the state they use is the workflow's."""

    _engine: Engine
    _inbox: Inbox | None  # None: a run begun before the inbox (its handlers take tickets)
    _tickets: TicketAdmission
    _tasks: Tasks
    _telemetry: ActivationTelemetry
    _pending_spec: Any
    _carrying: bool  # the run is continuing as new (waiting for its handlers and inbox to settle)
    _signals: int
    _forwarding: int
    _validated: dict[str, Any]  # update id -> what its validator decoded (or why it could not)
    _compat: RunCompat
    _spec: ActivationSpec  # the whole binding (the engine has this shard's part)
    _shard: int
    _absorb: Callable[[Decision[Any]], Any]
    _poke: Callable[[], None]
    _now: Callable[[], datetime]

    @workflow.update(name=DELIVER_UPDATE)
    async def deliver(self, request: RawValue) -> DeliveryResult:
        try:
            decoded = self._validated_value(lambda: decode(
                request, DeliveryRequest, max_bytes=self._max_bytes(MAX_DELIVERY_BYTES), what="the delivery"))
        except Undecodable as exc:
            return self._absorb(self._engine.undecodable(str(exc), self._now()))
        self._take_unencoded(request, DELIVER_UPDATE, [decoded])
        [decoded] = await self._parent_answered([decoded])
        take = self._bulk_item(decoded, DELIVER_UPDATE)
        if self._inbox is not None:
            [result] = await self._inbox.wait([self._inbox.offer(take, waited=True)])
        else:
            await self._tickets.admit(1)
            result = take(NO_PRESSURE)
        self._telemetry.delivered(self._engine, [result], current_carrier())
        self._poke()
        return result

    @deliver.validator
    def _validate_deliver(self, request: RawValue) -> None:
        self._refuse_while_rebinding()
        self._refuse_unencoded(request, DELIVER_UPDATE)
        limit = self._max_bytes(MAX_DELIVERY_BYTES)
        if isinstance(request, RawValue) and len(request.payload.data) > limit:
            raise ValueError(f"the delivery is {len(request.payload.data)} bytes; the limit is {limit}: send a "
                             "reference (URL, object key) instead of the content")
        try:
            decoded = decode(request, DeliveryRequest, max_bytes=None, what="the delivery")  # measured just above
        except Undecodable as exc:
            self._keep_validated(exc)  # the handler records it as invalid
            return
        if self._spec.shards > 1:
            self._refuse_misrouted([decoded])
        self._keep_validated(decoded)

    @workflow.update(name=DELIVER_MANY_UPDATE)
    async def deliver_many(self, requests: RawValue) -> list[DeliveryResult]:
        try:
            decoded = self._validated_value(lambda: self._decode_many(requests))
        except Undecodable as exc:  # the validator refused it; only a replay without validators gets here
            raise ApplicationError(str(exc), type=INVALID_ARGUMENT, non_retryable=True) from None
        self._take_unencoded(requests, DELIVER_MANY_UPDATE, decoded)
        decoded = await self._parent_answered(decoded)
        results: list[DeliveryResult] = []
        if self._inbox is not None:
            inbox = self._inbox
            results = await inbox.wait([inbox.offer(self._bulk_item(r, DELIVER_MANY_UPDATE), waited=True) for r in decoded])
        while len(results) < len(decoded):  # tickets: in slices, when this task's budget of deliveries runs out
            granted = await self._tickets.admit(len(decoded) - len(results))
            results += self._update_safely(DELIVER_MANY_UPDATE, self._slice(decoded[len(results):len(results) + granted]))
        self._telemetry.delivered(self._engine, results, current_carrier())
        self._poke()
        return results

    @deliver_many.validator
    def _validate_deliver_many(self, requests: RawValue) -> None:
        self._refuse_while_rebinding()
        self._refuse_unencoded(requests, DELIVER_MANY_UPDATE)
        try:
            decoded = self._decode_many(requests)
        except Undecodable as exc:
            raise ValueError(str(exc)) from None
        if len(decoded) > MAX_BULK:
            raise ValueError(f"at most {MAX_BULK} deliveries per deliver_many update; split the batch")
        if self._spec.shards > 1:
            self._refuse_misrouted(decoded)
        self._keep_validated(decoded)

    # An update's argument is measured and decoded once, by its validator, which hands the handler what
    # it decoded (the handler runs right after it, in the same workflow task). On replay no validator
    # runs, and the handler decodes the argument itself, to the same value.
    def _keep_validated(self, value: Any) -> None:
        info = workflow.current_update_info()
        if info is not None:
            self._validated[info.id] = value

    def _validated_value(self, decode_here: Callable[[], R]) -> R:
        info = workflow.current_update_info()
        value = self._validated.pop(info.id, None) if info is not None else None
        if value is None:
            return decode_here()
        if isinstance(value, Undecodable):
            raise value
        return cast(R, value)

    @workflow.signal(name=DELIVER_SIGNAL)
    async def deliver_signal(self, request: RawValue) -> None:
        self._signals += 1
        decoded: DeliveryRequest | None = None
        try:
            decoded = decode(request, DeliveryRequest, max_bytes=self._max_bytes(MAX_DELIVERY_BYTES), what="the delivery")
        except Undecodable as exc:
            problem = str(exc)
        if self._unencoded_refusal(request, DELIVER_SIGNAL, [decoded] if decoded is not None else []) is not None:
            decoded = None  # recorded as refused, nothing of it kept: the sender was told it is durable
        elif decoded is None:
            self._absorb(self._engine.undecodable(problem, self._now()))  # recorded: the sender was told it is durable
        if decoded is not None:
            verdict = self._route(decoded)
            if verdict.verdict in (Verdict.TAKE, Verdict.ASK_PARENT) and self._asks_parent([decoded]):
                answered = await self._with_parent_answers([decoded])  # asked here, not bounced off the parent
                if isinstance(answered, str):
                    self._defer_unanswered(decoded, answered)
                    self._poke()
                    return
                [decoded] = answered
            elif verdict.verdict is not Verdict.TAKE:
                self._act_on(verdict, decoded)
                self._poke()
                return
            carrier = current_carrier()
            if self._inbox is not None:
                size = len(request.payload.data) if isinstance(request, RawValue) else 0
                origin = workflow.info().run_id  # its history holds the signal (a kept one's reference)
                self._inbox.offer(lambda turn: self._take_signalled(decoded, carrier, turn, origin), waited=False, size=size,
                                  kept=(decoded, origin))
            else:
                await self._tickets.admit(1)
                self._take_signalled(decoded, carrier, NO_PRESSURE)
        self._poke()

    @workflow.signal(name=SUBSCRIBE_SIGNAL)
    async def subscribe(self, request: RawValue) -> None:
        """A run waits for an event of one of this activation's entries (INIT-8); a copy of shard 0's
        subscription is registered on another shard once shard 0 confirms it is its own."""
        self._signals += 1
        decoded = self._decode_signal(request, SubscribeRequest, "subscribe")
        if decoded is not None:
            entry = self._spec.entry(decoded.entry)
            refuse = (self._spec.shards > 1 and self._shard == 0 and entry is not None and entry.kind == "external"
                      and not decoded.replica and not self._compat.sharded_waits())  # a run begun before they were served

            def apply() -> None:
                self._signal_safely("subscribe", lambda: self._absorb(self._engine.subscribe(decoded, self._now(),
                                                                                             refuse_sharded=refuse)))
                self._poke()

            if decoded.replica and self._copy_checked("subscribe", decoded.sub_id):
                await self._apply_copy("subscribe", decoded.sub_id, apply)
            else:
                apply()
        self._poke()

    @workflow.signal(name=UNSUBSCRIBE_SIGNAL)
    async def unsubscribe(self, request: RawValue) -> None:
        self._signals += 1
        decoded = self._decode_signal(request, UnsubscribeRequest, "unsubscribe")
        if decoded is not None:
            def apply() -> None:
                self._signal_safely("unsubscribe", lambda: self._absorb(self._engine.unsubscribe(decoded, self._now())))
                self._poke()

            if self._engine.holds_copy(decoded.sub_id).value and self._copy_checked("unsubscribe", decoded.sub_id):
                await self._apply_copy("unsubscribe", decoded.sub_id, apply)
            else:
                apply()
        self._poke()

    @workflow.signal(name=LIFECYCLE_SIGNAL)
    async def lifecycle_event(self, event: RawValue) -> None:
        """A lifecycle event of another run, routed to the entries watching its workflow (COMP-3)."""
        self._signals += 1
        decoded = self._decode_signal(event, LifecycleEvent, LIFECYCLE_SIGNAL)
        if decoded is not None and not self._absorb(self._engine.refuse_lifecycle(decoded, self._now())):
            take = lambda turn: self._signal_safely(  # noqa: E731
                LIFECYCLE_SIGNAL, lambda: self._absorb(self._engine.route_lifecycle(decoded, self._now()))) or TAKEN
            if self._inbox is not None:
                self._inbox.offer(take, waited=False)
            else:
                await self._tickets.admit(1)
                take(NO_PRESSURE)
        self._poke()

    # ------------------------------------------------------------------ helpers
    def _deliver_one(self, request: DeliveryRequest, now: datetime | None = None, *,
                     defer_new: str | None = None) -> DeliveryResult:
        """A delivery to the engine, or its refusal while the activation is deactivated (docs/lifecycle.md);
        one claiming a lane it is not for (core.routing, ``FORGED``) is refused and recorded, never taken."""
        if request.lane is not None and self._spec.shards > 1:
            verdict = self._route(request)
            if verdict.verdict is Verdict.FORGED:
                self._refuse_forged(verdict)
                key = self._event_key(request)
                return DeliveryResult(entry=request.entry, delivery_id=key[1] if key else None,
                                      disposition=Disposition.INVALID, message=verdict.reason,
                                      activation_id=self._engine.spec.activation_id)
        return self._absorb(self._engine.deliver(request.entry, request.payload, now or self._now(), defer_new=defer_new,
                                                 prior=self._prior_record(request), lane=self._laned(request)))

    def _slice(self, chunk: list[DeliveryRequest]) -> Callable[[], list[DeliveryResult]]:
        now = self._now()
        return lambda: [self._deliver_one(r, now) for r in chunk]

    def _bulk_item(self, r: DeliveryRequest, name: str) -> Callable[[Turn], DeliveryResult]:
        """An update's delivery, taken when the inbox gets to it (a new id deferred while signals wait ahead)."""
        return lambda turn: self._update_safely(name, lambda: self._deliver_one(
            r, defer_new=SIGNALS_AHEAD if turn.signals_waiting else None))

    def _laned(self, request: DeliveryRequest) -> bool:
        """Whether its id's shard routed ``request`` here, its queue key's shard (core.sharding, lanes)."""
        claim = request.lane
        return claim is not None and claim.shards == self._spec.shards and claim.shard == self._shard

    def _take_signalled(self, decoded: DeliveryRequest, carrier: dict[str, str] | None, turn: Turn,
                        origin: str | None = None) -> object | None:
        """A signalled delivery to the engine: TAKEN, or None to keep it waiting (no room yet). ``origin``:
        the run whose history holds the signal (a deferred one is listed with it)."""
        outcome = self._signal_safely(DELIVER_SIGNAL, lambda: self._absorb(self._engine.take_signal(
            decoded.entry, decoded.payload, self._now(), may_wait=turn.may_wait, prior=self._prior_record(decoded),
            lane=self._laned(decoded), run_id=origin)) or WAIT)
        if outcome is WAIT:
            return None
        if isinstance(outcome, DeliveryResult):
            self._telemetry.delivered(self._engine, [outcome], carrier)
            if outcome.disposition is Disposition.ROUTED and outcome.shard is not None:  # its key's shard takes it
                verdict = lane_route(self._shard, outcome.shard, self._spec.shards)
                assert verdict.claim is not None
                routed = decoded.model_copy(update={"lane": LaneClaim(shards=verdict.claim[0], shard=verdict.claim[1])})
                if verdict.verdict is not Verdict.TAKE:
                    self._act_on(verdict, routed)
                elif not self._laned(decoded):  # its key's queue is this shard's: taken now, with the routing
                    return self._take_signalled(routed, carrier, turn, origin)
        return TAKEN

    def _take_carried(self, request: DeliveryRequest, origin: str) -> Callable[[Turn], object | None]:
        """A signal the previous run left waiting, read back from history (workflows/_carried.py)."""
        return lambda turn: self._take_signalled(request, None, turn, origin)

    def _decode_many(self, requests: Any) -> list[DeliveryRequest]:
        return decode(requests, list[DeliveryRequest], max_bytes=self._max_bytes(MAX_BULK_BYTES),
                      what="the deliver_many argument")

    def _max_bytes(self, limit: int) -> int:
        return limit + ENVELOPE if self._engine.bounded else 64 * MIB

    def _decode_signal(self, raw: Any, kind: type[R], name: str) -> R | None:
        try:
            return decode(raw, kind, max_bytes=self._max_bytes(MAX_DELIVERY_BYTES), what=f"the {name} signal")
        except Undecodable as exc:
            self._absorb(self._engine.record_error(self._now(), "signal_refused", str(exc)))
            return None

    def _update_safely(self, name: str, handle: Callable[[], R]) -> R:
        """An update's work; with the budgets, a failure the input caused fails this update (its caller
        gets the reason), never the workflow task, which would be retried with the same update forever."""
        if not self._engine.bounded:
            return handle()
        try:
            return handle()
        except SIGNAL_ERRORS as exc:
            raise ApplicationError(f"the {name} update could not be handled: {type(exc).__name__}: {exc}",
                                   type=HANDLER_FAILED, non_retryable=True) from None

    def _signal_safely(self, name: str, handle: Callable[[], R]) -> R | None:
        """Run a signal's work and return its result; with the budgets, a failure the input caused is
        recorded (result None), not a failed task retried forever (a signal cannot be refused: its
        sender already had it acknowledged)."""
        if not self._engine.bounded:
            return handle()
        try:
            return handle()
        except SIGNAL_ERRORS as exc:
            self._absorb(self._engine.record_error(self._now(), "signal_failed", f"the {name} signal could not be "
                                                   f"handled: {type(exc).__name__}: {exc}"))
            return None

    def _refuse_unencoded(self, raw: Any, name: str) -> None:
        """An update's validator: refuse a delivery that arrived without the team's codec when the
        activation refuses those (nothing is recorded, and its plaintext never enters history)."""
        refusal = self._engine.unencoded_refusal(WHAT[name]) if unencoded(raw) else None
        if refusal is not None:
            workflow.logger.warning("refused %s that arrived without the team's payload codec (temporal.unencoded: "
                                    "refuse)", WHAT[name])
            raise ApplicationError(refusal, type=UNENCODED, non_retryable=True)

    def _unencoded_refusal(self, raw: Any, name: str, requests: list[DeliveryRequest]) -> str | None:
        """For a delivery that arrived without the team's codec, the engine's answer: the refusal
        (recorded), or None when it is taken (recorded under ``record``, with its entry and id when
        it is one delivery). None for any other delivery."""
        if not unencoded(raw):
            return None
        key = self._event_key(requests[0]) if len(requests) == 1 else None
        return self._absorb(self._engine.unencoded(WHAT[name], self._now(), entry=key[0] if key else None,
                                                   delivery_id=key[1] if key else None))

    def _take_unencoded(self, raw: Any, name: str, requests: list[DeliveryRequest]) -> None:
        """An update's handler: raise the refusal of a delivery that arrived without the team's codec
        (its validator refused it already, unless it was skipped)."""
        refusal = self._unencoded_refusal(raw, name, requests)
        if refusal is not None:
            raise ApplicationError(refusal, type=UNENCODED, non_retryable=True)

    def _refuse_while_rebinding(self) -> None:
        # While the state is too large to carry, the engine defers deliveries itself: refusing them
        # here would only make callers give up.
        if self._engine.carry_blocked is not None:
            return
        if self._pending_spec is not None:
            raise ApplicationError("activation is being replaced; retry the delivery", type=REBINDING)
        if self._carrying:
            # Continue-as-new waits until every handler finished and the inbox is empty: updates let in
            # meanwhile would keep it waiting for as long as senders keep more than a task's budget
            # queued (deliver_many), the run's history and memory growing. Callers retry on the next run.
            raise ApplicationError("the activation is continuing as new; retry the delivery", type=REBINDING)
