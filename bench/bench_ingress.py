"""The HTTP webhook ingress next to the same deliveries sent with ``WfiClient`` directly, in one run
on one dev server (issue 13's benchmark).

    .venv/bin/python bench/bench_ingress.py [--quick] [--in-memory] [--kinds suppressed,accepted]
                                            [--server-defaults] [--updates-per-workflow N] [--dynamic-config KEY=VALUE ...]

Starts its own dev server, the two bench worker processes (``bench/_workers.py``: activations; runs)
and ``wfi serve`` as a process of its own (token authentication, default limits), the way a
deployment runs them; this process only sends. For 1, 16 and 64 concurrent clients it sends N
distinct deliveries of one kind to an activation (a fresh one per phase and side), once over HTTP (``POST /hooks/{workflow}``,
keep-alive HTTP/1.1, one connection per client, a minimal client: see ``Connections``) and once with ``WfiClient.deliver`` (the same payload the
ingress builds), in ``--rounds`` rounds (default 2) in A-B-B-A order, and measures deliveries acknowledged per second and
the p50/p99 of each acknowledgement. Kinds: ``suppressed`` (``when`` is false: the update path, no
run) and ``accepted`` (each starts a run; runs are drained between phases).

Targets (ingress / direct): throughput >= 2x at 16 and 64 clients (the ingress groups concurrent
deliveries into ``deliver_many`` updates), >= 0.9x for one client; p50 <= 1.2x direct + the grouping
window (2 ms). A third side, informational (``--no-grouped`` leaves it out), sends the same deliveries with
``WfiClient(group_deliveries=True)``: the ingress's grouping without HTTP, what a Python caller gets and
the most the grouping reaches without HTTP. Last (informational, suppressed only, ``--no-ceiling``
leaves it out): the round trip of one ``deliver_many`` of 16 and of 64 deliveries, sent one after
another, and the ingress's ceiling: ``wfi serve``'s app and server with each group answered after
that round trip and no Temporal behind it (``bench/_ingress_standin.py``), loaded like the HTTP side,
against this run's direct rate. Prints the table and
writes ``bench/results/ingress.json``. The server admits 100 updates in flight per workflow and the
ingress uses up to 64 (see ``RAISED_LIMIT``); ``--server-defaults`` runs at 10 and 8 instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import (  # noqa: E402
    Figure,
    Target,
    dev_server,
    drain,
    fan_out,
    free_port,
    percentile,
    results_dir,
    server_label,
    table,
    write_results,
)
from bench._workers import Queues, worker_processes  # noqa: E402
from wf_initiation.client import WfiClient, build_spec  # noqa: E402
from wf_initiation.core.deployment import load_deployment  # noqa: E402
from wf_initiation.wire import ECHO_RUN_WORKFLOW  # noqa: E402

CONCURRENCY = (1, 16, 64)
# By default both sides run on a server that admits 100 updates in flight per workflow, and the
# ingress may use 64 of them: at the server's default (10), WfiClient's 16 and 64 direct callers
# collapse into refusals and retries (a few updates per second get through), while the ingress queues
# its callers below the limit; the comparison would measure that, not the ingress's own cost.
RAISED_LIMIT = "history.maxInFlightUpdates=100"
TOKEN = "bench-" + uuid.uuid4().hex
GROUP_WINDOW_MS = 2.0  # ingress.group_window's default
ROUND_TRIP_SIZES = (16, 64)
ROUND_TRIP_CALLS = 10
WORKFILE = """
name: {name}
on:
  http.request: {{}}
  when: "{{{{ request.body.run }}}}"
"""


def sizes(quick: bool, kind: str) -> dict[int, int]:
    """Deliveries per side and round, by number of concurrent clients."""
    if kind == "accepted":
        return {1: 20, 16: 64, 64: 128} if quick else {1: 50, 16: 160, 64: 320}
    return {1: 50, 16: 160, 64: 320} if quick else {1: 150, 16: 600, 64: 960}


class Connections:
    """Keep-alive HTTP/1.1 connections, one per concurrent sender, each request on a free one.

    The load generator must cost less than what it measures: httpx, fine for the tests, spends
    several milliseconds of CPU per request on this machine and, at 64 concurrent requests in one
    process, became the bottleneck (measured: 33 requests/s where the ingress served 360/s to this
    client, with a 50 ms stand-in for Temporal). Webhook senders are other machines."""

    def __init__(self, port: int, size: int):
        self.port, self.size = port, size
        self._free: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter] | None] = asyncio.Queue()
        for _ in range(size):
            self._free.put_nowait(None)

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> int:
        conn = await self._free.get()
        try:
            if conn is None:
                conn = await asyncio.open_connection("127.0.0.1", self.port)
            reader, writer = conn
            head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            writer.write(f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n{head}content-length: {len(body)}\r\n\r\n".encode() + body)
            status_line, *lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            length = next(int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:"))
            await reader.readexactly(length)
            self._free.put_nowait(conn)
            return int(status_line.split()[1])
        except BaseException:
            self._free.put_nowait(None)  # a broken connection is replaced by a new one
            raise

    async def close(self) -> None:
        while not self._free.empty():
            conn = self._free.get_nowait()
            if conn is not None:
                conn[1].close()


class Side:
    """One way of delivering: over HTTP to the ingress, or WfiClient directly."""

    def __init__(self, name: str, wfi: WfiClient, http: Connections, workflow: str, path: str):
        self.name, self.wfi, self.http, self.workflow, self.path = name, wfi, http, workflow, path
        self.failed = 0

    async def one(self, delivery_id: str, body: dict[str, Any]) -> None:
        if self.name == "http":
            status = await self.http.post(self.path, json.dumps(body).encode(), {
                "authorization": f"Bearer {TOKEN}", "content-type": "application/json", "idempotency-key": delivery_id})
            if status >= 300:
                self.failed += 1
            return
        payload = {"delivery_id": delivery_id, "method": "POST", "path": self.path,
                   "headers": {"content-type": "application/json"}, "query": {}, "body": body}
        await self.wfi.deliver(self.workflow, payload, entry="request")


async def phase(side: Side, kind: str, n: int, concurrency: int) -> tuple[float, list[float]]:
    prefix = f"{side.name}-{kind}-{concurrency}-{uuid.uuid4().hex[:6]}"
    body = {"run": kind == "accepted", "customer": "c-1", "items": [{"sku": "A-1", "qty": 2}]}
    began = time.perf_counter()
    latencies = await fan_out(n, concurrency, lambda i: side.one(f"{prefix}-{i}", {**body, "n": i}))
    return n / (time.perf_counter() - began), latencies


def start_ingress(deployment: pathlib.Path, port: int, log: pathlib.Path) -> subprocess.Popen[bytes]:
    """``wfi serve`` with its stdout and stderr in ``log`` (a pipe nobody reads would fill and stall it)."""
    env = dict(os.environ, WFI_BENCH_TOKEN=TOKEN, PYTHONTZPATH="")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"")
    with log.open("ab") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "wf_initiation", "serve", "--deployment", str(deployment),
                                 "--port", str(port)], stdout=sink, stderr=sink, env=env, cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if re.search(r"Temporal at .*: connected", log.read_text(errors="replace")):
            return proc
        if proc.poll() is not None:
            raise RuntimeError(f"wfi serve exited with {proc.returncode}; see {log}")
        time.sleep(0.1)
    raise TimeoutError(f"wfi serve did not connect within 60s; see {log}")


def write_deployment(tmp: pathlib.Path, address: str, queues: Queues, names: list[str], port: int, slots: int,
                     grouping: dict[str, Any] | None = None) -> pathlib.Path:
    for name in names:
        (tmp / f"{name}.yaml").write_text(WORKFILE.format(name=name))
    path = tmp / "deployment.json"
    path.write_text(json.dumps({
        "temporal": {"address": address, "task_queue": queues.activations},
        "workflows": {name: {"workfile": f"{name}.yaml", "lifecycle_events": False,
                             "run": {"workflow_type": ECHO_RUN_WORKFLOW, "task_queue": queues.runs}} for name in names},
        "ingress": {"port": port, "default_auth": {"scheme": "token", "secrets": ["env:WFI_BENCH_TOKEN"]},
                    "updates_per_workflow": slots, "max_waiting": 1024, **(grouping or {})},
    }))
    return path


async def measure(server: Any, queues: Queues, tmp: pathlib.Path, args: argparse.Namespace, log: Any) -> list[Figure]:
    """Every phase delivers to an activation of its own, so neither side inherits the other's
    history (a longer history, a continue-as-new in the middle of a phase)."""
    kinds, quick, port = [k for k in args.kinds.split(",") if k], args.quick, free_port()
    suffix = uuid.uuid4().hex[:6]
    phases = [(kind, c, n) for kind in kinds for c, n in sizes(quick, kind).items()]
    rounds = range(args.rounds)
    sides = ["direct", "http", *(["grouped"] if args.grouped else [])]
    names = {(kind, c, side, r): f"bi-{kind}-{c}-{side}-{r}-{suffix}"
             for kind, c, _ in phases for side in sides for r in rounds}
    ceiling = args.ceiling and "suppressed" in kinds
    if ceiling:  # the grouped update's round trips are measured on an activation of their own
        names[("rtt", 0, "", 0)] = f"bi-rtt-{suffix}"
    address = server.client.service_client.config.target_host
    grouping = {key: value for key, value in (("group_window", args.group_window), ("groups_in_flight", args.groups_in_flight))
                if value is not None}
    deployment_path = write_deployment(tmp, address, queues, list(names.values()), port, args.updates_per_workflow, grouping)
    deployment = load_deployment(deployment_path)
    wfi = WfiClient(server.client, task_queue=queues.activations)
    # The grouping of issue 19 item 3 without HTTP: what a Python caller gets from WfiClient itself.
    assert deployment.ingress is not None
    grouped = WfiClient(server.client, task_queue=queues.activations, group_deliveries=True,
                        group_window=deployment.ingress.group_window, groups_in_flight=deployment.ingress.groups_in_flight)
    for name in names.values():
        await wfi.activate(build_spec(tmp / f"{name}.yaml", deployment))
    ingress = start_ingress(deployment_path, port, results_dir() / "ingress-serve.log")
    figures: list[Figure] = []
    direct: dict[tuple[str, int], float] = {}
    try:
        for kind, c, n in phases:
            seconds: dict[str, float] = {side: 0.0 for side in sides}
            latencies: dict[str, list[float]] = {side: [] for side in sides}
            failed = 0
            # Rounds in A-B-B-A order: neither side always goes first (drift, a busy machine).
            for r in rounds:
                for side in (sides if r % 2 == 0 else sides[::-1]):
                    name = names[(kind, c, side, r)]
                    log(f"{kind}: {n} deliveries, {c} client(s), {side}, round {r + 1}")
                    http = Connections(port, c)  # fresh: a connection idle past the keep-alive timeout is closed
                    one = Side(side, grouped if side == "grouped" else wfi, http, name, f"/hooks/{name}")
                    rate, lat = await phase(one, kind, n, c)
                    await http.close()
                    seconds[side] += n / rate
                    latencies[side] += lat
                    failed += one.failed
                    if kind == "accepted":
                        await drain(server.client, ECHO_RUN_WORKFLOW)
            total = n * args.rounds
            results = {side: (total / seconds[side], latencies[side]) for side in seconds}
            direct[(kind, c)] = results["direct"][0]
            figures += compare(kind, c, total, results, failed)
    finally:
        ingress.terminate()
        ingress.wait(timeout=60)
    if ceiling:
        figures += await stand_in_ceiling(wfi, names[("rtt", 0, "", 0)], deployment_path, direct, args, log)
    return figures


async def group_round_trips(wfi: WfiClient, workflow: str, log: Any) -> dict[int, float]:
    """p50 seconds of one ``deliver_many`` of 16 and of 64 suppressed deliveries, sent one after another."""
    body = {"run": False, "customer": "c-1", "items": [{"sku": "A-1", "qty": 2}]}
    out: dict[int, float] = {}
    for size in ROUND_TRIP_SIZES:
        log(f"round trip of one deliver_many of {size}, {ROUND_TRIP_CALLS} calls")
        took = []
        for call in range(ROUND_TRIP_CALLS + 2):  # the first two warm up
            batch = [("request", {"delivery_id": f"rtt-{size}-{call}-{i}", "method": "POST", "path": "/", "headers": {},
                                  "query": {}, "body": {**body, "n": i}}) for i in range(size)]
            began = time.perf_counter()
            await wfi.deliver_many(workflow, batch)
            if call >= 2:
                took.append(time.perf_counter() - began)
        out[size] = percentile(took, 0.5)
    return out


async def stand_in_ceiling(wfi: WfiClient, rtt_workflow: str, deployment: pathlib.Path, direct: dict[tuple[str, int], float],
                           args: argparse.Namespace, log: Any) -> list[Figure]:
    """The ingress's ceiling on this machine (informational): ``wfi serve``'s app and server with each
    grouped update answered after the round trip just measured and nothing else (``bench/_ingress_standin.py``),
    loaded like the HTTP side, against this run's direct rate. HTTP can serve at most this."""
    base_ms, per_ms = round_trip_line(await group_round_trips(wfi, rtt_workflow, log))
    port = free_port()
    log_path = results_dir() / "ingress-standin.log"
    with log_path.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "_ingress_standin.py"), "--deployment", str(deployment),
                                 "--port", str(port), "--base-ms", f"{base_ms:.3f}", "--per-ms", f"{per_ms:.4f}"],
                                stdout=sink, stderr=sink, env=dict(os.environ, WFI_BENCH_TOKEN=TOKEN, PYTHONTZPATH=""), cwd=ROOT)
    figures: list[Figure] = []
    try:
        deadline = time.monotonic() + 60
        while "ready" not in log_path.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the stand-in ingress did not start; see {log_path}")
            await asyncio.sleep(0.1)
        note = (f"wfi serve's app, each group answered after {base_ms:.1f} + {per_ms:.2f} x n ms (this run's deliver_many "
                "round trips), no Temporal; bare = this run's direct WfiClient")
        for c, n in sizes(args.quick, "suppressed").items():
            if c < 16:
                continue
            log(f"stand-in ceiling: {n * args.rounds} deliveries, {c} clients")
            http = Connections(port, c)
            side = Side("http", wfi, http, rtt_workflow, f"/hooks/{rtt_workflow}")
            rate, lat = await phase(side, "suppressed", n * args.rounds, c)
            await http.close()
            if side.failed:
                raise RuntimeError(f"the stand-in ingress answered {side.failed} requests with an error; see {log_path}")
            figures += [Figure(metric=f"suppressed deliveries/s, {c} client(s), HTTP to a stand-in Temporal (ceiling)",
                               unit="/s", ours=rate, bare=direct[("suppressed", c)], note=note),
                        Figure(metric=f"suppressed ack p50, {c} client(s), HTTP to a stand-in Temporal (ceiling)",
                               unit="ms", ours=percentile(lat, 0.5) * 1000, note=note)]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return [Figure(metric=f"one deliver_many round trip p50, {size} suppressed deliveries", unit="ms",
                   ours=(base_ms + per_ms * size), note=f"sequential calls, {ROUND_TRIP_CALLS} each, fitted "
                   "A + B x n through the two sizes") for size in ROUND_TRIP_SIZES] + figures


def round_trip_line(p50: dict[int, float]) -> tuple[float, float]:
    """(A, B) in ms with a group of n answered after A + B x n: the line through the two sizes' p50s."""
    (small, t_small), (large, t_large) = sorted(p50.items())
    per = max(0.0, (t_large - t_small) / (large - small)) * 1000
    return max(0.0, t_small * 1000 - per * small), per


def compare(kind: str, c: int, n: int, results: dict[str, tuple[float, list[float]]], failed: int) -> list[Figure]:
    (rate_d, lat_d), (rate_h, lat_h) = results["direct"], results["http"]
    p50_d, p50_h = percentile(lat_d, 0.5) * 1000, percentile(lat_h, 0.5) * 1000
    p99_d, p99_h = percentile(lat_d, 0.99) * 1000, percentile(lat_h, 0.99) * 1000
    note = f"{n} distinct deliveries, {kind}; bare = WfiClient.deliver directly, one update each"
    # Issue 19: many concurrent clients are grouped into deliver_many updates (ingress.group_deliveries):
    # at 16 and 64 clients the ingress must take twice what one update per delivery takes; alone, 0.9x.
    wanted = 2.0 if c >= 16 else 0.9
    extra: list[Figure] = []
    if "grouped" in results:  # informational: the same grouping without HTTP (WfiClient(group_deliveries=True))
        rate_g, lat_g = results["grouped"]
        gnote = f"{n} distinct deliveries, {kind}; ours = WfiClient(group_deliveries=True), no HTTP"
        extra = [Figure(metric=f"{kind} deliveries/s, {c} client(s), grouped WfiClient", unit="/s", ours=rate_g,
                        bare=rate_d, note=gnote),
                 Figure(metric=f"{kind} ack p50, {c} client(s), grouped WfiClient", unit="ms",
                        ours=percentile(lat_g, 0.5) * 1000, bare=p50_d, note=gnote)]
    return [*extra,
        Figure(metric=f"{kind} deliveries/s, {c} client(s)", unit="/s", ours=rate_h, bare=rate_d,
               target=Target(op=">=", value=wanted), note=note),
        Figure(metric=f"{kind} ack p50, {c} client(s)", unit="ms", ours=p50_h, bare=p50_d, note=note),
        Figure(metric=f"{kind} ack p50 - (1.2 x direct p50 + window), {c} client(s)", unit="ms",
               ours=p50_h - 1.2 * p50_d - GROUP_WINDOW_MS, target=Target(op="<=", value=0, on="ours"),
               note=f"target: p50 <= 1.2x direct + the grouping window ({GROUP_WINDOW_MS:g} ms)"),
        Figure(metric=f"{kind} ack p99, {c} client(s)", unit="ms", ours=p99_h, bare=p99_d, note=note),
        Figure(metric=f"{kind} HTTP answers not 2xx, {c} client(s)", unit="", ours=failed,
               target=Target(op="<=", value=0, on="ours")),
    ]


async def main(args: argparse.Namespace) -> int:
    extra = [a for kv in args.dynamic_config for a in ("--dynamic-config-value", kv)]
    kinds = [k for k in args.kinds.split(",") if k]
    began, load_before = time.monotonic(), os.getloadavg()[0]
    log = lambda msg: print(f"[{time.monotonic() - began:6.1f}s] {msg}", flush=True)  # noqa: E731
    server_log = results_dir() / "ingress-server.log"
    server_log.unlink(missing_ok=True)
    async with dev_server(in_memory=args.in_memory, extra_args=extra, log_file=server_log) as server:
        suffix = uuid.uuid4().hex[:6]
        queues = Queues(activations=f"bench-ingress-{suffix}", runs=f"bench-ingress-runs-{suffix}")
        address = server.client.service_client.config.target_host
        with tempfile.TemporaryDirectory() as tmp, worker_processes(address, queues, results_dir() / "ingress-workers.log"):
            figures = await measure(server, queues, pathlib.Path(tmp), args, log)
    elapsed, load = time.monotonic() - began, f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}"
    code = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    print(f"\nHTTP ingress vs WfiClient directly, {server_label(args.in_memory, extra)}, ingress updates_per_workflow "
          f"{args.updates_per_workflow}, {'quick' if args.quick else 'full'} "
          f"sizes, {elapsed:.0f}s, code {code}, load average {load} on {os.cpu_count()} cores\n")
    print(table(figures))
    path = write_results("ingress", figures, {"server": server_label(args.in_memory, extra), "kinds": kinds,
                                              "updates_per_workflow": args.updates_per_workflow,
                                              "quick": args.quick, "elapsed_seconds": round(elapsed, 1), "code": code,
                                              "load_average": load, "cores": os.cpu_count()})
    print(f"\nwritten to {path.relative_to(ROOT)}")
    return 0 if all(f.passed is not False for f in figures) else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--in-memory", action="store_true", help="dev server without a SQLite file")
    parser.add_argument("--kinds", default="suppressed,accepted", help="suppressed, accepted or both (default)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds per phase, sides in A-B-B-A order (default 2); each side's figures pool its rounds")
    parser.add_argument("--server-defaults", action="store_true",
                        help="the server's default history.maxInFlightUpdates (10) and the ingress's default "
                        "updates_per_workflow (8), instead of 100 and 64: WfiClient's direct callers collapse at 16 and 64")
    parser.add_argument("--updates-per-workflow", type=int, help="override ingress.updates_per_workflow")
    parser.add_argument("--dynamic-config", action="append", default=[], metavar="KEY=VALUE",
                        help="more server dynamic config (repeatable)")
    parser.add_argument("--group-window", help="override ingress.group_window (e.g. 5ms)")
    parser.add_argument("--groups-in-flight", type=int, help="override ingress.groups_in_flight")
    parser.add_argument("--no-ceiling", dest="ceiling", action="store_false",
                        help="leave out the stand-in ceiling: wfi serve with Temporal replaced by this run's "
                        "deliver_many round trips (informational; bench/_ingress_standin.py)")
    parser.add_argument("--no-grouped", dest="grouped", action="store_false",
                        help="leave out the third side, WfiClient(group_deliveries=True) without HTTP (informational)")
    args = parser.parse_args(argv)
    if not args.server_defaults:
        args.dynamic_config = [RAISED_LIMIT, *args.dynamic_config]
    if args.updates_per_workflow is None:
        args.updates_per_workflow = 8 if args.server_defaults else 64
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
