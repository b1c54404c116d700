"""Many full shards in one worker, and that worker SIGKILLed and restarted (issue 35 item 2).

    .venv/bin/python bench/bench_full_shards.py [--shards 16] [--fill 0.8] [--capacity-ids 0]
                                                [--in-flight 4] [--restart-target 30] [--per-id-bytes B]

One dev server (SQLite file) and two identical activation worker processes (``bench/_workers.py``),
each serving one activation of ``--shards`` shards (``scale: {shards: N}``) on its own task queue:
the *full* one, filled until every shard's capacity fill (the engine's own estimate, ``wfi state
--summary``) reaches ``--fill``, with deliveries suppressed by ``when`` that each carry a new random
UUID id (``deliver_many``, 500 per update, ``--in-flight`` updates at a time); the *empty* one,
activated and never delivered to (the baseline process).

**The capacity** is the product's by default (~84,000 ids a shard, ~67,000 at 80%: 1.07 million
deliveries over 16 shards, estimated 10-20 minutes on the 2-core machine at the ~2,000-3,000
deliveries per s measured with 2 shards). ``--capacity-ids N`` lowers it so that N retained ids fill
a shard (e.g. 20,000: a quarter of the deliveries): both workers then run with
``WFI_BENCH_CAPACITY_BYTES`` (read by the bench worker only, never by the product). The table says
which was used. A lowered capacity makes the RSS ratio below compare less well with item 1's figure,
measured on a shard of 75,000 ids: each shard keeps its 500 newest ids as full records (~0.5 KB
each) whatever its size, so the smaller the shard, the more each id costs.

Then the full worker is SIGKILLed twice, each time started again at once, and from each restart
(the new process spawned) one ``deliver`` update per shard is sent at once, timed until every shard
has answered:

1. as the filling left the shards, in the middle of their runs: the restart replays each shard's
   history since its last continue-as-new (target: every shard answers within ``--restart-target``
   seconds, 30 by default);
2. after every shard continued as new (a rebinding): the restart loads the carried states alone.
   The empty worker is restarted beside it and also takes one delivery per shard, and (VmRSS full -
   VmRSS empty) is the memory of holding the shards, against the worker memory per retained id of
   ``bench_memory.py --phase worker`` (``bench/results/memory.json``, or ``--per-id-bytes``) times
   the ids held (target: at most 1.2x).

About 10 s of either restart is Temporal's: a killed worker's shards stay bound to its sticky task
queue, and the server gives their next task to another worker only after the sticky
schedule-to-start timeout (``Worker(sticky_queue_schedule_to_start_timeout=...)``, 10 s by default)
has passed.

Before the first kill, the filling worker's peak (VmHWM) over the empty one's, per id held, is item
1's memory within a run at the scale a worker holds shards: every shard's continue-as-new of the
fill is in it, where the SDK briefly holds about eight copies of the continuing shard's state
(target: at most 128 bytes per id, as ``bench_memory.py``'s; the empty worker took no traffic, so
the figure errs high).

Also printed: the RSS of the filling worker before the first kill and after the first restart, the
history each shard's run had when killed, and the carried (continue-as-new) state sizes. Exits 1
when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import Figure, Target, dev_server, results_dir, server_label, table, write_results  # noqa: E402
from bench._retained import (  # noqa: E402
    ENTRY,
    HISTORY_EVENTS,
    WITHIN_TARGET,
    Filler,
    all_carried_sizes,
    capacity_for,
    current_runs,
    fill_to,
    force_continue_as_new,
    ids_per_shard,
    mib,
    settled_memory,
    shard_summaries,
    spec_for,
    suppressed,
)
from bench._workers import BenchWorker  # noqa: E402
from wf_initiation.client import WfiClient  # noqa: E402
from wf_initiation.core.limits import CAPACITY_BYTES, MAX_CARRIED_STATE_BYTES  # noqa: E402

RSS_TARGET = 1.2
DEFAULT_PER_ID = 64.0  # issue 35 item 1's target, when bench_memory.py's worker figure is not at hand


def per_id_figure(args: argparse.Namespace) -> tuple[float, str]:
    """Worker bytes per retained id after continue-as-new (item 1) and where it comes from."""
    if args.per_id_bytes is not None:
        return args.per_id_bytes, "--per-id-bytes"
    path = results_dir() / "memory.json"
    if path.exists():
        worker = json.loads(path.read_text()).get("worker")
        if worker and worker.get("rss_bytes_per_id"):
            return float(worker["rss_bytes_per_id"]), f"bench_memory.py's worker phase ({worker['ids']:,} ids, {path.name})"
    return DEFAULT_PER_ID, "item 1's target (no bench/results/memory.json with a worker phase)"


async def answer_times(wfi: WfiClient, name: str, shards: int, since: float) -> list[float]:
    """Send one ``deliver`` update to each shard at once; the seconds from ``since`` until each answered."""
    ids = ids_per_shard([1] * shards, shards)

    async def one(k: int) -> float:
        result = await wfi.deliver(name, suppressed(ids[k][0]), entry=ENTRY)
        if result.disposition.value != "suppressed":
            raise RuntimeError(f"shard {k} answered {result.disposition.value}: {result.message}")
        return time.monotonic() - since

    return list(await asyncio.gather(*(one(k) for k in range(shards))))


async def restart(worker: BenchWorker, wfi: WfiClient, name: str, shards: int) -> tuple[float, float, list[float]]:
    """SIGKILL ``worker`` and start it again at once, while one ``deliver`` per shard is sent from the
    restart: (seconds until the new process was ready, until every shard answered, each shard's)."""
    worker.kill()
    restarted_at = time.monotonic()
    answers, ready_s = await asyncio.gather(answer_times(wfi, name, shards, restarted_at), asyncio.to_thread(worker.start))
    return ready_s, max(answers), answers


async def measure(client: Any, full: BenchWorker, empty: BenchWorker, capacity: int, workdir: pathlib.Path,
                  args: argparse.Namespace, log: Any) -> tuple[list[Figure], dict[str, Any]]:
    suffix = uuid.uuid4().hex[:6]
    wfi = {"full": WfiClient(client, task_queue=full.task_queue), "empty": WfiClient(client, task_queue=empty.task_queue)}
    specs = {side: spec_for(workdir, f"full-shards-{side}-{suffix}", w.task_queue, shards=args.shards)
             for side, w in (("full", full), ("empty", empty))}
    for side in specs:
        await wfi[side].activate(specs[side])
    name, shards = specs["full"].workflow, args.shards
    filler = Filler(wfi["full"], name, shards, in_flight=args.in_flight, log=log)
    log(f"filling {shards} shards to {args.fill:.0%} of a capacity of {capacity:,} bytes")
    began = time.monotonic()
    parts = await fill_to(filler, args.fill, capacity)
    fill_s = time.monotonic() - began
    ids = [p["capacity"]["retained_ids"] for p in parts]
    fills = [p["capacity"]["fill"] for p in parts]
    held = sum(ids)
    log(f"filled: {held:,} ids ({min(ids):,}-{max(ids):,} per shard, fill {min(fills):.2f}-{max(fills):.2f}) "
        f"in {fill_s:.0f}s ({filler.sent / fill_s:,.0f} deliveries per s)")
    runs = await current_runs(client, name, shards)
    history = [(d.raw_description.workflow_execution_info.history_length,
                d.raw_description.workflow_execution_info.history_size_bytes) for d in runs]
    await shard_summaries(wfi["empty"], specs["empty"].workflow, shards)  # the empty worker holds its shards too
    before, base = await settled_memory(full), await settled_memory(empty)
    log(f"before the kill: the filling worker's VmRSS {mib(before['VmRSS'])} (VmHWM {mib(before['VmHWM'])}), the empty "
        f"one's {mib(base['VmRSS'])}; the shards' runs have {min(h[0] for h in history):,}-{max(h[0] for h in history):,} "
        f"events, {mib(max(h[1] for h in history))} at most")

    # 1. Killed as the filling left the shards: the restart replays each run's history so far.
    ready_s, serving_s, answers = await restart(full, wfi["full"], name, shards)
    replayed = await settled_memory(full)
    log(f"kill 1 (mid-run): worker ready in {ready_s:.1f}s, every shard answered within {serving_s:.1f}s "
        f"(median {statistics.median(answers):.1f}s); VmRSS {mib(replayed['VmRSS'])}")

    # 2. Every shard continues as new, then killed again: the restart loads the carried states alone,
    # as does the empty worker restarted beside it: the memory of holding the shards.
    carried_now = await force_continue_as_new(wfi["full"], specs["full"], workdir, rebind_to=HISTORY_EVENTS + 1)
    await force_continue_as_new(wfi["empty"], specs["empty"], workdir, rebind_to=HISTORY_EVENTS + 1)
    ready2_s, serving2_s, _ = await restart(full, wfi["full"], name, shards)
    empty.stop()
    empty.start()
    # The same after the restart as the full worker: one delivery per shard (the first delivery's
    # one-off costs in a process, such as the `when` expression compiled, on both sides).
    await answer_times(wfi["empty"], specs["empty"].workflow, shards, time.monotonic())
    after, base_after = await settled_memory(full), await settled_memory(empty)
    per_id, source = per_id_figure(args)
    expected = per_id * held
    growth = after["VmRSS"] - base_after["VmRSS"]
    log(f"kill 2 (after a continue-as-new): every shard answered within {serving2_s:.1f}s; VmRSS {mib(after['VmRSS'])}, "
        f"the empty worker's {mib(base_after['VmRSS'])}; {held:,} ids x {per_id:.1f} B ({source}) = {mib(expected)}")
    sizes = await all_carried_sizes(client, name, shards)

    figures = [
        Figure(metric=f"time until every one of {shards} shards answers a delivery, from the restart (killed mid-run)",
               unit="s", ours=serving_s, target=Target(op="<=", value=args.restart_target, on="ours"),
               note=f"SIGKILL, a new worker process at once (ready in {ready_s:.1f}s), one deliver per shard; the runs "
                    f"had up to {max(h[0] for h in history):,} events to replay"),
        Figure(metric="the same, killed just after every shard continued as new", unit="s", ours=serving2_s,
               note=f"ready in {ready2_s:.1f}s; informational"),
        Figure(metric=f"worker RSS over the empty worker's, {shards} shards at {args.fill:.0%}, restarted after a "
                      "continue-as-new / item 1's figure x ids", unit="MiB", ours=growth / 2**20, bare=expected / 2**20,
               target=Target(op="<=", value=RSS_TARGET), note=f"{held:,} ids; {per_id:.1f} B per id from {source}"),
        Figure(metric="the same, the filling worker before the kill", unit="MiB",
               ours=(before["VmRSS"] - base["VmRSS"]) / 2**20, bare=expected / 2**20,
               note=f"its VmHWM {mib(before['VmHWM'])}; informational"),
        Figure(metric=f"the filling worker's peak per retained id within a run, {shards} shards", unit="B",
               ours=(before["VmHWM"] - base["VmHWM"]) / held, target=Target(op="<=", value=WITHIN_TARGET, on="ours"),
               note=f"(VmHWM filling - VmHWM empty) / {held:,} ids: every continue-as-new of the fill included "
                    "(the empty worker took no traffic); item 1's within-a-run target"),
        Figure(metric="the same, restarted mid-run (histories replayed)", unit="MiB",
               ours=(replayed["VmRSS"] - base["VmRSS"]) / 2**20, bare=expected / 2**20, note="informational"),
        Figure(metric="largest history of a shard's run at the first kill", unit="events", ours=max(h[0] for h in history),
               note=f"{mib(max(h[1] for h in history))}"),
        Figure(metric="largest carried state of a shard (every continue-as-new) / the carry limit", unit="B",
               ours=max(sizes), bare=MAX_CARRIED_STATE_BYTES,
               note=f"{len(sizes)} continue-as-new over {shards} shards, at the capacity used"),
        Figure(metric="carried state per shard after the fill, median", unit="B", ours=statistics.median(carried_now),
               note=f"{min(carried_now):,}-{max(carried_now):,} B over the shards"),
        Figure(metric="filling: deliveries per s", unit="/s", ours=filler.sent / fill_s,
               note=f"{filler.sent:,} deliveries by deliver_many, {args.in_flight} updates in flight"),
    ]
    meta = {"shards": shards, "fill": args.fill, "capacity_bytes": capacity, "capacity_ids": args.capacity_ids,
            "ids": ids, "fills": fills, "history_at_kill": history, "answers_s": answers, "ready_s": ready_s,
            "serving_after_carry_s": serving2_s,
            "memory": {"before": before, "empty_before": base, "after_restart_mid_run": replayed,
                       "after_restart_carried": after, "empty_after": base_after},
            "per_id_bytes": per_id, "per_id_source": source, "carried_sizes": sizes, "carried_after_fill": carried_now}
    return figures, meta


async def main(args: argparse.Namespace) -> int:
    extra = [a for kv in args.dynamic_config for a in ("--dynamic-config-value", kv)]
    began, load_before = time.monotonic(), os.getloadavg()[0]
    log = lambda msg: print(f"[{time.monotonic() - began:6.1f}s] {msg}", flush=True)  # noqa: E731
    capacity = capacity_for(args.capacity_ids) if args.capacity_ids else CAPACITY_BYTES
    env = {"WFI_BENCH_CAPACITY_BYTES": str(capacity)} if args.capacity_ids else {}
    async with dev_server(in_memory=False, extra_args=extra, log_file=results_dir() / "full-shards-server.log") as server:
        address = server.client.service_client.config.target_host
        suffix = uuid.uuid4().hex[:6]
        logs = results_dir() / "full-shards-workers.log"
        full = BenchWorker(address, f"bench-full-{suffix}", logs, env=env)
        empty = BenchWorker(address, f"bench-empty-{suffix}", logs, env=env)
        with tempfile.TemporaryDirectory() as tmp:
            try:
                full.start()
                empty.start()
                figures, meta = await measure(server.client, full, empty, capacity, pathlib.Path(tmp), args, log)
            finally:
                full.stop()
                empty.stop()
    load = f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}"
    lowered = (f"capacity lowered to {capacity:,} bytes (~{args.capacity_ids:,} ids per shard, WFI_BENCH_CAPACITY_BYTES)"
               if args.capacity_ids else f"the product's capacity ({CAPACITY_BYTES:,} bytes)")
    print(f"\n{args.shards} shards at {args.fill:.0%} in one worker, SIGKILL and restart; {lowered}; "
          f"{server_label(False, extra)}, {time.monotonic() - began:.0f}s, load average {load} on {os.cpu_count()} cores\n")
    print(table(figures))
    path = write_results("full-shards", figures, {"server": server_label(False, extra), "load_average": load, **meta})
    print(f"\nwritten to {path.relative_to(ROOT)}")
    return 0 if all(f.passed is not False for f in figures) else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--fill", type=float, default=0.8, help="capacity fill each shard is taken to (default 0.8)")
    parser.add_argument("--capacity-ids", type=int, default=0,
                        help="lower the capacity so this many ids fill a shard (default 0: the product's, ~84,000)")
    parser.add_argument("--in-flight", type=int, default=4, help="deliver_many updates in flight while filling")
    parser.add_argument("--restart-target", type=float, default=30.0, help="seconds (default 30)")
    parser.add_argument("--per-id-bytes", type=float, default=None,
                        help="worker bytes per retained id (default: bench/results/memory.json's worker phase)")
    parser.add_argument("--dynamic-config", action="append", default=["history.maxInFlightUpdates=100"], metavar="KEY=VALUE")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
