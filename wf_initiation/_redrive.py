"""The client's side of a re-drive (``WfiClient.redrive``, ``wfi operate redrive``, ``wfi deliver --redrive``).

An activation keeps the events that did not run for a cause an operator can fix (the engine's
``core/engine/_kept.py``; ``wfi state --redrivable`` lists them, every shard's): invalid deliveries
and quarantined poll items with their payloads, start faults with their runs, and deferred signals by
reference to their signals in its history. A re-drive is the operator action ``Redrive``, which the
activation applies (``core/engine/_redrive.py``). Here: the events it selects are listed first; the
deferred signals' payloads are read back from the history (kept for the namespace's retention once
the run has continued as new) and sent with the action, which checks each against the digest kept
with its signal; a selection larger than one action takes (``MAX_REDRIVE_PER_ACTION`` events,
``MAX_REDRIVE_REQUEST_BYTES`` of payloads) goes in pages, each an action of its own whose id is the
caller's action id with the page's numbers (``A#3-17``), so a retried call applies each page once.

``wfi deliver --redrive ID`` is the same action for one deferred signal (:func:`redrive`).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator
from typing import Any, Protocol

from temporalio.client import Client, WorkflowHandle

from wf_initiation._shards import RoutingCache
from wf_initiation.activities.signals import DEFERRED_SIGNALS_QUERY, signalled_requests
from wf_initiation.core.engine import DeliveryResult, Disposition, RedrivenEvent, SignalRef, payload_digest
from wf_initiation.core.limits import MAX_ACTION_ID_CHARS, MAX_REDRIVE_PER_ACTION, MAX_REDRIVE_REQUEST_BYTES, json_size
from wf_initiation.core.sharding import shard_of
from wf_initiation.errors import UnknownEntry
from wf_initiation.wire import REDRIVABLE_QUERY, ROUTING_QUERY, OperatorAction, OperatorResult, Redrive

PAGE = 500
NOT_OFFERED = "not_offered"


class WfiClient(Protocol):
    """What a re-drive uses of ``WfiClient`` (its retries, queries, handles, and one shard's action)."""

    client: Client
    _routing: RoutingCache

    def _handle(self, workflow: str, shard: int = 0) -> WorkflowHandle[Any, Any]: ...
    async def shards(self, workflow: str) -> int: ...
    async def _query(self, workflow: str, name: str, *args: Any, shard: int = 0, attempts: int | None = None) -> Any: ...
    async def _operate_on(self, workflow: str, action: OperatorAction, shard: int) -> OperatorResult: ...


async def redrivable(wfi: WfiClient, workflow: str, shard: int | None = None) -> AsyncIterator[dict[str, Any]]:
    """Every event the activation keeps for re-drive (each shard's, or ``shard``'s), by number, with its ``shard``."""
    for k in [shard] if shard is not None else range(await wfi.shards(workflow)):
        offset = 0
        while True:
            page = await wfi._query(workflow, REDRIVABLE_QUERY, offset, PAGE, shard=k)  # noqa: SLF001 - the client's retries
            for event in page["events"]:
                yield {"shard": k, **event}
            offset += len(page["events"])
            if not page["events"] or offset >= page["total"]:
                break


async def redrive_events(wfi: WfiClient, workflow: str, request: Redrive, shard: int | None = None) -> OperatorResult:
    """Apply a re-drive to every shard (or ``shard``) in pages; one result for them all (``action_id``: the
    caller's, each page's action id derived from it). Nothing listed matches: the action is still sent,
    so that the activation says why (re-driven already, or what it keeps)."""
    base = request.action_id or f"cli-{uuid.uuid4().hex}"
    results: list[OperatorResult] = []
    for k in [shard] if shard is not None else range(await wfi.shards(workflow)):
        listed = [e async for e in redrivable(wfi, workflow, k) if request.selects(e)]
        found = await _payloads(wfi, workflow, k, [e for e in listed if e["kind"] == "deferred_signal"])
        for page, payloads in _pages(listed, found):
            numbers = (page[0]["number"], page[-1]["number"])
            action = request.model_copy(update={"first": numbers[0], "last": numbers[1], "payloads": payloads,
                                                "action_id": _page_id(base, k, numbers)})
            results.append(await wfi._operate_on(workflow, action, k))  # noqa: SLF001 - one shard's action
    if not results:
        home = shard if shard is not None else await _home(wfi, workflow, request)
        results.append(await wfi._operate_on(workflow, request.model_copy(update={"action_id": base}), home))  # noqa: SLF001
    return results[0].model_copy(update={"action_id": base}) if len(results) == 1 else _combined(results, base)


async def _home(wfi: WfiClient, workflow: str, request: Redrive) -> int:
    """The shard that can say what became of the event a re-drive names by delivery id (the one its id
    routes to); shard 0 otherwise (and for schedules and polls, which only it runs)."""
    routing = await wfi._routing.get(workflow)  # noqa: SLF001 - the client's routing cache
    if request.delivery_id is None or routing.shards == 1:
        return 0
    names = [request.entry] if request.entry else list(routing.entries)
    homes = {shard_of(name, request.delivery_id, routing.shards) for name in names if name in routing.entries}
    return homes.pop() if len(homes) == 1 else 0


async def _payloads(wfi: WfiClient, workflow: str, shard: int, signals: list[dict[str, Any]]) -> dict[str, Any]:
    """The deferred signals' payloads found in the history of their runs, by digest (one read per run)."""
    if not signals:
        return {}
    refs = [SignalRef(entry=s["entry"], delivery_id=s["delivery_id"], digest=s["digest"], size=s["bytes"],
                      run_id=s["run_id"], at=s["at"], reason=s["reason"], number=s["number"]) for s in signals]
    requests = await signalled_requests(wfi.client, wfi._handle(workflow, shard).id, refs)
    return {ref.digest: r.payload for ref, r in zip(refs, requests, strict=True)
            if r is not None and payload_digest(r.payload) == ref.digest}


def _pages(listed: list[dict[str, Any]], found: dict[str, Any]) -> list[tuple[list[dict[str, Any]], list[Any]]]:
    """The listed events in pages one action takes: at most MAX_REDRIVE_PER_ACTION events and
    MAX_REDRIVE_REQUEST_BYTES of payloads (a deferred signal's payload not found goes without one:
    the activation says so)."""
    pages: list[tuple[list[dict[str, Any]], list[Any]]] = []
    page: list[dict[str, Any]] = []
    payloads: list[Any] = []
    size = 0
    for event in listed:
        payload = found.get(event["digest"], found) if event["kind"] == "deferred_signal" else found
        n = json_size(payload) + 1 if payload is not found else 0
        if page and (len(page) == MAX_REDRIVE_PER_ACTION or size + n > MAX_REDRIVE_REQUEST_BYTES):
            pages.append((page, payloads))
            page, payloads, size = [], [], 0
        page.append(event)
        if payload is not found:
            payloads.append(payload)
            size += n
    if page:
        pages.append((page, payloads))
    return pages


def _page_id(base: str, shard: int, numbers: tuple[int, int]) -> str:
    """A page's action id: the caller's with the shard and the page's numbers, within the id's limit."""
    suffix = f"#{shard}:{numbers[0]}-{numbers[1]}" if shard else f"#{numbers[0]}-{numbers[1]}"
    if len(base) + len(suffix) > MAX_ACTION_ID_CHARS:
        base = "sha256:" + hashlib.sha256(base.encode()).hexdigest()[:32]
    return base + suffix


def _combined(results: list[OperatorResult], base: str) -> OperatorResult:
    events = [e for r in results for e in r.redriven or []]
    offered = [e for e in events if e.outcome != NOT_OFFERED]
    counts: dict[str, int] = {}
    for e in events:
        counts[e.outcome] = counts.get(e.outcome, 0) + 1
    message = (f"re-drive in {len(results)} actions: {len(offered)} of {len(events)} selected event(s) offered again: "
               + ", ".join(f"{n} {outcome.replace('_', ' ')}" for outcome, n in counts.items()))
    return OperatorResult(ok=any(r.ok for r in results), message=message, action_id=base, redriven=events)


# ---------------------------------------------------------------------------- deferred signals (`wfi deliver --redrive`)
async def deferred_signals(wfi: WfiClient, workflow: str) -> AsyncIterator[tuple[int, dict[str, Any]]]:
    """(shard, listed signal) of every deferred signal the activation lists, oldest first per shard."""
    routing = await wfi._handle(workflow, 0).query(ROUTING_QUERY)
    for shard in range(max(1, int(routing.get("shards", 1)))):
        offset = 0
        while True:
            page = await wfi._handle(workflow, shard).query(DEFERRED_SIGNALS_QUERY, args=[offset, PAGE])
            for signal in page["signals"]:
                yield shard, signal
            offset += len(page["signals"])
            if not page["signals"] or offset >= page["total"]:
                break


async def redrive(wfi: WfiClient, workflow: str, delivery_id: str, entry: str | None = None) -> DeliveryResult:
    """Re-drive the deferred signal ``delivery_id`` (of ``entry``): the ``Redrive`` action for that one
    event, its payload read back from history; its disposition.

    Raises:
        UnknownEntry: the activation lists no deferred signal of that id, or its signal is no longer
            in history (past the namespace's retention): its sender must deliver it again.
    """
    listed = [s async for _, s in deferred_signals(wfi, workflow)
              if s["delivery_id"] == delivery_id and entry in (None, s["entry"])]
    if not listed:
        raise UnknownEntry(f"{workflow!r} lists no deferred signal with delivery id {delivery_id!r}"
                           + (f" of entry {entry!r}" if entry else "") + ": `wfi state --redrivable` lists what it keeps")
    result = await redrive_events(wfi, workflow, Redrive(kind="deferred_signal", delivery_id=delivery_id,
                                                         entry=listed[0]["entry"]))
    event = next(iter(result.redriven or []), None)
    if event is None or event.outcome == NOT_OFFERED:
        raise UnknownEntry(f"deferred delivery {delivery_id!r} was not delivered again: "
                           f"{event.message if event is not None else result.message}")
    return as_delivery(event)


async def redrive_all(wfi: WfiClient, workflow: str) -> list[DeliveryResult]:
    """Re-drive every deferred signal the activation lists (payloads read back from history, one read per
    run); the dispositions of those delivered again, in the listed order. One whose signal is no longer
    in history is left listed."""
    if not [s async for _, s in deferred_signals(wfi, workflow)]:
        return []
    result = await redrive_events(wfi, workflow, Redrive(kind="deferred_signal"))
    return [as_delivery(e) for e in result.redriven or [] if e.outcome != NOT_OFFERED]


def as_delivery(event: RedrivenEvent) -> DeliveryResult:
    """A re-driven event's outcome in the shape of a delivery's answer."""
    return DeliveryResult(entry=event.entry, delivery_id=event.delivery_id, disposition=Disposition(event.outcome),
                          run_key=event.run_key, message=event.message, activation_id=event.activation_id)
