"""Sustained capacity of an activation over a simulated day: the real engine, the clock advanced by the bench.

    .venv/bin/python bench/bench_capacity.py [--rate 5] [--retention 24h] [--hours 30] [--shards 1]
                                             [--accepted 0.5] [--run-seconds 30] [--policy refuse]

What limits one activation over time is what it carries across continue-as-new: every delivery id
stays retained until its run ends and then for ``dedup_retention`` (24 h by default), and the
carried state must fit Temporal's payload limit. This drives the pure engine (no server, no sleep)
with ``--rate`` new delivery ids per simulated second, a fraction ``--accepted`` of them starting
runs that last ``--run-seconds`` (the rest suppressed by ``when``), continuing as new every 2,000
deliveries as the workflow would (the carried state is encoded then, and measured), across
``--shards`` engines (ids routed by hash, as a sharded activation would). It prints, per simulated
hour, the live ids, the carried bytes and the fill level of the fullest shard, and when deliveries
would start to be deferred (``at_capacity: refuse``) or ids shed (``shed_oldest``).

The model it checks: at a steady rate the live ids level off at ``rate x (retention + run time)``,
so the sustained rate of one shard is about ``capacity_ids / (retention + run time)``. Exits 1 if
any carried state passed what continue-as-new can carry (``MAX_CARRIED_STATE_BYTES``): that is the
failure this bench guards against.
"""

from __future__ import annotations

import argparse
import hashlib
import pathlib
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.activation import make_spec  # noqa: E402
from wf_initiation.core._durations import parse_duration  # noqa: E402
from wf_initiation.core.engine import Disposition, Engine, StartRun, initial_state  # noqa: E402
from wf_initiation.core.limits import CAPACITY_BYTES, MAX_CARRIED_STATE_BYTES  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WORKFILE = 'name: soak\non:\n  http.request: {}\n  as: hook\n  when: "{{ hook.body.go }}"\n'
CARRY_EVERY = 2000  # deliveries between two continue-as-new (a history of ~4,000 events)


class Shard:
    """One activation workflow's engine, fed like the workflow feeds it."""

    def __init__(self, spec: Any) -> None:
        self.engine = Engine(spec, initial_state(spec, T0))
        self.running: list[tuple[datetime, str]] = []  # (ends at, run key), in order
        self.since_carry = 0
        self.carried = 0  # bytes of the last continue-as-new
        self.max_carried = 0

    def deliver(self, ident: str, go: bool, now: datetime, run_for: timedelta) -> Disposition:
        decision = self.engine.deliver(None, {"delivery_id": ident, "method": "POST", "body": {"go": go}}, now)
        for command in decision.commands:
            if type(command) is StartRun:
                self.engine.run_started(command.run_key, "r", now)
                self.running.append((now + run_for, command.run_key))
        self.since_carry += 1
        if self.since_carry >= CARRY_EVERY:
            self.carry()
        return decision.value.disposition

    def advance(self, now: datetime) -> None:
        while self.running and self.running[0][0] <= now:
            _, key = self.running.pop(0)
            self.engine.run_finished(key, "completed", now)
        self.engine.tick(now)

    def carry(self) -> None:
        self.carried = len(self.engine.encode_state())
        self.max_carried = max(self.max_carried, self.carried)
        self.since_carry = 0


def route(ident: str, shards: int) -> int:
    return int.from_bytes(hashlib.sha256(ident.encode()).digest()[:8], "big") % shards


def simulate(args: argparse.Namespace) -> int:
    retention = parse_duration(args.retention)
    run_for = timedelta(seconds=args.run_seconds)
    with tempfile.TemporaryDirectory() as tmp:
        spec = make_spec(pathlib.Path(tmp), WORKFILE, task_queue="q", lifecycle_events=False,
                         dedup_retention=args.retention, at_capacity=args.policy)
    shards = [Shard(spec) for _ in range(args.shards)]
    predicted = args.rate * (retention + run_for).total_seconds() * args.accepted + args.rate * retention.total_seconds() * (1 - args.accepted)
    print(f"{args.rate}/s new ids, {args.accepted:.0%} starting {args.run_seconds}s runs, retention {args.retention}, "
          f"{args.shards} shard(s), at_capacity {args.policy}; capacity {CAPACITY_BYTES} bytes per shard, carry limit "
          f"{MAX_CARRIED_STATE_BYTES}; model: {predicted:,.0f} live ids at the steady state\n")
    print(f"{'hour':>5} {'delivered':>11} {'live ids (all)':>15} {'carried (max shard)':>20} {'fill':>6} {'deferred':>9} "
          f"{'shed':>8} {'wall s':>7}")
    began = time.monotonic()
    deferred = total = 0
    first_deferral: float | None = None
    step = 1.0 / args.rate
    n_steps = int(args.hours * 3600 * args.rate)
    accept_every = max(1, round(1 / args.accepted)) if args.accepted > 0 else 0
    next_hour = 3600.0
    for i in range(n_steps):
        t = i * step
        now = T0 + timedelta(seconds=t)
        ident = f"{i:012d}-{'x' * 23}"  # 36 characters, as a UUID
        shard = shards[route(ident, args.shards)]
        shard.advance(now)
        go = bool(accept_every) and i % accept_every == 0
        if shard.deliver(ident, go, now, run_for) == Disposition.DEFERRED:
            deferred += 1
            if first_deferral is None:
                first_deferral = t
        total += 1
        if t + step >= next_hour or i == n_steps - 1:
            for s in shards:
                s.advance(now)
                s.carry()
            live = sum(s.engine.capacity()["retained_ids"] for s in shards)
            fullest = max(shards, key=lambda s: s.carried)
            shed = sum(s.engine.summary()["counters"].get("dedup_shed", 0) for s in shards)
            print(f"{next_hour / 3600:5.0f} {total:11,} {live:15,} {fullest.carried:20,} "
                  f"{fullest.engine.capacity()['fill']:6.2f} {deferred:9,} {shed:8,} {time.monotonic() - began:7.0f}", flush=True)
            next_hour += 3600
    worst = max(s.max_carried for s in shards)
    print()
    if first_deferral is not None:
        print(f"at capacity after {first_deferral / 3600:.1f} h of simulated time ({deferred:,} deliveries deferred/shed "
              f"of {total:,}): sustained rate of this layout ~{args.rate * (total - deferred) / total:.2f}/s")
    else:
        print(f"never at capacity: {args.rate}/s is sustained at retention {args.retention} with {args.shards} shard(s)")
    print(f"largest carried state: {worst:,} bytes (carry limit {MAX_CARRIED_STATE_BYTES:,}): "
          f"{'ok' if worst <= MAX_CARRIED_STATE_BYTES else 'OVER THE LIMIT'}")
    return 0 if worst <= MAX_CARRIED_STATE_BYTES else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=5.0, help="new delivery ids per simulated second (default 5)")
    parser.add_argument("--retention", default="24h", help="dedup_retention (default 24h)")
    parser.add_argument("--hours", type=float, default=30.0, help="simulated hours (default 30)")
    parser.add_argument("--shards", type=int, default=1, help="engines the ids are routed across (default 1)")
    parser.add_argument("--accepted", type=float, default=0.5, help="fraction of deliveries starting a run (default 0.5)")
    parser.add_argument("--run-seconds", type=float, default=30.0, help="how long each run lasts (default 30)")
    parser.add_argument("--policy", choices=["refuse", "shed_oldest"], default="refuse", help="at_capacity")
    return simulate(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
