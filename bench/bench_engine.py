"""Per-delivery cost of the pure engine, with no server: the engine's own share of a workflow task.

    .venv/bin/python bench/bench_engine.py [--deliveries 5000] [--rounds 3]

Each delivery is accepted and starts a run; the run is then reported started and finished, and the
engine ticks, as the activation workflow does between tasks. Reported: microseconds per delivery
(best and median of the rounds), outside the workflow sandbox (the sandbox multiplies builtins'
costs, notably ``isinstance``: compare runs of this script, not these figures with task latencies).
Prints one line per round and a summary; writes nothing.

Then one turn of the activation's loop (``tick``, the UI page, ``status``, ``gauges``: what
``workflows/activation.py`` does on every wake-up) with many runs held, of three shapes: running
(watchers at their limit, as the shell passes them), pending behind the concurrency cap, and
queued behind 5,000 queue keys. Each is printed as a ratio to one delivery's cost of the same run;
exits 1 when a turn costs more than ``TURN_TARGET`` deliveries (a turn that scans every run with
pydantic work per run cost 50-90 deliveries at 2,000-5,000 runs before 3 Dec).
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.activation import KEYED_HOOKS, make_spec  # noqa: E402
from wf_initiation.core.engine import Engine, StartRun, initial_state  # noqa: E402
from wf_initiation.core.engine._dispatch import Dispatcher  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WORKFILE = "name: cap\non:\n  http.request: {}\n"


def per_delivery_us(n: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        spec = make_spec(pathlib.Path(tmp), WORKFILE, task_queue="q", lifecycle_events=False)
    engine = Engine(spec, initial_state(spec, T0))
    started = time.perf_counter()
    for i in range(n):
        decision = engine.deliver(None, {"delivery_id": f"{i:036d}", "method": "POST", "body": {"n": i}}, T0)
        for command in decision.commands:
            if type(command) is StartRun:
                engine.run_started(command.run_key, "r", T0)
                engine.run_finished(command.run_key, "completed", T0)
        engine.tick(T0)
    return (time.perf_counter() - started) / n * 1e6


TURN_TARGET = 10.0  # deliveries' worth per turn of the loop, at the sizes below
TURN_RUNS = 5000


def _engine(workfile: str, **settings: object) -> Engine:
    with tempfile.TemporaryDirectory() as tmp:
        spec = make_spec(pathlib.Path(tmp), workfile, task_queue="q", lifecycle_events=False, **settings)
    return Engine(spec, initial_state(spec, T0))


def _held(shape: str, n: int) -> tuple[Engine, Dispatcher]:
    """An engine holding ``n`` runs of ``shape``, and a dispatcher that watches what it can."""
    if shape == "keyed":
        engine = _engine(KEYED_HOOKS.format(name="keyed"))
    else:
        engine = _engine(WORKFILE, **({"max_concurrent_runs": 10} if shape == "pending" else {}))
    for i in range(n):
        payload = {"delivery_id": f"{i:036d}", "method": "POST", "body": {"k": str(i // 2)}}
        for command in engine.deliver("hook" if shape == "keyed" else None, payload, T0).commands:
            if type(command) is StartRun:
                engine.run_started(command.run_key, "r", T0)
    dispatcher = Dispatcher(bounded=True)
    dispatcher.plan(engine.tick(T0).commands)
    return engine, dispatcher


def turn_us(shape: str, n: int, turns: int = 20) -> float:
    """Microseconds of one turn of the loop with ``n`` runs of ``shape`` held."""
    engine, dispatcher = _held(shape, n)
    started = time.perf_counter()
    for _ in range(turns):
        dispatcher.plan(engine.tick(T0, watched=dispatcher.watched, watch_room=dispatcher.watch_room).commands)
        engine.markdown()
        engine.status()
        engine.gauges()
    return (time.perf_counter() - started) / turns * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deliveries", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    figures = []
    for r in range(args.rounds):
        figures.append(per_delivery_us(args.deliveries))
        print(f"round {r + 1}: {figures[-1]:.1f} us/delivery")
    delivery = statistics.median(figures)
    print(f"best {min(figures):.1f} us, median {delivery:.1f} us per delivery "
          f"({args.deliveries} deliveries, accepted, started, finished, ticked)")
    failed = []
    for shape, what in [("running", "running"), ("pending", "pending behind max_concurrent_runs: 10"),
                        ("keyed", "queued by key (half running, one per key)")]:
        us = turn_us(shape, TURN_RUNS)
        ratio = us / delivery
        print(f"one turn of the loop, {TURN_RUNS} runs {what}: {us:.0f} us = {ratio:.1f} deliveries "
              f"(target <= {TURN_TARGET:g})")
        if ratio > TURN_TARGET:
            failed.append(shape)
    if failed:
        print(f"FAIL: {', '.join(failed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
