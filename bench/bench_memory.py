"""Worker memory per retained delivery id: the pure engine under tracemalloc, and a real worker's RSS.

    .venv/bin/python bench/bench_memory.py [--ids 80000] [--carry-every 2000] [--phase both|engine|worker]
                                           [--worker-ids 75000] [--in-flight 4] [--fresh-loads 3]

**Engine** (no server). Feeds one engine ``--ids`` deliveries with random UUID delivery ids, each
suppressed by ``when`` (so each id is retained for ``dedup_retention`` and starts no run), and
continues as new every ``--carry-every`` deliveries as the activation workflow does: the state is
encoded, decoded and a new engine built from it, the old one dropped. It measures the Python heap
(tracemalloc) that the engine holds, less that of an engine holding no id, divided by the ids it
holds:

- after continue-as-new: the engine a new run starts from (what a cached activation costs a worker
  between two continue-as-new points, at their start);
- within a run: the same engine just before its next continue-as-new (the peak of a run).

It also prints the carried state's size per id (what the wire costs) and the time to encode and to
decode it.

**Worker** (its own dev server, SQLite file). Two identical activation worker processes
(``bench/_workers.py``), each serving one activation of the same Workfile on its own task queue. The
same ``--worker-ids`` deliveries go to both (75,000 by default: ~90% of a shard's capacity, which
counts the run's newest ids as full records), by ``deliver_many`` (500 per update, ``--in-flight`` updates at
a time), interleaved, each with a new random UUID id: the *full* activation retains them for 24 h,
the *empty* one (``dedup_retention: 0s``) for none, so both workers carry the same traffic (the same
decoding, ``when`` evaluations, records and continue-as-new) and only one keeps the ids. Then both
activations are made to continue as new (a rebinding), and the processes' resident memory
(``/proc/<pid>/status``) is read:

- after continue-as-new: both workers restarted, each activation loaded by a fresh process from
  its carried state, (VmRSS full - VmRSS empty) / ids: what a worker holding the shard costs (a
  worker that took it over, or that restarted; ``bench_full_shards.py`` uses this figure). Two
  processes of the same code differ by a few hundred KB, ~5 bytes per id here, so both are
  restarted ``--fresh-loads`` times (3) and the median taken;
- within a run: (VmRSS full - VmRSS empty) / ids of the workers that filled them, read (settled)
  once every id is in and before the run's next continue-as-new: what a worker holds per id while
  its run holds the shard;
- one shard's peak (informational): (VmHWM full - VmHWM empty) / ids, the most either process held.
  It is reached inside a continue-as-new's hand-off, where the SDK and its core hold about seven
  copies of the carried state at once (docs/upstream/README.md): ~100 bytes per id of the one
  shard that is continuing, whatever else the worker holds, so a worker's peak per id falls as it
  holds more shards (``bench_full_shards.py`` measures the peak of a worker filling 16 shards, per
  id, against the within-a-run target). Printed with it: the transient in copies of the carried
  state ((VmHWM - VmRSS within a run), full less empty, over the carried bytes), what an id adds to
  the peak (its growth from half the ids, read then, to all of them, per id added; it swings with
  where the halfway peak fell);
- the filling worker after continue-as-new (informational): (VmRSS full - VmRSS empty) / ids once
  the rebinding's new runs hold the ids.

Targets (issue 35 item 1): at most 64 bytes per id after continue-as-new and 128 within a run, at the
same carried bytes per id, in both phases (in the worker phase, within a run: the settled RSS). Exits 1 above a target. Writes ``bench/results/memory.json``
(``bench_full_shards.py`` reads the worker's bytes per id from it).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import pathlib
import statistics
import sys
import tempfile
import time
import tracemalloc
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import Figure, Target, dev_server, results_dir, server_label, table, write_results  # noqa: E402
from bench._retained import (  # noqa: E402
    AFTER_TARGET,
    HISTORY_EVENTS,
    RETENTION,
    WITHIN_TARGET,
    Filler,
    force_continue_as_new,
    mib,
    settled_memory,
    shard_summaries,
    spec_for,
)
from bench._workers import BenchWorker  # noqa: E402
from tests.support.activation import make_spec  # noqa: E402
from wf_initiation.client import WfiClient  # noqa: E402
from wf_initiation.core.engine import Engine, decode_state, initial_state  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WORKFILE = 'name: memory\non:\n  http.request: {}\n  as: hook\n  when: "{{ hook.body.go }}"\n'
FULL_SHARD_IDS = 84_000  # one activation's capacity with 36-character ids (docs/limits.md)


def _spec() -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        return make_spec(pathlib.Path(tmp), WORKFILE, task_queue="q", lifecycle_events=False,
                         dedup_retention="24h")


def _traced(build: Any) -> tuple[Any, int]:
    """What ``build()`` returns and the heap it holds once built (collected before and after)."""
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    value = build()
    gc.collect()
    return value, tracemalloc.get_traced_memory()[0] - before


def engine_phase(args: argparse.Namespace) -> list[Figure]:
    spec = _spec()
    engine = Engine(spec, initial_state(spec, T0))
    blob = engine.encode_state()
    tracemalloc.start()
    _, empty = _traced(lambda: Engine(spec, decode_state(blob)))
    now = T0
    encode_s = decode_s = 0.0
    within = 0
    for i in range(args.ids):
        now += timedelta(milliseconds=10)
        engine.deliver(None, {"delivery_id": str(uuid.uuid4()), "method": "POST", "body": {"go": False}}, now)
        if (i + 1) % args.carry_every == 0 or i + 1 == args.ids:
            if i + 1 == args.ids:  # the run's peak: every id held, just before continue-as-new
                gc.collect()
                within = tracemalloc.get_traced_memory()[0]
            began = time.perf_counter()
            blob = engine.encode_state()
            encode_s = time.perf_counter() - began
            del engine
            began = time.perf_counter()
            engine, _ = _traced(lambda carried=blob: Engine(spec, decode_state(carried)))
            decode_s = time.perf_counter() - began
    gc.collect()
    held = tracemalloc.get_traced_memory()[0]
    # ``within`` also holds the blob being built and the old engine's garbage: measure the new
    # engine alone against an empty one (after) and the peak against the same baseline (within).
    del engine
    gc.collect()
    baseline = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    after_per_id = (held - baseline - empty) / args.ids
    within_per_id = (within - baseline - empty) / args.ids
    print(f"engine: {args.ids:,} ids suppressed by `when`, continue-as-new every {args.carry_every:,}")
    print(f"engine: carried state {len(blob):,} bytes ({len(blob) / args.ids:.1f} B per id); "
          f"encode {encode_s * 1000:.0f} ms, decode + new engine {decode_s * 1000:.0f} ms")
    note = f"pure engine under tracemalloc, {args.ids:,} ids, continue-as-new every {args.carry_every:,}"
    return [
        Figure(metric="engine heap per retained id, after continue-as-new", unit="B", ours=after_per_id,
               target=Target(op="<=", value=AFTER_TARGET, on="ours"), note=note),
        Figure(metric="engine heap per retained id, within a run", unit="B", ours=within_per_id,
               target=Target(op="<=", value=WITHIN_TARGET, on="ours"), note=note),
        Figure(metric="carried state per retained id (engine)", unit="B", ours=len(blob) / args.ids, note=note),
    ]


async def worker_phase(args: argparse.Namespace, log: Any) -> tuple[list[Figure], dict[str, Any]]:
    extra = [a for kv in args.dynamic_config for a in ("--dynamic-config-value", kv)]
    async with dev_server(in_memory=False, extra_args=extra, log_file=results_dir() / "memory-server.log") as server:
        address = server.client.service_client.config.target_host
        suffix = uuid.uuid4().hex[:6]
        logs = results_dir() / "memory-workers.log"
        workers = {side: BenchWorker(address, f"bench-memory-{side}-{suffix}", logs) for side in ("full", "empty")}
        with tempfile.TemporaryDirectory() as tmp:
            try:
                for worker in workers.values():
                    worker.start()
                return await _measure_workers(server.client, workers, pathlib.Path(tmp), suffix, args, log)
            finally:
                for worker in workers.values():
                    worker.stop()


async def _measure_workers(client: Any, workers: dict[str, BenchWorker], workdir: pathlib.Path, suffix: str,
                           args: argparse.Namespace, log: Any) -> tuple[list[Figure], dict[str, Any]]:
    specs, fillers = {}, {}
    for side, worker in workers.items():
        queue = worker.task_queue
        wfi = WfiClient(client, task_queue=queue)
        retention = RETENTION if side == "full" else timedelta(0)
        specs[side] = spec_for(workdir, f"memory-{side}-{suffix}", queue, retention=retention)
        await wfi.activate(specs[side])
        fillers[side] = Filler(wfi, specs[side].workflow, 1, in_flight=args.in_flight, log=log)
    log(f"{args.worker_ids:,} deliveries to each activation ({args.in_flight} updates in flight each)")
    step, half = 10_000, args.worker_ids // 2
    for done, end in ((0, half), (half, args.worker_ids)):  # the peak so far is read at half the ids
        for at in range(done, end, step):  # interleaved, so both workers carry the same traffic at once
            n = min(step, end - at)
            await asyncio.gather(fillers["full"].send([n]), fillers["empty"].send([n]))
        if done == 0:
            halfway = {side: w.memory()["VmHWM"] for side, w in workers.items()}
    held = {side: (await shard_summaries(fillers[side].wfi, specs[side].workflow, 1))[0]["capacity"]["retained_ids"]
            for side in workers}
    if held["full"] < args.worker_ids or held["empty"] > args.worker_ids // 20:
        raise RuntimeError(f"retained ids: full {held['full']}, empty {held['empty']}; expected {args.worker_ids} and "
                           "few (a retention of 0 s)")
    within = {side: await settled_memory(w) for side, w in workers.items()}  # the runs hold every id
    carried = {side: (await force_continue_as_new(fillers[side].wfi, specs[side], workdir,
                                                   rebind_to=HISTORY_EVENTS + 1))[0] for side in workers}
    log(f"both continued as new: carried {carried['full']:,} / {carried['empty']:,} bytes (full / empty)")
    mem = {side: await settled_memory(w) for side, w in workers.items()}
    ids = held["full"] - held["empty"]
    loads = []  # two processes of the same code differ by a few hundred KB: the median of a few pairs
    for _ in range(args.fresh_loads):
        for side in workers:
            workers[side].stop()
            workers[side].start()
        for side in workers:  # a fresh process loads the activation from its carried state when asked
            await shard_summaries(fillers[side].wfi, specs[side].workflow, 1)
        fresh = {side: await settled_memory(w) for side, w in workers.items()}
        loads.append((fresh["full"]["VmRSS"] - fresh["empty"]["VmRSS"]) / ids)
    fresh_per_id = statistics.median(loads)
    log(f"retained ids: {held['full']:,} / {held['empty']:,} (full / empty); fresh loads: "
        + ", ".join(f"{x:.1f}" for x in loads) + " bytes per id")
    within_per_id = (within["full"]["VmRSS"] - within["empty"]["VmRSS"]) / ids
    peak_per_id = (mem["full"]["VmHWM"] - mem["empty"]["VmHWM"]) / ids
    transient = {side: within[side]["VmHWM"] - within[side]["VmRSS"] for side in workers}
    copies = (transient["full"] - transient["empty"]) / carried["full"]
    filler_per_id = (mem["full"]["VmRSS"] - mem["empty"]["VmRSS"]) / ids
    # What the peak grows by per id from half the ids to all of them (the same traffic on both sides):
    # a retained id's share of the peak, without what the worker's peak holds whatever the ids.
    grown = (mem["full"]["VmHWM"] - halfway["full"]) - (mem["empty"]["VmHWM"] - halfway["empty"])
    marginal_per_id = grown / (ids - half)
    for label, m in (("filling, within the run", within), ("filling, after continue-as-new", mem), ("fresh", fresh)):
        log(f"{label} workers: VmRSS {mib(m['full']['VmRSS'])} / {mib(m['empty']['VmRSS'])}, "
            f"VmHWM {mib(m['full']['VmHWM'])} / {mib(m['empty']['VmHWM'])} (full / empty)")
    note = f"{ids:,} ids; two worker processes, full minus empty"
    figures = [
        Figure(metric="worker RSS per retained id after continue-as-new (a worker that took the shard over then)",
               unit="B", ours=fresh_per_id, target=Target(op="<=", value=AFTER_TARGET, on="ours"),
               note=note + f"; both workers restarted after the rebinding, each loaded its activation from the carried "
                           f"state; the median of {len(loads)} restarts ({min(loads):.1f}-{max(loads):.1f})"),
        Figure(metric="worker RSS per retained id within a run (the worker that filled it, its run holding every id)",
               unit="B", ours=within_per_id, target=Target(op="<=", value=WITHIN_TARGET, on="ours"),
               note=note + ", the same traffic; VmRSS settled before the run's next continue-as-new"),
        Figure(metric="one shard's peak RSS per retained id (the worker that filled it)", unit="B", ours=peak_per_id,
               note=note + ", the same traffic; VmHWM, inside a continue-as-new's hand-off; informational "
                           "(bench_full_shards.py: the peak of a worker filling 16 shards, per id, against the target)"),
        Figure(metric="the same peak, from half the ids to all", unit="B", ours=marginal_per_id,
               note=note + f"; VmHWM at {half:,} ids and at {ids:,}: what an id adds to the peak (where the "
                           "halfway peak fell makes it swing)"),
        Figure(metric="a continue-as-new's transient, in copies of the carried state", unit="x", ours=copies,
               note="(VmHWM - VmRSS within the run), full less empty, over the carried bytes: the SDK's copies"),
        Figure(metric="the filling worker's RSS per retained id after continue-as-new", unit="B", ours=filler_per_id,
               note=note + "; VmRSS after the rebinding"),
        Figure(metric=f"worker memory per full shard ({FULL_SHARD_IDS:,} ids) after continue-as-new", unit="MiB",
               ours=fresh_per_id * FULL_SHARD_IDS / 2**20, note="the first row times a full shard's ids"),
        Figure(metric="carried state per retained id (worker)", unit="B", ours=carried["full"] / ids,
               note="the continue-as-new input's state payload"),
    ]
    meta = {"worker": {"ids": ids, "rss_bytes_per_id": fresh_per_id, "within_bytes_per_id": within_per_id,
                       "within_memory": within, "transient_copies": copies, "hwm_bytes_per_id": peak_per_id,
                       "hwm_bytes_per_id_marginal": marginal_per_id, "halfway": halfway,
                       "fresh_loads_bytes_per_id": loads, "filling_rss_bytes_per_id": filler_per_id, "memory": mem, "fresh_memory": fresh,
                       "carried": carried}}
    return figures, meta


async def main(args: argparse.Namespace) -> int:
    began, load_before = time.monotonic(), os.getloadavg()[0]
    log = lambda msg: print(f"[{time.monotonic() - began:6.1f}s] {msg}", flush=True)  # noqa: E731
    figures: list[Figure] = []
    meta: dict[str, Any] = {"ids": args.ids, "worker_ids": args.worker_ids, "carry_every": args.carry_every,
                            "phase": args.phase}
    if args.phase in ("both", "engine"):
        log("engine phase (tracemalloc)")
        figures += engine_phase(args)
    if args.phase in ("both", "worker"):
        log("worker phase (real worker processes on a dev server)")
        worker_figures, worker_meta = await worker_phase(args, log)
        figures += worker_figures
        meta.update(worker_meta, server=server_label(False, [a for kv in args.dynamic_config for a in ("--dynamic-config-value", kv)]))
    load = f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}"
    meta["load_average"] = load
    print(f"\nworker memory per retained delivery id, {time.monotonic() - began:.0f}s, load average {load} "
          f"on {os.cpu_count()} cores\n")
    print(table(figures))
    path = write_results("memory", figures, meta)
    print(f"\nwritten to {path.relative_to(ROOT)}")
    return 0 if all(f.passed is not False for f in figures) else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", type=int, default=80_000, help="engine phase: delivery ids retained (default 80,000)")
    parser.add_argument("--worker-ids", type=int, default=75_000, help="worker phase: delivery ids retained (default 75,000)")
    parser.add_argument("--carry-every", type=int, default=2_000,
                        help="engine phase: deliveries between continue-as-new (default 2,000)")
    parser.add_argument("--phase", choices=("both", "engine", "worker"), default="both",
                        help="engine: tracemalloc alone, no server; worker: the workers' RSS alone")
    parser.add_argument("--in-flight", type=int, default=4, help="worker phase: deliver_many updates in flight per activation")
    parser.add_argument("--fresh-loads", type=int, default=3,
                        help="worker phase: restarts of both workers after continue-as-new; the median is taken (default 3)")
    parser.add_argument("--dynamic-config", action="append", default=["history.maxInFlightUpdates=100"], metavar="KEY=VALUE")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
