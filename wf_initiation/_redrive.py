"""Deferred signals, listed and delivered again (``wfi state --deferred-signals``, ``wfi deliver --redrive``).

An activation lists each signalled delivery it deferred (at most ``core.limits.MAX_DEFERRED_SIGNALS``
per shard) with a reference to the signal in its run's history (``core.engine.SignalRef``). A
redrive reads the payload back from that history (kept for the namespace's retention) and delivers
it by update, which answers with its disposition; once taken, the activation lists it no more.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from wf_initiation.activities.signals import DEFERRED_SIGNALS_QUERY, signalled_requests
from wf_initiation.core.engine import DeliveryResult, SignalRef
from wf_initiation.errors import UnknownEntry
from wf_initiation.wire import shard_workflow_id

if TYPE_CHECKING:
    from wf_initiation.client import WfiClient

PAGE = 500


async def deferred_signals(wfi: WfiClient, workflow: str) -> AsyncIterator[tuple[int, dict[str, Any]]]:
    """(shard, listed signal) of every deferred signal the activation lists, oldest first per shard."""
    for shard in range(await wfi.shards(workflow)):
        offset = 0
        while True:
            page = await wfi._query(workflow, DEFERRED_SIGNALS_QUERY, offset, PAGE, shard=shard)
            for signal in page["signals"]:
                yield shard, signal
            offset += len(page["signals"])
            if not page["signals"] or offset >= page["total"]:
                break


async def redrive(wfi: WfiClient, workflow: str, delivery_id: str, entry: str | None = None) -> DeliveryResult:
    """Deliver the deferred signal ``delivery_id`` (of ``entry``) again, by update; its disposition.

    Raises:
        UnknownEntry: the activation lists no deferred signal of that id, or its signal is no longer
            in history (past the namespace's retention): its sender must deliver it again.
    """
    async for shard, listed in deferred_signals(wfi, workflow):
        if listed["delivery_id"] == delivery_id and entry in (None, listed["entry"]):
            ref = SignalRef.model_validate(listed)
            [request] = await signalled_requests(wfi.client, shard_workflow_id(workflow, shard), [ref])
            if request is None:
                raise UnknownEntry(f"the signal of deferred delivery {delivery_id!r} is no longer in the history of run "
                                   f"{ref.run_id} (past the namespace's retention?): its sender must deliver it again")
            # An update id of its own: one derived from the payload would be answered by the first redrive's result.
            return await wfi.deliver(workflow, request.payload, entry=ref.entry, update_id=f"redrive-{uuid.uuid4().hex}")
    raise UnknownEntry(f"{workflow!r} lists no deferred signal with delivery id {delivery_id!r}"
                       + (f" of entry {entry!r}" if entry else "") + ": `wfi state --deferred-signals` lists them")


async def redrive_all(wfi: WfiClient, workflow: str) -> list[DeliveryResult]:
    """Deliver every deferred signal the activation lists again (payloads read back from history,
    one read per run, delivered with ``deliver_many``); their dispositions, in the listed order.
    One whose signal is no longer in history is left listed."""
    listed = [(shard, SignalRef.model_validate(s)) async for shard, s in deferred_signals(wfi, workflow)]
    requests: list[tuple[str | None, Any]] = []
    for shard in dict.fromkeys(shard for shard, _ in listed):
        refs = [ref for k, ref in listed if k == shard]
        found = await signalled_requests(wfi.client, shard_workflow_id(workflow, shard), refs)
        requests += [(ref.entry, request.payload) for ref, request in zip(refs, found) if request is not None]
    return await wfi.deliver_many(workflow, requests) if requests else []
