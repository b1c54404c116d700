"""Acting on the router's verdicts (core.routing; a mixin of ``ActivationWorkflow``): a delivery this
shard does not take is passed on (a signal: the one place a shard forwards, counted until it has
landed) or refused before anything is recorded (an update: ``Misrouted``, ``ConsultParent``); a
split's child judges an id it does not hold with its parent's own answer (``prior``), which a parent
adds to what it passes on; a lane claim the router cannot verify is refused and recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
    from wf_initiation.core.activation import ActivationSpec
    from wf_initiation.core.engine import EVENT_RECORD, EVENT_RECORD_FIELDS, Decision, Engine, EventRecord, event_key
    from wf_initiation.core.routing import Route, Verdict, delivery_key, external_paths, route
    from wf_initiation.core.sharding import is_child, parent_of
    from wf_initiation.wire import (
        CONSULT_PARENT,
        DELIVER_SIGNAL,
        MAX_BULK,
        MISROUTED,
        REBINDING,
        DeliveryRequest,
        PriorEntry,
        shard_workflow_id,
    )

    from ._splits import SplitHandlers
    from ._tasks import Tasks


class VerdictHandlers(SplitHandlers):
    """Methods of ``ActivationWorkflow``; the state they use is the workflow's."""

    _engine: Engine
    _tasks: Tasks
    _pending_spec: Any
    _forwarding: int
    _spec: ActivationSpec  # the whole binding (the engine has this shard's part)
    _shard: int
    _absorb: Callable[[Decision[Any]], Any]
    _now: Callable[[], datetime]
    _signal_safely: Callable[..., Any]

    # ------------------------------------------------------------------ shards (core.sharding)
    def _routing_spec(self) -> ActivationSpec:
        """The spec deliveries are routed by: a re-activation's from the moment it is accepted (a split's
        parent takes no id that moved from then on)."""
        return self._pending_spec or self._spec

    def _route(self, request: DeliveryRequest) -> Route:
        """The router's verdict for ``request`` sent to this shard (core.routing); the shell acts on it."""
        key = self._event_key(request)
        claim = (request.lane.shards, request.lane.shard) if request.lane is not None else None
        return route(self._routing_spec(), self._shard, request.entry, request.payload, claim=claim,
                     key_lane=lambda: self._engine.key_lane(request.entry, request.payload).value,
                     answered=lambda: key is None or self._engine.lookup(event_key(*key)) is not None,
                     prior_shards=request.prior.shards if request.prior is not None else None, split=self._engine.split)

    def _act_on(self, verdict: Route, request: DeliveryRequest) -> None:
        """A signalled delivery this shard does not take: passed on to the shard the verdict names (a
        signal's sender hears nothing: the shard forwards it, core.routing), or refused and recorded
        (a claim no shard of the activation makes)."""
        if verdict.verdict is Verdict.FORGED:
            self._refuse_forged(verdict)
        elif verdict.verdict is Verdict.ASK_PARENT:  # a split's parent may hold the id: it answers, then passes it back
            self._pass_on(verdict.shard, request, "ask the split's parent")
        else:  # its queue key's shard, or a sender's stale routing: the shard named takes it (a signal is kept)
            self._pass_on(verdict.shard, request, verdict.reason or "forward a misrouted delivery")

    async def _parent_answered(self, requests: list[DeliveryRequest]) -> list[DeliveryRequest]:
        """An update's deliveries; on a split's child, those of ids it does not hold with the parent's
        own answer (workflows/_splits.py), or refused to be sent again when the parent cannot answer."""
        if self._spec.shards <= 1 or not self._asks_parent(requests):
            return requests
        answered = await self._with_parent_answers(requests)
        if isinstance(answered, str):
            raise ApplicationError(f"shard {self._shard} of {self._spec.workflow!r} asks its split's parent about ids it "
                                   f"does not hold, and cannot now ({answered}): nothing was recorded; retry", type=REBINDING)
        return answered

    def _defer_unanswered(self, request: DeliveryRequest, why: str) -> None:
        """A signalled delivery of an id the split's parent could not be asked about: recorded as deferred
        (the operator sees it; deliver it again), never taken as new."""
        self._signal_safely(DELIVER_SIGNAL, lambda: self._absorb(self._engine.deliver(
            request.entry, request.payload, self._now(),
            defer_new=f"the split's parent could not be asked whether it holds this id ({why}); deliver it again")))

    def _refuse_forged(self, verdict: Route) -> None:
        self._absorb(self._engine.record_error(self._now(), "forged_routing", f"shard {self._shard} refused {verdict.reason}"))

    # ------------------------------------------------------------------ splits (core.sharding, "splitting")
    def _event_key(self, request: DeliveryRequest) -> tuple[str, str] | None:
        """(entry, delivery id) of an external delivery, or None when it has none (it is invalid)."""
        return delivery_key(external_paths(self._spec), request.entry, request.payload)

    def _refuse_misrouted(self, requests: list[DeliveryRequest]) -> None:
        """An update's deliveries this shard does not take are refused before anything is recorded:
        its sender routes them again (``Misrouted``) or asks the split's parent (``ConsultParent``)."""
        verdicts = [self._route(r) for r in requests]
        wrong = next((v.shard for v in verdicts if v.verdict is Verdict.ELSEWHERE), None)
        if wrong is not None:
            raise ApplicationError(
                f"shard {self._shard} of {self._spec.workflow!r} does not take this delivery: shard {wrong} does "
                "(ask shard 0's routing query again and send it there; nothing was recorded)", type=MISROUTED)
        if any(v.verdict is Verdict.ASK_PARENT for v in verdicts):
            parent = parent_of(self._shard, self._engine.split)  # type: ignore[arg-type]
            raise ApplicationError(
                f"shard {self._shard} of {self._spec.workflow!r} was split from shard {parent}, which may hold this "
                f"delivery id: send it again with shard {parent}'s split_lookup answer as `prior` (WfiClient does); "
                "nothing was recorded", type=CONSULT_PARENT)
        for r in requests:
            if r.prior is not None and r.prior.record is not None:
                self._record_of(r.prior.record)  # raises on a malformed entry

    @staticmethod
    def _record_of(record: dict[str, Any]) -> EventRecord:
        try:
            return EVENT_RECORD.validate_python({k: v for k, v in record.items() if k in EVENT_RECORD_FIELDS})
        except ValueError as exc:
            raise ValueError(f"the delivery's `prior` is not a dedup entry: {' '.join(str(exc).split())[:300]}") from None

    def _prior_record(self, request: DeliveryRequest) -> EventRecord | None:
        """The parent's dedup entry a child judges an unknown id by (None: the parent had none)."""
        prior = request.prior
        if prior is None or prior.record is None or not is_child(self._shard, self._engine.split) \
                or prior.shards != self._spec.shards:
            return None
        try:
            return self._record_of(prior.record)
        except ValueError:
            return None  # refused by the validator; a signal's is judged without it

    def _prior_for(self, owner: int, request: DeliveryRequest) -> DeliveryRequest:
        """A delivery this shard passes to ``owner``, with this shard's answer when it is ``owner``'s parent."""
        split = self._engine.split
        if split is None or not is_child(owner, split) or parent_of(owner, split) != self._shard:
            return request
        key = self._event_key(request)
        record = self._engine.delivery(*key) if key is not None else None
        return request.model_copy(update={"prior": PriorEntry(shards=self._routing_spec().shards, record=record)})

    def split_answer(self, keys: list[list[str]]) -> dict[str, Any]:
        """What this shard holds of these (entry, delivery id) pairs, and the count it routes by."""
        return {"shards": self._routing_spec().shards,
                "records": [self._engine.delivery(str(k[0]), str(k[1])) if len(k) == 2 else None for k in keys[:MAX_BULK]]}

    def _pass_on(self, owner: int, request: DeliveryRequest, why: str) -> None:
        """Signal ``request`` to shard ``owner`` (counted from now: continue-as-new waits for it,
        ``ActivationWorkflow._settle_deliveries``)."""
        self._forwarding += 1
        self._tasks.spawn(self._forward(owner, request), why)

    async def _forward(self, owner: int, request: DeliveryRequest) -> None:
        request = self._prior_for(owner, request)
        target = workflow.get_external_workflow_handle(shard_workflow_id(self._spec.workflow, owner))
        try:
            await target.signal(DELIVER_SIGNAL, request)
        except FailureError as exc:
            self._absorb(self._engine.record_error(self._now(), "signal_failed", f"a delivery signalled to shard "
                                                   f"{self._shard} could not be passed to shard {owner}: {exc}"))
        else:
            self._absorb(self._engine.note_forwarded())
        finally:
            self._forwarding -= 1
