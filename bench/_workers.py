"""Bench workers in their own processes, the way a deployment runs them.

    python -m bench._workers ADDRESS TASK_QUEUE {activations|runs}

``activations``: the wf-initiation worker (``WfiPlugin(sample_runs=False)``: activations and their
activities) plus the bare baseline workflows, so both sides of every comparison are served by the
same kind of process. ``runs``: the run workflow ``wfi.EchoRun`` alone, on its own task queue; bare
``client.start_workflow`` starts go there too.

The load generator (the bench's own process) never shares an event loop or a GIL with a worker:
otherwise thousands of client calls delay the worker's workflow tasks and the bench measures its own
load generator (webhook bridges in a deployment are separate processes too).

:class:`BenchWorker` is one such process on its own, for the benches that read its memory
(``/proc/<pid>/status``) or SIGKILL and restart it (``bench_memory.py --worker``,
``bench_full_shards.py``).

``WFI_BENCH_CAPACITY_BYTES=N`` lowers the activations' capacity (``core.limits.CAPACITY_BYTES``)
in this worker process only, so a bench can fill shards to their capacity in minutes, not hours.
Only this bench worker reads it; the product has no such setting.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

ROOT = pathlib.Path(__file__).resolve().parent.parent
ROLES = ("activations", "runs")


@dataclasses.dataclass(frozen=True)
class Queues:
    """The activation worker's task queue and the run workers' task queue."""

    activations: str
    runs: str


@contextlib.contextmanager
def worker_processes(address: str, queues: Queues, log_file: pathlib.Path) -> Iterator[None]:
    """Start one activation worker and one run worker process; stop both on exit."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONTZPATH="")
    procs: list[subprocess.Popen[bytes]] = []
    with log_file.open("ab") as log:
        try:
            for role, queue in (("activations", queues.activations), ("runs", queues.runs)):
                procs.append(subprocess.Popen([sys.executable, "-m", "bench._workers", address, queue, role],
                                              stdout=subprocess.PIPE, stderr=log, env=env, cwd=ROOT))
            for proc in procs:
                _wait_ready(proc, log_file)
            yield
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()


class BenchWorker:
    """One bench worker process (``role`` on ``task_queue``) that a bench can measure, kill and start again.

    ``env``: more environment for the process (e.g. ``WFI_BENCH_CAPACITY_BYTES``).
    """

    def __init__(self, address: str, task_queue: str, log_file: pathlib.Path, *, role: str = "activations",
                 env: dict[str, str] | None = None) -> None:
        self.task_queue = task_queue
        self.args = [sys.executable, "-m", "bench._workers", address, task_queue, role]
        self.env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONTZPATH="", **(env or {}))
        self.log_file = log_file
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None, "the worker is not started"
        return self.proc.pid

    def start(self) -> float:
        """Start the process; return the seconds until it said it polls its task queue."""
        assert self.proc is None or self.proc.poll() is not None, "the worker is running"
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=log, env=self.env, cwd=ROOT)
        _wait_ready(self.proc, self.log_file)
        return time.monotonic() - began

    def kill(self) -> None:
        """SIGKILL: no shutdown, no cleanup (a crashed or OOM-killed worker)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def memory(self) -> dict[str, int]:
        """``VmRSS`` (resident now) and ``VmHWM`` (the most resident so far) of the process, in bytes."""
        fields = {}
        for line in pathlib.Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) * 1024  # reported in kB
        return fields


def _wait_ready(proc: subprocess.Popen[bytes], log_file: pathlib.Path, timeout: float = 60.0) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if b"worker-ready" in line:
            return
        if proc.poll() is not None:
            raise RuntimeError(f"a bench worker exited with {proc.returncode} before it was ready; see {log_file}")
    raise TimeoutError(f"a bench worker was not ready within {timeout:.0f}s; see {log_file}")


async def _serve(address: str, task_queue: str, role: str) -> None:
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.worker import Worker

    from bench._common import BARE_WORKFLOWS
    from wf_initiation.plugin import WfiPlugin, _runner
    from wf_initiation.workflows.sample_runs import EchoRun

    runtime = None
    if os.environ.get("WFI_BENCH_METRICS_PORT"):  # SDK metrics (activation and task latencies) for profiling
        from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

        port = int(os.environ["WFI_BENCH_METRICS_PORT"]) + ROLES.index(role)
        runtime = Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=f"127.0.0.1:{port}")))
    client = await Client.connect(address, data_converter=pydantic_data_converter, runtime=runtime)
    extra: dict = {}
    if os.environ.get("WFI_BENCH_MAX_CACHED"):  # experiments: 0 turns sticky queues off
        extra["max_cached_workflows"] = int(os.environ["WFI_BENCH_MAX_CACHED"])
    if os.environ.get("WFI_BENCH_CAPACITY_BYTES"):
        _lower_capacity(int(os.environ["WFI_BENCH_CAPACITY_BYTES"]))
    if role == "activations":
        from bench._common import BareStarter
        from bench.bench_external import bare_run_input
        from wf_initiation.wire import ECHO_RUN_WORKFLOW

        floor = BareStarter(client, ECHO_RUN_WORKFLOW, bare_run_input)
        worker = Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=False)], workflows=BARE_WORKFLOWS,
                        activities=[floor.start_runs], **extra)
    else:
        worker = Worker(client, task_queue=task_queue, workflows=[EchoRun], workflow_runner=_runner(None))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        print("worker-ready", flush=True)
        await stop.wait()


def _lower_capacity(capacity_bytes: int) -> None:
    """Set the activations' capacity in this process (the engine reads the module attribute on each check,
    as the tests lower it with ``monkeypatch``)."""
    from wf_initiation.core.engine import _facade, _intake

    _intake.CAPACITY_BYTES = capacity_bytes
    _facade.CAPACITY_BYTES = capacity_bytes
    print(f"bench worker: capacity lowered to {capacity_bytes} bytes (WFI_BENCH_CAPACITY_BYTES)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[3] not in ROLES:
        raise SystemExit(f"usage: python -m bench._workers ADDRESS TASK_QUEUE {{{'|'.join(ROLES)}}}")
    asyncio.run(_serve(*sys.argv[1:]))
