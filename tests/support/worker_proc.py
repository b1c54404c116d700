"""A real worker in a subprocess, for crash tests: SIGKILL it, start it again.

    async with WorkerProcess(address, task_queue) as proc:
        ...
        proc.kill()          # SIGKILL, no cleanup: the crash under test
        proc.start()         # a fresh worker process picks up from history
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

SCRIPT = r"""
import asyncio, os, sys
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker
from wf_initiation.plugin import WfiPlugin

def knobs():
    # Limits a test lowers in the worker (as tests in this process monkeypatch them): see WorkerProcess.
    from datetime import timedelta
    from wf_initiation.core.engine import _growth, _intake
    if os.environ.get("WFI_TEST_CAPACITY_BYTES"):
        _intake.CAPACITY_BYTES = int(os.environ["WFI_TEST_CAPACITY_BYTES"])
    if os.environ.get("WFI_TEST_GROW_CHECK_SECONDS"):
        _growth.GROW_CHECK_EVERY = timedelta(seconds=float(os.environ["WFI_TEST_GROW_CHECK_SECONDS"]))

async def main():
    knobs()
    client = await Client.connect(sys.argv[1], data_converter=pydantic_data_converter)
    extra = int(os.environ.get("WFI_TEST_MAX_CACHED", "-1"))
    kwargs = {"max_cached_workflows": extra} if extra >= 0 else {}
    async with Worker(client, task_queue=sys.argv[2], plugins=[WfiPlugin(sample_runs=True)], **kwargs):
        print("worker-ready", flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""


class WorkerProcess:
    def __init__(self, address: str, task_queue: str, *, max_cached_workflows: int | None = None,
                 log_path: str | None = None, capacity_bytes: int | None = None,
                 grow_check_seconds: float | None = None):
        """``capacity_bytes``, ``grow_check_seconds``: a shard's capacity and the growth check's interval
        in the worker (core/engine/_intake.py, _growth.py), lowered so a test fills a shard in seconds."""
        self.address = address
        self.log_path = log_path  # the workers' stderr (SDK warnings), appended across restarts
        self.task_queue = task_queue
        self.proc: subprocess.Popen[str] | None = None
        self.env = dict(os.environ, PYTHONTZPATH="")
        if max_cached_workflows is not None:
            self.env["WFI_TEST_MAX_CACHED"] = str(max_cached_workflows)
        if capacity_bytes is not None:
            self.env["WFI_TEST_CAPACITY_BYTES"] = str(capacity_bytes)
        if grow_check_seconds is not None:
            self.env["WFI_TEST_GROW_CHECK_SECONDS"] = str(grow_check_seconds)
        self.starts = 0

    def start(self, timeout: float = 30.0) -> None:
        assert self.proc is None or self.proc.poll() is not None, "worker already running"
        stderr = open(self.log_path, "a") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SCRIPT, self.address, self.task_queue],
            stdout=subprocess.PIPE, stderr=stderr, text=True, env=self.env,
        )
        if self.log_path:
            stderr.close()  # the child holds its own descriptor
        self.starts += 1
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if "worker-ready" in line:
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode} before it was ready")
        raise TimeoutError("worker did not become ready")

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to clean up or finish anything."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> WorkerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> WorkerProcess:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop()


class DevServerProcess:
    """A Temporal dev server on a SQLite file that a test can stop and restart (same data)."""

    def __init__(self, binary: str, db_file: str, port: int, extra_args: list[str] | None = None):
        self.binary, self.db_file, self.port = binary, db_file, port
        self.extra_args = extra_args or []
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        from wf_initiation.wire.search_attributes import ALL

        args = [self.binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(self.port),
                "--db-filename", self.db_file, "--log-level", "error", *self.extra_args]
        for key in ALL:
            args += ["--search-attribute", f"{key.name}={_sa_type(key)}"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def _sa_type(key) -> str:
    from temporalio.common import SearchAttributeIndexedValueType as T

    return {T.KEYWORD: "Keyword", T.KEYWORD_LIST: "KeywordList", T.TEXT: "Text", T.INT: "Int",
            T.DOUBLE: "Double", T.BOOL: "Bool", T.DATETIME: "Datetime"}[key.indexed_value_type]


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range (32768-60999 on Linux): a port the kernel
    handed out for "any" is one it may hand to the next outgoing connection too (the suite opens
    thousands), which then holds it when the server under test binds it ("already in use")."""
    import random
    import socket

    for _ in range(200):
        port = random.randrange(20_000, 32_000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # that range is full: let the kernel pick one
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
