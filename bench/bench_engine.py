"""Per-delivery cost of the pure engine, with no server: the engine's own share of a workflow task.

    .venv/bin/python bench/bench_engine.py [--deliveries 5000] [--rounds 3]

Each delivery is accepted and starts a run; the run is then reported started and finished, and the
engine ticks, as the activation workflow does between tasks. Reported: microseconds per delivery
(best and median of the rounds), outside the workflow sandbox (the sandbox multiplies builtins'
costs, notably ``isinstance``: compare runs of this script, not these figures with task latencies).
Prints one line per round and a summary; writes nothing.
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

from tests.support.activation import make_spec  # noqa: E402
from wf_initiation.core.engine import Engine, StartRun, initial_state  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deliveries", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    figures = []
    for r in range(args.rounds):
        figures.append(per_delivery_us(args.deliveries))
        print(f"round {r + 1}: {figures[-1]:.1f} us/delivery")
    print(f"best {min(figures):.1f} us, median {statistics.median(figures):.1f} us per delivery "
          f"({args.deliveries} deliveries, accepted, started, finished, ticked)")


if __name__ == "__main__":
    main()
