"""The client's side of the routing boundary (core.routing): what ``WfiClient`` does for an activation
spread over several shards, so client.py reads as the client of one activation.

A delivery goes to the shard the routing names (``_shards.Routing``, learned once from shard 0);
a shard answers with the router's verdict: taken, ``routed`` to its key's lane (followed here with
the routing as its ``lane`` claim), ``Misrouted`` (a split since the routing was read: routed again)
or ``ConsultParent`` (a split's child: sent again with its parent's answer). A split starts the new
shards first and switches shard 0 last (``_activating.split``). The shard workflows check every
claim themselves; nothing here is trusted by them. This is the one place a client forwards a
delivery (an update's sender hears the answer; a shard forwards only signals: core.routing).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any, Protocol, TypeVar, cast

from temporalio.client import WorkflowHandle

from wf_initiation._activating import split
from wf_initiation._delivery import bulk_chunks, update_id_for
from wf_initiation._grouping import DeliveryGroups
from wf_initiation._shards import RoutingCache, combined_deactivation, combined_state, combined_summary
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.engine import ROUTED_TO, DeliveryResult, Disposition
from wf_initiation.core.sharding import shard_of
from wf_initiation.errors import ActivationNotFound, ActivationRefused
from wf_initiation.wire import (
    CONSULT_PARENT,
    DEACTIVATE_UPDATE,
    DELIVER_MANY_UPDATE,
    DELIVER_UPDATE,
    DELIVERY_QUERY,
    EVENTS_QUERY,
    MISROUTED,
    ROUTING_QUERY,
    SPLIT_LOOKUP_QUERY,
    STATE_QUERY,
    SUMMARY_QUERY,
    DeactivatedResult,
    DeactivateRequest,
    DeactivateResult,
    DeliveryRequest,
    LaneClaim,
    PriorEntry,
)

_T = TypeVar("_T")


class _Client(Protocol):
    """What these calls use of ``WfiClient`` (its retries, queries, handles and caches)."""

    update_timeout: timedelta
    _routing: RoutingCache
    _groups: DeliveryGroups | None

    def _handle(self, workflow: str, shard: int = 0) -> WorkflowHandle[Any, Any]: ...
    async def shards(self, workflow: str) -> int: ...
    async def _check_codec(self, workflow: str) -> None: ...
    async def _activate_shard(self, spec: ActivationSpec, shard: int) -> Any: ...
    async def _query(self, workflow: str, name: str, *args: Any, shard: int = 0, attempts: int | None = None) -> Any: ...
    async def _retry(self, call: Callable[[], Awaitable[_T]], *, workflow: str | None = None,
                     attempts: int | None = None) -> _T: ...

ROUTING_ATTEMPTS = 3
"""Tries of the routing query before a delivery goes to shard 0 unrouted (it is taken or passed on there)."""

MISROUTED_ATTEMPTS = 36
"""How many times a delivery a shard refused as not its own is routed again before the refusal is
raised, and how many times a ``routed`` answer is followed before it is returned as it is (the
ingress answers that 503, retry later): after pauses of ~0.05 s doubling to 2 s, ~1 min in all. A
split switches shard 0, which answers the routing, last (docs/deployment.md), and with its worker
down (a crash, a deploy) that can take as long as the worker takes to come back; the same order as
the client's retries of an unavailable server (``max_attempts``)."""


def group_key(workflow: str, shard: int) -> str:
    """The key deliveries to one shard are grouped under (wf_initiation/_grouping.py)."""
    return f"{workflow}\x1f{shard}"


def of_group_key(key: str) -> tuple[str, int]:
    workflow, _, shard = key.partition("\x1f")
    return workflow, int(shard or 0)


class ShardedCalls:
    """The shard-aware calls of one ``WfiClient`` (its retries, queries and handles)."""

    def __init__(self, wfi: _Client) -> None:
        self._wfi = wfi

    # ------------------------------------------------------------------ routing (``_shards.RoutingCache`` asks these)
    async def has_shards(self, workflow: str) -> bool:
        """Whether the activation spans more than one workflow: shard 1 exists (the server answers
        alone; no worker, no query task)."""
        wfi = self._wfi
        try:
            await wfi._retry(wfi._handle(workflow, 1).describe, workflow=workflow, attempts=ROUTING_ATTEMPTS)
        except ActivationNotFound:
            return False
        return True

    async def ask_routing(self, workflow: str) -> dict[str, Any]:
        """Shard 0's routing answer. A few attempts only: when shard 0 cannot answer now, the delivery
        goes to shard 0, which takes it or passes it on (wf_initiation/_shards.py), rather than waiting."""
        return cast(dict[str, Any], await self._wfi._query(workflow, ROUTING_QUERY, attempts=ROUTING_ATTEMPTS))

    # ------------------------------------------------------------------ splits
    async def split(self, spec: ActivationSpec, current: int) -> Any:
        """Split a running activation from ``current`` shards into ``spec.shards`` while deliveries go
        on (``_activating.split``, the same sequence an activation growing itself performs), each
        shard activated the client's way (a closed one started again from its state). Idempotent:
        after an interruption, running it again completes it."""
        wfi = self._wfi
        first = await split(spec, current, ask_routing=lambda k: wfi._query(spec.workflow, ROUTING_QUERY, shard=k),
                            activate=wfi._activate_shard)
        wfi._routing.forget(spec.workflow)
        note = (f"split from {current} into {spec.shards} shards: shards {current}-{spec.shards - 1} take the ids that "
                f"moved and ask shards 0-{current - 1} about ids those held until they expire")
        return first.model_copy(update={"note": note})

    # ------------------------------------------------------------------ deliveries
    async def deliver(self, workflow: str, request: DeliveryRequest, *, uid: str, size: int) -> DeliveryResult:
        """One delivery to the shard the routing names (``uid`` empty: grouped with others)."""
        wfi = self._wfi
        entry, payload = request.entry, request.payload
        for attempt in range(MISROUTED_ATTEMPTS):  # again only after a shard said it is not this delivery's
            shard = (await wfi._routing.get(workflow, fallback=True)).shard(entry, payload)
            try:
                if not uid:
                    result = await wfi._groups.deliver(group_key(workflow, shard), request, size)  # type: ignore[union-attr]
                else:
                    result = await self._asking_parent(
                        workflow, shard, functools.partial(self._update_one, workflow, shard, uid), [request])
                [result] = await self.follow_routes(workflow, [request], [result],
                                                    uid=f"{uid}-lane" if uid else f"group-{uuid.uuid4().hex}")
                return result
            except ActivationRefused as exc:
                if exc.cause_type != MISROUTED or attempt == MISROUTED_ATTEMPTS - 1:
                    raise
                await self._route_again(workflow, attempt)
        raise AssertionError("unreachable")

    async def _route_again(self, workflow: str, attempt: int) -> None:
        """A shard refused a delivery as not its own (``Misrouted``): the activation was split since the
        routing was read. Forget it and ask again after a pause: while a split is applied, shard 0 (switched
        last) still answers the earlier count (tests/crash/test_split_crash.py: seconds around a killed
        worker and a server restart)."""
        self._wfi._routing.forget(workflow)
        await asyncio.sleep(min(0.05 * 2**attempt, 2.0) * (0.5 + random.random()))

    async def deliver_many(self, workflow: str, deliveries: list[tuple[str | None, Any]], *,
                           misrouted: int) -> list[DeliveryResult]:
        """``WfiClient.deliver_many`` after its checks; ``misrouted``: how often a shard refused these as not its own."""
        await self._wfi._check_codec(workflow)
        routing = await self._wfi._routing.get(workflow, fallback=True)
        by_shard: dict[int, list[int]] = {}
        for i, (entry, payload) in enumerate(deliveries):
            by_shard.setdefault(routing.shard(entry, payload), []).append(i)
        out: list[DeliveryResult | None] = [None] * len(deliveries)

        async def send(shard: int, indexes: list[int]) -> None:
            done = 0
            for chunk in bulk_chunks([deliveries[i] for i in indexes]):
                try:
                    results = await self.send_group(group_key(workflow, shard), chunk)
                except ActivationRefused as exc:
                    if exc.cause_type != MISROUTED or misrouted == MISROUTED_ATTEMPTS - 1:
                        raise
                    await self._route_again(workflow, misrouted)  # the activation was split: route this chunk again
                    results = await self.deliver_many(workflow, [deliveries[i] for i in indexes[done:done + len(chunk)]],
                                                      misrouted=misrouted + 1)
                for i, result in zip(indexes[done:], results):
                    out[i] = result
                done += len(chunk)

        await asyncio.gather(*(send(shard, indexes) for shard, indexes in by_shard.items()))
        results = [r for r in out if r is not None]
        return await self.follow_routes(workflow, [DeliveryRequest(entry=e, payload=p) for e, p in deliveries], results)

    async def follow_routes(self, workflow: str, requests: list[DeliveryRequest], results: list[DeliveryResult], *,
                            uid: str | None = None) -> list[DeliveryResult]:
        """``results`` with each ``routed`` one replaced by the answer of the shard it was routed to (its
        queue key's, batch's or shard 0, core.sharding), which gets the delivery with the routing as
        its ``lane``. ``uid``: the update id (the first update's, so a repeat is answered as the first
        was), else derived from the content. A routing made with a shard count that changed since (a
        split) is routed again by the shard that gets it, or refused (``Misrouted``): followed again
        with the routing asked anew after a pause, as a misrouted delivery is, up to
        ``MISROUTED_ATTEMPTS`` times (a split meeting a killed worker: tests/crash/test_lanes_crash.py)."""
        out = list(results)
        for attempt in range(MISROUTED_ATTEMPTS):
            pending = [i for i, r in enumerate(out) if r.disposition is Disposition.ROUTED and r.shard is not None]
            if not pending:
                break
            if attempt:  # still routed after following: the shard count changed (a split)
                await self._route_again(workflow, attempt - 1)
            shards = await self._wfi.shards(workflow)
            by_lane: dict[int, list[int]] = {}
            for i in pending:
                by_lane.setdefault(cast(int, out[i].shard), []).append(i)
            first = uid if attempt == 0 else f"route-{uuid.uuid4().hex}"

            async def send(lane: int, indexes: list[int], shards: int = shards, first: str | None = first) -> None:
                claim = LaneClaim(shards=shards, shard=lane)
                chunk = [requests[i].model_copy(update={"lane": claim}) for i in indexes]
                done = 0
                for part in bulk_chunks([(r.entry, r.payload) for r in chunk]):
                    try:
                        answers = await self.send_group(group_key(workflow, lane), chunk[done:done + len(part)],
                                                        uid=first and f"{first}-{done}")
                    except ActivationRefused as exc:
                        if exc.cause_type != MISROUTED:
                            raise
                        return  # routed with a count that changed: the next attempt asks the routing again
                    for i, answer in zip(indexes[done:], answers):
                        out[i] = answer
                    done += len(part)

            await asyncio.gather(*(send(lane, indexes) for lane, indexes in by_lane.items()))
        return out

    async def send_group(self, key: str, chunk: list[DeliveryRequest], uid: str | None = None) -> list[DeliveryResult]:
        """One ``deliver_many`` update to one shard (``key``: workflow and shard, :func:`group_key`); by
        default its id binds its content, so a retry is answered by the first."""
        wfi = self._wfi
        workflow, shard = of_group_key(key)
        uid = uid or "bulk-" + hashlib.sha256("".join(update_id_for(r.entry, r.payload) for r in chunk).encode()).hexdigest()[:32]
        handle = wfi._handle(workflow, shard)

        async def send(requests: list[DeliveryRequest]) -> list[DeliveryResult]:
            return await wfi._retry(functools.partial(handle.execute_update, DELIVER_MANY_UPDATE, requests, id=uid,
                                    result_type=list[DeliveryResult], rpc_timeout=wfi.update_timeout), workflow=workflow)

        return await self._asking_parent(workflow, shard, send, chunk)

    async def send_grouped(self, key: str, chunk: list[DeliveryRequest]) -> list[DeliveryResult]:
        """A group of separate callers' deliveries (``_grouping``): an update id of its own (its retries
        reuse it), so a delivery sent again later is judged again (``duplicate``), as sent alone by a
        new caller would be."""
        return await self.send_group(key, chunk, uid=f"group-{uuid.uuid4().hex}")

    async def send_alone(self, key: str, request: DeliveryRequest) -> DeliveryResult:
        """One delivery of a group that went alone (its own update)."""
        workflow, shard = of_group_key(key)
        uid = f"group-{uuid.uuid4().hex}"
        return await self._asking_parent(workflow, shard, functools.partial(self._update_one, workflow, shard, uid), [request])

    async def _asking_parent(self, workflow: str, shard: int, send: Callable[[list[DeliveryRequest]], Awaitable[_T]],
                             requests: list[DeliveryRequest]) -> _T:
        """``send(requests)``; when a shard created by a split answers that its parent may hold an id
        (``ConsultParent``), again with the parent's answers as each delivery's ``prior``."""
        try:
            return await send(requests)
        except ActivationRefused as exc:
            if exc.cause_type != CONSULT_PARENT:
                raise
        return await send(await self._with_priors(workflow, shard, requests))

    async def _with_priors(self, workflow: str, shard: int, requests: list[DeliveryRequest]) -> list[DeliveryRequest]:
        """``requests`` with what the split's parent of ``shard`` holds of each id (core.sharding)."""
        wfi = self._wfi
        wfi._routing.forget(workflow)
        routing = await wfi._routing.get(workflow)
        if routing.split_from is None or shard < routing.split_from:
            return requests  # not a child (any more): the shard judges them alone
        keys = [routing.key(r.entry, r.payload) for r in requests]
        asked = [list(k) for k in keys if k is not None]
        answer = await wfi._query(workflow, SPLIT_LOOKUP_QUERY, asked, shard=shard % routing.split_from)
        records = iter(answer.get("records", []))
        return [r.model_copy(update={"prior": PriorEntry(shards=int(answer["shards"]), record=next(records, None))})
                if k is not None else r for r, k in zip(requests, keys)]

    async def _update_one(self, workflow: str, shard: int, uid: str | None, requests: list[DeliveryRequest]) -> DeliveryResult:
        """One ``deliver`` update (of ``requests[0]``) to one shard, retried with the same id."""
        wfi = self._wfi
        send = functools.partial(wfi._handle(workflow, shard).execute_update, DELIVER_UPDATE, requests[0], id=uid,
                                 result_type=DeliveryResult, rpc_timeout=wfi.update_timeout)
        return await wfi._retry(send, workflow=workflow)

    # ------------------------------------------------------------------ the whole activation
    async def deactivate(self, workflow: str, request: DeactivateRequest) -> DeactivateResult:
        """Deactivate every shard with the same action id; one answer for them all."""
        wfi = self._wfi
        shards = (await wfi._routing.get(workflow)).shards

        def one(shard: int) -> Awaitable[DeactivateResult]:
            return wfi._retry(lambda: wfi._handle(workflow, shard).execute_update(
                DEACTIVATE_UPDATE, request, id=f"deactivate-{request.action_id}", result_type=DeactivateResult,
                rpc_timeout=wfi.update_timeout), workflow=workflow)

        results = await asyncio.gather(*(one(k) for k in range(shards)))
        return results[0] if shards == 1 else combined_deactivation(results)

    async def deactivated(self, workflow: str) -> DeactivatedResult:
        """Shard 0's result once every shard completed its deactivation."""
        shards = (await self._wfi._routing.get(workflow)).shards
        results = await asyncio.gather(*(self._wfi._handle(workflow, k).result() for k in range(shards)))
        return results[0]

    async def whole_state(self, workflow: str, state: dict[str, Any]) -> dict[str, Any]:
        """Shard 0's full ``state`` with every other shard's errors, runs and counters joined (its
        ``events``, when read, kept); the caller sets the whole activation's summary."""
        wfi = self._wfi
        shards = (await wfi._routing.get(workflow)).shards
        others = await asyncio.gather(*(wfi._query(workflow, STATE_QUERY, shard=k) for k in range(1, shards)))
        return {**combined_state([state, *others]), **({"events": state["events"]} if "events" in state else {})}

    async def events(self, workflow: str, page: int) -> AsyncIterator[dict[str, Any]]:
        """Every shard's live dedup entries, each shard's in its acceptance order, ``page`` at a time."""
        for shard in range((await self._wfi._routing.get(workflow)).shards):
            after = 0
            while True:
                chunk = await self._wfi._query(workflow, EVENTS_QUERY, after, page, shard=shard)
                for event in chunk:
                    yield event
                if len(chunk) < page:
                    break
                after = chunk[-1]["seq"]

    async def summary(self, workflow: str) -> dict[str, Any]:
        """Every shard's summary combined (``_shards.combined_summary``)."""
        wfi = self._wfi
        shards = (await wfi._routing.get(workflow)).shards
        parts = await asyncio.gather(*(wfi._query(workflow, SUMMARY_QUERY, shard=k) for k in range(shards)))
        return parts[0] if shards == 1 else combined_summary(parts)

    # ------------------------------------------------------------------ reads and operator actions
    async def delivery(self, workflow: str, entry: str, delivery_id: str) -> dict[str, Any] | None:
        """The dedup entry of one delivery: its id's shard's, or the one of the lane it was routed to."""
        wfi = self._wfi
        routing = await wfi._routing.get(workflow)
        shard = shard_of(entry, delivery_id, routing.shards) if entry in routing.entries else 0
        record = await wfi._query(workflow, DELIVERY_QUERY, entry, delivery_id, shard=shard)
        if not record or record.get("disposition") != Disposition.ROUTED.value:
            return record
        # Its queue key's shard took the event (core.sharding, lanes): that shard's entry is the answer.
        lane = str(record.get("detail") or "").removeprefix(ROUTED_TO)
        lanes = [int(lane)] if lane.isdigit() else [k for k in range(routing.shards) if k != shard]
        for k in lanes:
            taken = await wfi._query(workflow, DELIVERY_QUERY, entry, delivery_id, shard=k)
            if taken:
                return taken
        return record  # routed, and not (yet) taken by its lane

    async def holder_of(self, workflow: str, run_key: str | None) -> int:
        """The shard that holds pending run ``run_key`` (an action on it goes there: a queue key's,
        batch's or shard 0's, core.sharding); 0 for an action on no run or a run no shard holds
        (shard 0 then answers that it knows no such run)."""
        wfi = self._wfi
        shards = (await wfi._routing.get(workflow)).shards if run_key else 1
        for k in range(shards if shards > 1 else 0):
            runs = (await wfi._query(workflow, STATE_QUERY, shard=k)).get("runs") or {}
            if run_key in runs:
                return k
        return 0
