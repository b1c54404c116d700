"""Activations that hold many retained delivery ids on a real worker: fill them, make them continue
as new, read what they carry (``bench_memory.py --phase worker``, ``bench_full_shards.py``).

Every delivery here is suppressed by ``when`` (``body.keep`` false) and has a new random UUID for its
delivery id (36 characters, as in ``bench_memory.py``'s engine phase and the capacity constants):
it starts no run and its id is retained for ``dedup_retention`` (24 h), so each delivery adds one
retained id and nothing else. Deliveries go by ``WfiClient.deliver_many``, up to 500 per update,
each update holding ids of one shard only.
"""

from __future__ import annotations

import asyncio
import pathlib
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import Client

from bench._common import SAMPLE_PERIOD, wait_for
from bench._workers import BenchWorker
from tests.support.activation import make_spec
from wf_initiation._memory import TRIM_EVERY
from wf_initiation.client import WfiClient
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.engine import Disposition
from wf_initiation.core.limits import BYTES_PER_LIVE_RECORD, BYTES_PER_RETIRED_ID, MAX_BULK, STATE_BASE_BYTES
from wf_initiation.core.sharding import shard_of
from wf_initiation.wire import SUMMARY_QUERY, shard_workflow_id

ENTRY = "request"
HOOK = """
name: {name}
on:
  http.request: {{}}
  as: request
  when: "{{{{ request.body.keep }}}}"
"""
LIVE_RECORDS = 2000  # the newest released ids the engine keeps as full records (core.limits.BYTES_PER_LIVE_RECORD)
AFTER_TARGET = 64  # issue 35 item 1: worker bytes per retained id after continue-as-new
WITHIN_TARGET = 128  # and within a run
RETENTION = timedelta(hours=24)
HISTORY_EVENTS = 8000  # the deployment default of max_history_events; a rebind changes it to force continue-as-new


def suppressed(delivery_id: str) -> dict[str, Any]:
    return {"delivery_id": delivery_id, "method": "POST", "body": {"keep": False}}


def spec_for(workdir: pathlib.Path, name: str, task_queue: str, *, shards: int = 1,
             history_events: int = HISTORY_EVENTS, retention: timedelta = RETENTION) -> ActivationSpec:
    """The activation spec of ``name``: one webhook entry, no lifecycle events, ``retention`` (24 h;
    0 for a baseline that takes the same deliveries and keeps none of their ids)."""
    scale = {"scale": {"shards": shards}} if shards > 1 else {}
    return make_spec(workdir, HOOK.format(name=name), task_queue=task_queue, lifecycle_events=False,
                     dedup_retention=f"{int(retention.total_seconds())}s", max_history_events=history_events, **scale)


def ids_per_shard(counts: Sequence[int], shards: int) -> list[list[str]]:
    """New random UUIDs, ``counts[k]`` of them routed to shard ``k``."""
    out: list[list[str]] = [[] for _ in range(shards)]
    missing = sum(counts)
    while missing:
        ident = str(uuid.uuid4())
        k = shard_of(ENTRY, ident, shards)
        if len(out[k]) < counts[k]:
            out[k].append(ident)
            missing -= 1
    return out


def ids_toward(fill: float, capacity_bytes: int, estimate: int) -> int:
    """New ids that take an activation whose capacity estimate is ``estimate`` toward ``fill`` of
    ``capacity_bytes`` without passing it: each new id counted as a full record
    (``BYTES_PER_LIVE_RECORD``), as it is until a continue-as-new retires it
    (core.engine._intake.estimated_state_bytes); a retired one counts half that, so a few rounds close the gap."""
    return max(0, int((fill * capacity_bytes - estimate) / BYTES_PER_LIVE_RECORD))


def capacity_for(ids: int) -> int:
    """The capacity in bytes at which ``ids`` retained ids (and nothing else) fill an activation."""
    live = min(ids, LIVE_RECORDS)
    return STATE_BASE_BYTES + live * BYTES_PER_LIVE_RECORD + (ids - live) * BYTES_PER_RETIRED_ID


class Filler:
    """Sends suppressed deliveries of new ids to an activation, ``in_flight`` updates at a time."""

    def __init__(self, wfi: WfiClient, name: str, shards: int, *, in_flight: int, log: Callable[[str], None]) -> None:
        self.wfi, self.name, self.shards, self.log = wfi, name, shards, log
        self.gate = asyncio.Semaphore(in_flight)
        self.sent = 0
        self.seconds = 0.0

    async def send(self, counts: Sequence[int]) -> None:
        """``counts[k]`` new ids to shard ``k``."""
        chunks = [ids[i:i + MAX_BULK] for ids in ids_per_shard(counts, self.shards) for i in range(0, len(ids), MAX_BULK)]
        total, began, report = sum(counts), time.monotonic(), time.monotonic() + 30

        async def one(chunk: list[str]) -> None:
            nonlocal report
            async with self.gate:
                results = await self.wfi.deliver_many(self.name, [(ENTRY, suppressed(i)) for i in chunk])
            wrong = [r for r in results if r.disposition not in (Disposition.SUPPRESSED, Disposition.DUPLICATE)]
            if wrong:
                raise RuntimeError(f"{len(wrong)} of {len(chunk)} deliveries were not suppressed: {wrong[0]}")
            self.sent += len(chunk)
            if time.monotonic() > report:
                report += 30
                self.log(f"  {self.name}: {self.sent:,} sent, {self.sent / (self.seconds + time.monotonic() - began):,.0f} per s")

        await asyncio.gather(*(one(c) for c in chunks))
        self.seconds += time.monotonic() - began
        if total:
            self.log(f"  {self.name}: {total:,} deliveries in {time.monotonic() - began:.0f}s")


async def shard_summaries(wfi: WfiClient, name: str, shards: int) -> list[dict[str, Any]]:
    """Each shard's own summary (``capacity``, ``activation_id``, counters), shard 0 first."""
    return list(await asyncio.gather(*(wfi._handle(name, k).query(SUMMARY_QUERY) for k in range(shards))))


async def fill_to(filler: Filler, fill: float, capacity_bytes: int) -> list[dict[str, Any]]:
    """Deliver new ids until every shard's capacity fill (its own estimate) reaches ``fill``, in rounds
    that never pass it; the summaries."""
    for _ in range(40):
        parts = await shard_summaries(filler.wfi, filler.name, filler.shards)
        need = [0 if p["capacity"]["fill"] >= fill else
                max(1, ids_toward(fill, capacity_bytes, p["capacity"]["estimated_state_bytes"])) for p in parts]
        if not any(need):
            return parts
        filler.log(f"  filling {filler.name}: {sum(need):,} new ids over {sum(1 for n in need if n)} shard(s)")
        await filler.send(need)
    raise RuntimeError(f"{filler.name}: the shards did not reach {fill:.0%} of capacity after 40 rounds")


async def current_runs(client: Client, name: str, shards: int) -> list[Any]:
    """``describe()`` of each shard's current run."""
    return list(await asyncio.gather(*(client.get_workflow_handle(shard_workflow_id(name, k)).describe()
                                       for k in range(shards))))


async def force_continue_as_new(wfi: WfiClient, spec: ActivationSpec, workdir: pathlib.Path, *, rebind_to: int) -> list[int]:
    """Make every shard continue as new now: activate ``spec``'s workflow again with
    ``max_history_events`` set to ``rebind_to`` (a new binding: each shard records the rebinding and
    continues as new at once). Returns once every shard's new run answers with the new binding:
    the bytes of the state each new run was started with."""
    shards = spec.shards
    before = {d.run_id for d in await current_runs(wfi.client, spec.workflow, shards)}
    queue = spec.run.task_queue  # make_spec's run queue is the activation's task queue
    rebound = spec_for(workdir, spec.workflow, queue, shards=shards, history_events=rebind_to,
                       retention=spec.policies.dedup_retention)
    if rebound.activation_id == spec.activation_id:
        raise RuntimeError("the rebinding kept the activation id: nothing would continue as new")
    await wfi.activate(rebound)

    async def carried() -> bool:
        runs = await current_runs(wfi.client, spec.workflow, shards)
        if any(d.run_id in before for d in runs):
            return False
        parts = await shard_summaries(wfi, spec.workflow, shards)
        return all(p["activation_id"] == rebound.activation_id for p in parts)

    await wait_for(carried, timeout=600, what=f"every shard of {spec.workflow} continuing as new")
    return await carried_sizes(wfi.client, spec.workflow, shards)


async def carried_sizes(client: Client, name: str, shards: int) -> list[int]:
    """The bytes of the state each shard's current run was started with (0 for a first run)."""
    async def one(k: int) -> int:
        handle = client.get_workflow_handle(shard_workflow_id(name, k))
        async for event in handle.fetch_history_events(page_size=1):
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            return len(payloads[1].data) if len(payloads) > 1 else 0
        return 0

    return list(await asyncio.gather(*(one(k) for k in range(shards))))


async def all_carried_sizes(client: Client, name: str, shards: int) -> list[int]:
    """The bytes of every carried state of every shard's continue-as-new chain (its runs after the first)."""
    sizes: list[int] = []
    for k in range(shards):
        wid = shard_workflow_id(name, k)
        async for execution in client.list_workflows(f'WorkflowId = "{wid}"'):
            async for event in client.get_workflow_handle(wid, run_id=execution.run_id).fetch_history_events(page_size=1):
                payloads = event.workflow_execution_started_event_attributes.input.payloads
                if len(payloads) > 1 and payloads[1].data:
                    sizes.append(len(payloads[1].data))
                break
    return sizes


async def settled_memory(worker: BenchWorker, *, samples: int = 10) -> dict[str, int]:
    """The worker's VmRSS (median of ``samples`` readings SAMPLE_PERIOD apart, the worker idle) and VmHWM,
    read once the worker has had one ``trim_memory_every`` to give back what it freed (wf_initiation._memory)."""
    await asyncio.sleep(TRIM_EVERY.total_seconds() + 1)
    readings = []
    for _ in range(samples):
        readings.append(worker.memory())
        await asyncio.sleep(SAMPLE_PERIOD)
    return {"VmRSS": int(statistics.median(r["VmRSS"] for r in readings)), "VmHWM": readings[-1]["VmHWM"]}


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"
