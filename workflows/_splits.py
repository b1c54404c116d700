"""The activation's part in a split (core.sharding, "splitting"; a mixin of ``ActivationWorkflow``).

A split's parent drains and tells its children; it hands its moved queue keys over and frees them
(core/engine/_lanes.py). What a child is told by signal it never takes on the signal's word: anyone
with a Temporal client can send one. It asks the parent itself (``wfi.ask_shard``, a query of the
parent) and acts only on what the parent answers (core.routing judges the answer); a notice the
parent does not confirm is refused and recorded (``forged_protocol``). Checks are one at a time:
notices that arrive meanwhile are judged together by the next answer, so a flood of forged signals
costs one query at a time, never a pending activity each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import ActivityError, FailureError

with workflow.unsafe.imports_passed_through():
    from wf_initiation.core.activation import ActivationSpec
    from wf_initiation.core.engine import LANES_SIGNAL, Decision, Engine, LaneNotice, event_key
    from wf_initiation.core.limits import MAX_BULK, fit_to_bytes
    from wf_initiation.core.routing import copy_problem, drained_problem, notice_problem, split_refusal
    from wf_initiation.core.sharding import is_child, parent_of
    from wf_initiation.wire import (
        ASK_SHARD_ACTIVITY,
        PARENT_DRAINED_SIGNAL,
        ROUTING_QUERY,
        SPLIT_LANES_CHECK_QUERY,
        SPLIT_LOOKUP_QUERY,
        SUBSCRIPTIONS_CHECK_QUERY,
        DeliveryRequest,
        PriorEntry,
        shard_workflow_id,
    )

    from ._compat import RunCompat
    from ._tasks import Tasks

ASK_TIMEOUT = timedelta(minutes=5)  # a parent that cannot answer that long: the notice is recorded as unverified
NOTICE_KEYS_PER_ASK = 4096
LOOKUP_TRIES = 120  # a parent asked about a new id that has not switched to the split's count yet: once a second


class SplitHandlers:
    """Handlers of ``ActivationWorkflow``; the state they use is the workflow's."""

    _engine: Engine
    _spec: ActivationSpec
    _pending_spec: ActivationSpec | None
    _shard: int
    _signals: int
    _compat: RunCompat
    _tasks: Tasks
    _absorb: Callable[[Decision[Any]], Any]
    _poke: Callable[[], None]
    _now: Callable[[], datetime]
    _decode_signal: Callable[..., Any]
    _signal_safely: Callable[..., Any]
    split_answer: Callable[[list[list[str]]], dict[str, Any]]
    _event_key: Callable[[DeliveryRequest], tuple[str, str] | None]

    def _init_splits(self) -> None:
        self._notices: list[LaneNotice] = []  # lane notices waiting for their parent's word
        self._checking_notices = False
        self._checking_drained = False
        self._lookups: dict[tuple[str, str], asyncio.Future[Any]] = {}  # ids whose parent's answer is awaited
        self._lookup_queue: list[tuple[str, str]] = []
        self._looking_up = False
        self._copies: list[tuple[str, str, Callable[[], None]]] = []  # (kind, sub id, apply) waiting for shard 0
        self._checking_copies = False

    # ------------------------------------------------------------------ parent
    async def _drain_split(self) -> None:
        """A split's parent: wait between the engine's drain checks (core/engine/_split.py) and tell
        the children it names once it has drained (they ask it, and then judge new ids alone)."""
        check = self._engine.drain_check()  # kept for this run's checks
        while check is not None:
            await workflow.sleep(check.every, summary="split: has every id held at the split expired?")
            children = self._absorb(self._engine.drain(check, self._now()))
            # The main loop is woken where a run of an earlier build woke it (its recorded history replays):
            # before the children are told once the check is verified (workflows/_compat.py), else after.
            verified = bool(children) and self._compat.verified_splits()
            if verified:
                self._poke()
            await self._tell_drained(children)
            if not verified:
                self._poke()
            if self._engine.drain_check() is None:
                return

    async def _tell_drained(self, children: list[int]) -> None:
        for child in children:
            try:
                await workflow.get_external_workflow_handle(shard_workflow_id(self._spec.workflow, child)).signal(
                    PARENT_DRAINED_SIGNAL, self._shard)
            except FailureError as exc:  # the child ended (deactivated, terminated): it asks nobody any more
                self._absorb(self._engine.record_error(self._now(), "signal_failed", f"shard {child} could not be "
                                                       f"told that its split's parent drained: {exc}"))

    def _split_refusal(self, spec: ActivationSpec) -> str | None:
        """Why this shard cannot take ``spec`` (a split) now; None when it can (core.routing)."""
        split = self._engine.split
        busy = [self._shard] if split is not None and not split.drained else []
        return split_refusal(self._spec.shards, spec.shards, busy=busy,
                             from_shards=spec.split.from_shards if spec.split is not None else -1)

    @workflow.query(name=SPLIT_LOOKUP_QUERY)
    def split_lookup(self, keys: list[list[str]]) -> dict[str, Any]:
        return fit_to_bytes(self.split_answer(keys))

    @workflow.query(name=SUBSCRIPTIONS_CHECK_QUERY)
    def subscriptions_check(self, sub_ids: list[str]) -> dict[str, Any]:
        """Another shard asks whether a subscription copy it was sent (or told to drop) is this shard's."""
        return fit_to_bytes(self._engine.subscriptions_check(sub_ids[:MAX_BULK]).value)

    @workflow.query(name=SPLIT_LANES_CHECK_QUERY)
    def split_lanes_check(self, child: int, keys: list[str]) -> dict[str, Any]:
        """A child asks whether a lane notice it got is this parent's (core.routing.notice_problem)."""
        return fit_to_bytes(self._engine.lanes_check(child, keys[:NOTICE_KEYS_PER_ASK]).value)

    # ------------------------------------------------------------------ child
    @workflow.signal(name=PARENT_DRAINED_SIGNAL)
    async def parent_drained(self, parent: RawValue) -> None:
        """The split's parent says it holds no id of the split any more: asked of the parent itself,
        this child then judges new ids alone."""
        self._signals += 1
        split = self._engine.split
        if not is_child(self._shard, split):
            return
        assert split is not None
        if not self._compat.verified_splits():  # a run begun before the check: as it did then
            self._parent_drained()
            return
        if self._checking_drained:
            return  # the check in flight asks the parent now; the parent says the same to this signal
        self._checking_drained = True
        try:
            answer = await self._ask(parent_of(self._shard, split), ROUTING_QUERY, [])
            problem = answer if isinstance(answer, str) else drained_problem(answer, split)
            if problem is None and self._engine.split == split:
                self._parent_drained()
            elif problem is not None:
                self._refuse(f"a {PARENT_DRAINED_SIGNAL} signal: {problem}; this shard still asks its parent about ids "
                             "it does not hold")
        finally:
            self._checking_drained = False

    def _parent_drained(self) -> None:
        self._absorb(self._engine.split_parent_drained())
        self._poke()

    @workflow.signal(name=LANES_SIGNAL)
    async def lanes_noticed(self, notice: RawValue) -> None:
        """The split's parent names the moved queue keys that still run there, or that no longer do
        (core/engine/_lanes.py): applied once the parent confirms it; their first runs here may start."""
        self._signals += 1
        decoded = self._decode_signal(notice, LaneNotice, LANES_SIGNAL)
        if decoded is None:
            self._poke()
            return
        if not self._compat.verified_splits():  # a run begun before the check: as it did then
            self._apply_notice(decoded)
            return
        self._notices.append(decoded)
        if self._checking_notices:
            return  # the check in flight takes it next (this handler's work ends there)
        self._checking_notices = True
        try:
            while self._notices:
                await self._check_notices()
        finally:
            self._checking_notices = False

    async def _check_notices(self) -> None:
        """Ask the parent about the notices waiting (as many as one answer covers) and apply the
        ones it confirms."""
        batch: list[LaneNotice] = []
        keys: list[str] = []
        while self._notices and (not batch or len(keys) + len(self._notices[0].keys) <= NOTICE_KEYS_PER_ASK):
            batch.append(self._notices.pop(0))
            keys += batch[-1].keys
        split = self._engine.split
        parent = parent_of(self._shard, split) if split is not None and is_child(self._shard, split) else None
        stray = [n for n in batch if parent is None or n.parent != parent]
        for n in stray:
            self._refuse(f"a {LANES_SIGNAL} {n.kind} naming shard {n.parent} as this shard's split parent, which it is not")
        batch = [n for n in batch if n not in stray]
        if not batch or parent is None:
            return
        answer = await self._ask(parent, SPLIT_LANES_CHECK_QUERY, [self._shard, sorted(set(keys))])
        for n in batch:
            problem = answer if isinstance(answer, str) else notice_problem(n.kind, n.keys, n.part, n.parts, answer)
            if problem is None:
                self._apply_notice(n)
            else:
                self._refuse(f"a {LANES_SIGNAL} {n.kind} of {len(n.keys)} key(s): {problem}")

    # ------------------------------------------------------------------ subscription copies
    def _copy_checked(self, kind: str, sub_id: str) -> bool:
        """Whether a subscription signal to this shard touches a copy of shard 0's (a copy sent, or one
        held here dropped): then shard 0 is asked before it is applied."""
        if self._spec.shards <= 1 or self._shard == 0:
            return False
        return self._compat.verified_splits()

    async def _apply_copy(self, kind: str, sub_id: str, apply: Callable[[], None]) -> None:
        """Apply a copy's subscribe or unsubscribe once shard 0 confirms it (core.routing.copy_problem);
        checks one at a time, the signals that came meanwhile judged by the next answer."""
        self._copies.append((kind, sub_id, apply))
        if self._checking_copies:
            return
        self._checking_copies = True
        try:
            while self._copies:
                batch, self._copies = self._copies[:MAX_BULK], self._copies[MAX_BULK:]
                answer = await self._ask(0, SUBSCRIPTIONS_CHECK_QUERY, [sorted({s for _, s, _ in batch})])
                for kind_, sub_id_, apply_ in batch:
                    problem = copy_problem(kind_, sub_id_, answer)
                    if problem is None:
                        apply_()
                    else:
                        self._refuse(f"a {kind_} signal for a copy of subscription {sub_id_[:120]!r}: {problem}")
        finally:
            self._checking_copies = False

    # ------------------------------------------------------------------ a child's new ids
    def _asks_parent(self, requests: list[DeliveryRequest]) -> bool:
        """Whether this shard is a split's child with ids here it does not hold: their parent's own
        answer is asked (a sender's ``prior`` is never taken on its word)."""
        if not is_child(self._shard, self._engine.split):
            return False
        keys = [self._event_key(r) for r in requests]
        return any(k is not None and self._engine.lookup(event_key(*k)) is None for k in keys) \
            and self._compat.verified_splits()

    async def _with_parent_answers(self, requests: list[DeliveryRequest]) -> list[DeliveryRequest] | str:
        """``requests`` with the parent's own answer as the ``prior`` of each id this child does not
        hold (any prior a sender set is dropped), or why the parent could not answer. Asked in
        batches, one at a time: a flood of deliveries costs one query at a time."""
        keys = [self._event_key(r) for r in requests]
        unknown = [k for k in keys if k is not None and self._engine.lookup(event_key(*k)) is None]
        loop = asyncio.get_running_loop()
        for k in unknown:
            if k not in self._lookups:
                self._lookups[k] = loop.create_future()
                self._lookup_queue.append(k)
        waits = {k: self._lookups[k] for k in unknown}
        if not self._looking_up:
            self._looking_up = True
            try:
                while self._lookup_queue:
                    batch, self._lookup_queue = self._lookup_queue[:MAX_BULK], self._lookup_queue[MAX_BULK:]
                    answers = await self._parent_lookup(batch)
                    for n, k in enumerate(batch):
                        self._lookups.pop(k).set_result(answers if isinstance(answers, str) else answers[n])
            finally:
                self._looking_up = False
        answered = {k: await w for k, w in waits.items()}
        failed = next((a for a in answered.values() if isinstance(a, str)), None)
        if failed is not None:
            return failed
        shards = self._spec.shards
        return [r.model_copy(update={"prior": PriorEntry(shards=shards, record=answered[k]) if k in answered else None})
                if r.prior is not None or k in answered else r for r, k in zip(requests, keys)]

    async def _parent_lookup(self, batch: list[tuple[str, str]]) -> list[Any] | str:
        """The parent's dedup entries of ``batch`` (None each it holds nothing of), once it routes by
        this shard's count (a parent not switched yet may still take a moved id), or why not."""
        split = self._engine.split
        if split is None:
            return [None] * len(batch)  # drained meanwhile: this shard judges alone
        for _ in range(LOOKUP_TRIES):
            answer = await self._ask(parent_of(self._shard, split), SPLIT_LOOKUP_QUERY, [[list(k) for k in batch]])
            if isinstance(answer, str):
                return answer
            if not isinstance(answer, dict):
                return "the split's parent does not exist"
            records = answer.get("records")
            if answer.get("shards") == self._spec.shards and isinstance(records, list) and len(records) >= len(batch):
                return records[:len(batch)]
            await workflow.sleep(timedelta(seconds=1), summary="split: the parent switches to the new shard count")
        return f"the split's parent did not switch to {self._spec.shards} shards within {LOOKUP_TRIES} s"

    def _apply_notice(self, notice: LaneNotice) -> None:
        self._signal_safely(LANES_SIGNAL, lambda: self._absorb(self._engine.lanes_noticed(notice, self._now())))
        self._poke()

    async def _ask(self, shard: int, query: str, args: list[Any]) -> Any:
        """Shard ``shard``'s answer to ``query`` (a dict; None when it does not exist), or why it could
        not be asked (a str)."""
        try:
            return await workflow.execute_activity(
                ASK_SHARD_ACTIVITY, args=[shard_workflow_id(self._spec.workflow, shard), query, args],
                start_to_close_timeout=timedelta(seconds=15), schedule_to_close_timeout=ASK_TIMEOUT,
                retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=10)),
                summary=f"split: ask shard {shard} ({query})")
        except ActivityError as exc:
            return f"shard {shard} could not be asked within {ASK_TIMEOUT}: {exc.cause or exc}"

    def _refuse(self, what: str) -> None:
        self._absorb(self._engine.record_error(self._now(), "forged_protocol",
                                               f"shard {self._shard} refused {what}"[:2000]))
        self._poke()
