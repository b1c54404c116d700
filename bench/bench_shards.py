"""An activation spread over N shards next to N bare workflows, in one run on one dev server (issue 21 item 6).

    .venv/bin/python bench/bench_shards.py [--shards 1,2,4,8] [--deliveries 2000] [--concurrency 16] [--repeat 3]
                                           [--dynamic-config KEY=VALUE ...]

For each N it activates a workflow with ``scale: {shards: N}`` and measures, next to N bare
workflows fed the same way in the same run:

1. deliveries that start no run (half duplicates, half suppressed by ``when``), by signal from
   ``--concurrency`` senders, each routed to its shard by ``WfiClient``, counted once every shard
   processed them; bare: the same signals to N ``bench.BareCounter`` workflows (ids spread by the
   same hash), counted once processed. Target: ours >= 0.9x of N bare workflows.
2. deliveries that start a run, by signal, until every run is visible (both sides; ours then
   checked, untimed, to have recorded each start once);
   bare: N ``bench.UpdateThenStart`` design floors (a signal records the delivery, an activity
   starts the runs). Target: ours >= 0.9x.
3. acknowledged latency p50 of one ``deliver`` update at a time (the route is one hop, whatever N).

Each ratio is the median of ``--repeat`` (5) pairs' ratios, ours first in every other pair (each
side's rate shown is its median over the pairs; the floor alone swings by a third between pairs, so
the ratio of those medians can mix pairs). Each side's timed part starts once the dev server is quiet (``BenchServer.quiet``) and, for the no-run phase, once
the activation is idle (``idle``: the runs its set-up started have ended and their endings are
reported), as the bare workflows are: a stream that met the server busy with what came before ran
at ~250 signals per s instead of ~450-500 on this machine, whichever side it was.

The dev server has one history shard (it serialises every workflow's writes on one SQLite file), so
absolute rates do not grow with N here: the ratios measure what spreading an activation costs. On
a cluster with many history shards, point ``TEMPORAL_ADDRESS`` at it (``--address``) to see the
rates grow. Exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import statistics
import sys
import tempfile
import time
import uuid
from functools import partial
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import (  # noqa: E402
    BareCounter,
    Figure,
    Target,
    UpdateThenStart,
    count_workflows,
    dev_server,
    drain,
    fan_out,
    idle,
    new_id,
    percentile,
    results_dir,
    server_label,
    table,
    wait_for,
    write_results,
)
from bench._workers import Queues, worker_processes  # noqa: E402
from tests.support.activation import make_spec  # noqa: E402
from wf_initiation.client import WfiClient  # noqa: E402
from wf_initiation.core.sharding import shard_of  # noqa: E402
from wf_initiation.wire import ECHO_RUN_WORKFLOW, shard_workflow_id  # noqa: E402

HOOK = """
name: {name}
on:
  http.request: {{}}
  as: request
  when: "{{{{ request.body.keep }}}}"
"""


def hook(i: int | str, *, keep: bool) -> dict[str, Any]:
    return {"delivery_id": str(i) if not isinstance(i, str) else i, "method": "POST", "body": {"keep": keep}}


class ShardBench:
    def __init__(self, server: Any, queues: Queues, workdir: pathlib.Path, concurrency: int) -> None:
        self.server = server
        self.client = server.client
        self.queues = queues
        self.workdir = workdir
        self.n = concurrency
        self.wfi = WfiClient(self.client, task_queue=queues.activations)

    async def activate(self, shards: int) -> str:
        name = f"bench-shards{shards}-{uuid.uuid4().hex[:6]}"
        spec = make_spec(self.workdir, HOOK.format(name=name), task_queue=self.queues.activations,
                         run_queue=self.queues.runs, scale={"shards": shards}, lifecycle_events=False)
        await self.wfi.activate(spec)
        return name

    async def _processed(self, name: str, total: int) -> bool:
        return (await self.wfi.summary(name))["counters"].get("deliveries", 0) >= total

    async def no_run(self, shards: int, m: int) -> float:
        name = await self.activate(shards)
        kept = [hook(f"k-{i}", keep=True) for i in range(min(100, m))]
        await self.wfi.deliver_many(name, [(None, p) for p in kept])
        await drain(self.client, ECHO_RUN_WORKFLOW)
        await idle(self.client, [shard_workflow_id(name, k) for k in range(shards)])  # their endings reported
        stream = [kept[(i // 2) % len(kept)] if i % 2 == 0 else hook(f"s-{i}", keep=False) for i in range(m)]
        base = (await self.wfi.summary(name))["counters"]["deliveries"]
        await self.server.quiet()  # what the set-up or the previous side left the server to do
        began = time.monotonic()
        await fan_out(m, self.n, lambda i: self.wfi.signal_delivery(name, stream[i]))
        done = await wait_for(lambda: self._processed(name, base + m), timeout=600, what=f"{m} signals over {shards} shard(s)")
        return m / (done - began)

    async def bare_no_run(self, shards: int, m: int) -> float:
        handles = [await self.client.start_workflow(BareCounter.run, id=new_id("bench-bare"), task_queue=self.queues.activations)
                   for _ in range(shards)]
        for h in handles:  # as every activation has handled one update (update-with-start)
            await h.execute_update(BareCounter.hit_update, {"entry": None, "payload": hook("warm", keep=False)},
                                   id=f"warm-{uuid.uuid4().hex[:8]}")
        stream = [hook(f"b-{i}", keep=False) for i in range(m)]
        routes = [shard_of("request", p["delivery_id"], shards) for p in stream]
        await self.server.quiet()  # what the set-up or the previous side left the server to do
        began = time.monotonic()
        await fan_out(m, self.n, lambda i: handles[routes[i]].signal(BareCounter.hit, {"entry": None, "payload": stream[i]}))
        want = [routes.count(k) + 1 for k in range(shards)]

        async def all_counted() -> bool:
            counts = await asyncio.gather(*(h.query(BareCounter.count) for h in handles))
            return all(c >= w for c, w in zip(counts, want))

        done = await wait_for(all_counted, timeout=600, what=f"{m} bare signals over {shards} workflow(s)")
        for h in handles:
            await h.signal(BareCounter.finish)
        return m / (done - began)

    async def starts(self, shards: int, m: int) -> float:
        name = await self.activate(shards)
        await self.server.quiet()  # what the set-up or the previous side left the server to do
        began = time.monotonic()
        await fan_out(m, self.n, lambda i: self.wfi.signal_delivery(name, hook(f"r-{i}", keep=True)))

        # Timed as the floor is, until the runs are visible. Not by polling the activation's summary:
        # that is N queries every sample, each a task on a busy shard, which the floor never pays.
        done = await wait_for(lambda: self._visible(f'WfiWorkflow = "{name}"', m), timeout=600,
                              what=f"{m} runs over {shards} shard(s) visible")
        summaries: list[dict[str, Any]] = []

        async def recorded() -> bool:  # then checked, untimed: the activation recorded every start, once
            summaries[:] = [await self.wfi.summary(name)]
            return summaries[0]["runs_starting"] == summaries[0]["runs_pending"] == 0

        await wait_for(recorded, timeout=120, what="the starts recorded")
        if (started := summaries[0]["counters"].get("runs_started", 0)) != m:
            raise RuntimeError(f"{m} run-starting deliveries over {shards} shard(s) started {started} runs")
        await drain(self.client, ECHO_RUN_WORKFLOW)
        return m / (done - began)

    async def _visible(self, query: str, m: int) -> bool:
        return await count_workflows(self.client, query) >= m

    async def bare_starts(self, shards: int, m: int) -> float:
        prefix = new_id("bench-floor-run")
        handles = [await self.client.start_workflow(UpdateThenStart.run, self.queues.runs, id=new_id("bench-floor"),
                                                    task_queue=self.queues.activations) for _ in range(shards)]
        ids = [f"{prefix}-{i}" for i in range(m)]
        routes = [shard_of("request", i, shards) for i in ids]
        await self.server.quiet()  # what the set-up or the previous side left the server to do
        began = time.monotonic()
        await fan_out(m, self.n, lambda i: handles[routes[i]].signal(UpdateThenStart.deliver_signal, hook(ids[i], keep=True)))
        for h in handles:
            await h.signal(UpdateThenStart.finish)
        await asyncio.gather(*(h.result() for h in handles))
        done = await wait_for(lambda: self._visible(f'WorkflowId STARTS_WITH "{prefix}-"', m), timeout=120, what="floor runs")
        await drain(self.client, ECHO_RUN_WORKFLOW)
        return m / (done - began)

    async def ack_p50(self, shards: int, calls: int) -> float:
        name = await self.activate(shards)
        latencies = await fan_out(calls, 1, lambda i: self.wfi.deliver(name, hook(f"a-{i}", keep=False)))
        return percentile(latencies, 0.5) * 1000


async def _pairs(repeat: int, ours: Any, bare: Any) -> tuple[float, float, list[float]]:
    """``repeat`` pairs, each side measured right after the other, ours first in every other pair
    (each side's timed part starts once the server is quiet, ``BenchServer.quiet``): each side's
    median and every pair's ratio. The figure's ratio is the median of the pairs' ratios: the two
    sides of a pair meet the same machine, while the floor alone swings by a third from one pair to
    the next on this machine (the sides' medians may come from different pairs)."""
    pairs = []
    for k in range(repeat):
        if k % 2 == 0:
            pairs.append((await ours(), await bare()))
        else:
            b = await bare()
            pairs.append((await ours(), b))
    return (statistics.median(o for o, _ in pairs), statistics.median(b for _, b in pairs),
            [round(o / b, 3) for o, b in pairs])


async def measure(bench: ShardBench, args: argparse.Namespace, log: Any) -> list[Figure]:
    figures: list[Figure] = []
    for shards in args.shards:
        log(f"{shards} shard(s): deliveries that start no run, {args.deliveries} signals, {args.repeat} pair(s)")
        ours, bare, ratios = await _pairs(args.repeat, partial(bench.no_run, shards, args.deliveries),
                                          partial(bench.bare_no_run, shards, args.deliveries))
        figures.append(Figure(metric=f"no-run deliveries by signal, {shards} shard(s)", unit="/s", ours=ours, bare=bare,
                              paired=statistics.median(ratios), target=Target(op=">=", value=0.9),
                              note=f"bare: the same signals to {shards} bench.BareCounter workflow(s), spread by the same hash; "
                                   f"each side's median of {args.repeat} pairs; ratio: the median of the pairs' ratios {ratios}"))
        log(f"  pairs' ratios: {ratios}")
        starts = max(100, args.deliveries // 5)
        log(f"{shards} shard(s): deliveries that start a run, {starts} signals, {args.repeat} pair(s)")
        ours, bare, ratios = await _pairs(args.repeat, partial(bench.starts, shards, starts),
                                          partial(bench.bare_starts, shards, starts))
        figures.append(Figure(metric=f"run-starting deliveries by signal, {shards} shard(s)", unit="/s", ours=ours, bare=bare,
                              paired=statistics.median(ratios), target=Target(op=">=", value=0.9),
                              note=f"bare: {shards} bench.UpdateThenStart design floor(s) fed by signal; "
                                   f"each side's median of {args.repeat} pairs; ratio: the median of the pairs' ratios {ratios}"))
        log(f"  pairs' ratios: {ratios}")
        figures.append(Figure(metric=f"ack latency p50, one deliver update at a time, {shards} shard(s)", unit="ms",
                              ours=await bench.ack_p50(shards, 30), note="informational: one hop whatever the shard count"))
    return figures


async def main(args: argparse.Namespace) -> int:
    extra = [a for kv in args.dynamic_config for a in ("--dynamic-config-value", kv)]
    began, load_before = time.monotonic(), os.getloadavg()[0]
    log = lambda msg: print(f"[{time.monotonic() - began:6.1f}s] {msg}", flush=True)  # noqa: E731
    async with dev_server(in_memory=False, extra_args=extra, log_file=results_dir() / "shards-server.log") as server:
        suffix = uuid.uuid4().hex[:6]
        queues = Queues(activations=f"bench-shards-{suffix}", runs=f"bench-shards-runs-{suffix}")
        address = server.client.service_client.config.target_host
        with tempfile.TemporaryDirectory() as tmp, worker_processes(address, queues, results_dir() / "shards-workers.log"):
            figures = await measure(ShardBench(server, queues, pathlib.Path(tmp), args.concurrency), args, log)
    load = f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}"
    print(f"\nsharded activation vs N bare workflows, {server_label(False, extra)}, {args.concurrency} senders, "
          f"{time.monotonic() - began:.0f}s, load average {load} on {os.cpu_count()} cores\n")
    print(table(figures))
    path = write_results("shards", figures, {"server": server_label(False, extra), "load_average": load,
                                             "shards": args.shards, "deliveries": args.deliveries})
    print(f"\nwritten to {path.relative_to(ROOT)}")
    return 0 if all(f.passed is not False for f in figures) else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=lambda v: [int(x) for x in v.split(",")], default=[1, 2, 4, 8])
    parser.add_argument("--deliveries", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5, help="pairs per figure, alternating which side goes first; "
                        "the ratio is the median of the pairs' ratios (default 5)")
    parser.add_argument("--dynamic-config", action="append", default=["history.maxInFlightUpdates=100"], metavar="KEY=VALUE")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
