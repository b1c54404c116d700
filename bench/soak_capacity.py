"""A real-server soak: one activation fed at a steady rate for minutes, its carried state levels off
(the simulated day is bench_capacity.py).

    .venv/bin/python bench/soak_capacity.py [--minutes 15] [--rate 100] [--retention 2m] [--shards 1]
                                            [--accepted-every 20]

Senders deliver ``--rate`` new delivery ids per second by signal (the webhook bridge's path), one
in ``--accepted-every`` starting a run (``wfi.EchoRun``, which ends at once) and the rest suppressed
by ``when``: every id is retained for ``--retention`` after its disposition (EXT-5), so the live ids
settle at about rate x (retention + run time) and the carried state with them. Every 30 s it samples,
from ``wfi state --summary``: retained ids, the capacity fill and estimated bytes, the counters, and
the current activation run's history length and how many continue-as-new runs there were.

Passes (exit 0) when, after a warm-up of twice the retention, the largest number of retained ids in
the last third of the soak is at most 1.15x the largest in the middle third (it levelled off), no
delivery was deferred, every delivery was processed, and no activation run's history passed 20,000
events (continue-as-new kept up). A shorter soak (``--minutes 6``) shows the same shape.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import dev_server, results_dir, server_label  # noqa: E402
from bench._workers import Queues, worker_processes  # noqa: E402
from tests.support.activation import make_spec  # noqa: E402
from wf_initiation.client import WfiClient  # noqa: E402
from wf_initiation.wire import ECHO_RUN_WORKFLOW, shard_workflow_id  # noqa: E402

HOOK = """
name: {name}
on:
  http.request: {{}}
  as: request
  when: "{{{{ request.body.keep }}}}"
"""
SAMPLE_S = 30.0
MAX_RUN_EVENTS = 20_000
LEVEL_RATIO = 1.15


def parse_duration(text: str) -> timedelta:
    units = {"s": 1, "m": 60, "h": 3600}
    return timedelta(seconds=float(text[:-1]) * units[text[-1]])


async def _history(wfi: WfiClient, name: str, shards: int) -> tuple[int, int]:
    """(largest history length of a current shard run, activation runs so far over every shard)."""
    longest, runs = 0, 0
    for k in range(shards):
        wid = shard_workflow_id(name, k)
        desc = await wfi.client.get_workflow_handle(wid).describe()
        longest = max(longest, desc.raw_description.workflow_execution_info.history_length)
        runs += len([w async for w in wfi.client.list_workflows(f"WorkflowId = '{wid}'")])
    return longest, runs


async def soak(wfi: WfiClient, name: str, args: argparse.Namespace, log: Any) -> tuple[list[dict[str, Any]], int]:
    sent = 0
    began = time.monotonic()
    end = began + args.minutes * 60
    samples: list[dict[str, Any]] = []
    next_sample = began + SAMPLE_S
    senders = asyncio.Semaphore(32)
    pending: set[asyncio.Task[Any]] = set()

    async def send(i: int) -> None:
        async with senders:
            keep = i % args.accepted_every == 0
            await wfi.signal_delivery(name, {"delivery_id": f"s-{i}", "method": "POST", "body": {"keep": keep}})

    while time.monotonic() < end:
        due = int((time.monotonic() - began) * args.rate)
        while sent < due:
            task = asyncio.create_task(send(sent))
            pending.add(task)
            task.add_done_callback(pending.discard)
            sent += 1
        if time.monotonic() >= next_sample:
            next_sample += SAMPLE_S
            summary = await wfi.summary(name)
            longest, runs = await _history(wfi, name, args.shards)
            c, cap = summary["counters"], summary.get("capacity", {})
            sample = {"t": round(time.monotonic() - began), "sent": sent, "processed": c.get("deliveries", 0),
                      "retained": cap.get("retained_ids", summary.get("dedup_entries", 0)),
                      "fill": cap.get("fill"), "estimated_bytes": cap.get("estimated_state_bytes"),
                      "deferred": c.get("deferred", 0), "runs_started": c.get("runs_started", 0),
                      "longest_run_events": longest, "activation_runs": runs}
            samples.append(sample)
            log(" ".join(f"{k}={v}" for k, v in sample.items()))
        await asyncio.sleep(0.02)
    await asyncio.gather(*pending)
    return samples, sent


def verdict(samples: list[dict[str, Any]], sent: int, processed: int, warmup_s: float) -> list[str]:
    """What failed; [] when the carried state levelled off and nothing was lost or deferred."""
    problems = []
    settled = [s for s in samples if s["t"] >= warmup_s]
    if len(settled) < 3:
        return [f"too short: {len(settled)} sample(s) after the warm-up of {warmup_s:.0f}s; soak longer"]
    third = len(settled) // 3
    middle, last = settled[third:2 * third] or settled[:1], settled[2 * third:]
    top_middle, top_last = max(s["retained"] for s in middle), max(s["retained"] for s in last)
    if top_last > LEVEL_RATIO * top_middle:
        problems.append(f"retained ids still growing: {top_middle} (middle third) -> {top_last} (last third)")
    if any(s["deferred"] for s in samples):
        problems.append(f"{samples[-1]['deferred']} deliveries deferred")
    if processed < sent:
        problems.append(f"{sent - processed} of {sent} deliveries not processed")
    if max(s["longest_run_events"] for s in samples) > MAX_RUN_EVENTS:
        problems.append(f"an activation run passed {MAX_RUN_EVENTS} history events")
    return problems


async def main(args: argparse.Namespace) -> int:
    began, load_before = time.monotonic(), os.getloadavg()[0]
    log = lambda msg: print(f"[{time.monotonic() - began:6.1f}s] {msg}", flush=True)  # noqa: E731
    retention = parse_duration(args.retention)
    extra = [a for kv in args.dynamic_config for a in ("--dynamic-config-value", kv)]
    async with dev_server(in_memory=False, extra_args=extra, log_file=results_dir() / "soak-server.log") as server:
        suffix = uuid.uuid4().hex[:6]
        queues = Queues(activations=f"bench-soak-{suffix}", runs=f"bench-soak-runs-{suffix}")
        address = server.client.service_client.config.target_host
        with tempfile.TemporaryDirectory() as tmp, worker_processes(address, queues, results_dir() / "soak-workers.log"):
            wfi = WfiClient(server.client, task_queue=queues.activations)
            name = f"soak-{suffix}"
            settings: dict[str, Any] = {"dedup_retention": args.retention}
            if args.shards > 1:
                settings["scale"] = {"shards": args.shards}
            spec = make_spec(pathlib.Path(tmp), HOOK.format(name=name), task_queue=queues.activations,
                             run_queue=queues.runs, **settings)
            await wfi.activate(spec)
            samples, sent = await soak(wfi, name, args, log)
            deadline = time.monotonic() + 120
            processed = 0
            while time.monotonic() < deadline:
                processed = (await wfi.summary(name))["counters"].get("deliveries", 0)
                if processed >= sent:
                    break
                await asyncio.sleep(1)
    load = f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}"
    expected = args.rate * (retention.total_seconds())
    print(f"\nsoak of {args.minutes:g} min at {args.rate}/s ({ECHO_RUN_WORKFLOW} run for 1 in {args.accepted_every}), "
          f"retention {args.retention}, {args.shards} shard(s), {server_label(False, extra)}, load average {load} on "
          f"{os.cpu_count()} cores; {sent} sent, {processed} processed; rate x retention = {expected:.0f} ids")
    print("\n| t (s) | sent | retained ids | fill | estimated bytes | longest run (events) | activation runs |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for s in samples:
        print(f"| {s['t']} | {s['sent']} | {s['retained']} | {s['fill']} | {s['estimated_bytes']} | "
              f"{s['longest_run_events']} | {s['activation_runs']} |")
    problems = verdict(samples, sent, processed, warmup_s=2 * retention.total_seconds())
    print("\n" + ("levelled off: PASS" if not problems else "FAIL: " + "; ".join(problems)))
    return 1 if problems else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=15)
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--retention", default="2m")
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--accepted-every", type=int, default=20)
    parser.add_argument("--dynamic-config", action="append", default=[], metavar="KEY=VALUE")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
