"""Worker memory per retained delivery id: the pure engine under tracemalloc, as the workflow runs it.

    .venv/bin/python bench/bench_memory.py [--ids 80000] [--carry-every 2000]

Feeds one engine ``--ids`` deliveries with random UUID delivery ids, each suppressed by ``when`` (so
each id is retained for ``dedup_retention`` and starts no run), and continues as new every
``--carry-every`` deliveries as the activation workflow does: the state is encoded, decoded and a
new engine built from it, the old one dropped. It measures the Python heap (tracemalloc) that the
engine holds, less that of an engine holding no id, divided by the ids it holds:

- after continue-as-new: the engine a new run starts from (what a cached activation costs a worker
  between two continue-as-new points, at their start);
- within a run: the same engine just before its next continue-as-new (the peak of a run).

It also prints the carried state's size per id (what the wire costs) and the time to encode and to
decode it. Targets (issue 35 item 1): at most 64 bytes per id after continue-as-new and 128 within a
run, at the same carried bytes per id. Exits 1 above either target.
"""

from __future__ import annotations

import argparse
import gc
import pathlib
import sys
import tempfile
import time
import tracemalloc
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.activation import make_spec  # noqa: E402
from wf_initiation.core.engine import Engine, decode_state, initial_state  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WORKFILE = 'name: memory\non:\n  http.request: {}\n  as: hook\n  when: "{{ hook.body.go }}"\n'
AFTER_TARGET = 64
WITHIN_TARGET = 128


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", type=int, default=80_000, help="delivery ids retained (default 80,000)")
    parser.add_argument("--carry-every", type=int, default=2_000, help="deliveries between continue-as-new (default 2,000)")
    args = parser.parse_args(argv)
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
    print(f"{args.ids:,} ids suppressed by `when`, continue-as-new every {args.carry_every:,}")
    print(f"carried state: {len(blob):,} bytes ({len(blob) / args.ids:.1f} B per id); "
          f"encode {encode_s * 1000:.0f} ms, decode + new engine {decode_s * 1000:.0f} ms")
    print(f"heap per retained id after continue-as-new: {after_per_id:6.1f} B (target <= {AFTER_TARGET})")
    print(f"heap per retained id within a run:          {within_per_id:6.1f} B (target <= {WITHIN_TARGET})")
    ok = after_per_id <= AFTER_TARGET and within_per_id <= WITHIN_TARGET
    print("ok" if ok else "ABOVE THE TARGET")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
