"""`python3 dev.py up` and `wfi up` stop everything they started when they are signalled.

Each run starts in its own session (so its process group is its own): the signal goes to the one
process a supervisor or a user would signal, and afterwards no process of that group may remain,
the dev server of the run's db file is gone, and every port of the run is free again.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import socket
import sys

import pytest

from tests.support.activation import unique
from tests.support.cli import WFI, cli_env
from tests.support.paths import ROOT
from tests.support.worker_proc import free_port


class Run:
    """One `up` started in its own session, with its ports, db file and output files."""

    def __init__(self, tmp_path: pathlib.Path) -> None:
        self.ports = {"gRPC": free_port(), "Web UI": free_port(), "ingress": free_port()}
        self.db_file = tmp_path / "up.db"
        self.deployment = tmp_path / "deployment.yaml"
        self.deployment.write_text(f"temporal: {{task_queue: {unique('tq-up')}}}\n")
        self.stderr = tmp_path / "up.stderr"
        self.lines: list[str] = []
        self.proc: asyncio.subprocess.Process | None = None

    def args(self) -> list[str]:
        return ["up", "--deployment", str(self.deployment), "--port", str(self.ports["gRPC"]),
                "--ui-port", str(self.ports["Web UI"]), "--ingress-port", str(self.ports["ingress"]),
                "--db-file", str(self.db_file)]

    async def start(self, *command: str) -> asyncio.subprocess.Process:
        with self.stderr.open("wb") as err:
            self.proc = await asyncio.create_subprocess_exec(
                *command, *self.args(), cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=err, env=cli_env(),
                start_new_session=True)
        return self.proc

    async def ready(self, timeout: float = 180) -> None:
        """Read its output until the worker is ready (the last thing `up` reports before serving)."""
        assert self.proc is not None and self.proc.stdout is not None
        async with asyncio.timeout(timeout):
            while not self.lines or not self.lines[-1].startswith("worker ready"):
                line = await self.proc.stdout.readline()
                if not line:
                    pytest.fail(f"up ended before its worker was ready: {self.output()}")
                self.lines.append(line.decode().rstrip())

    async def wait(self, timeout: float = 90) -> int:
        """Its exit status, its output read to the end."""
        assert self.proc is not None and self.proc.stdout is not None
        rest = await asyncio.wait_for(self.proc.stdout.read(), timeout)
        self.lines += rest.decode().splitlines()
        return await asyncio.wait_for(self.proc.wait(), timeout)

    def output(self) -> str:
        return "stdout:\n" + "\n".join(self.lines) + f"\nstderr:\n{self.stderr.read_text()}"

    def leftovers(self) -> list[str]:
        """Processes of the run's group, dev servers of its db file, and ports still listening."""
        assert self.proc is not None
        found = [f"pid {pid}: {cmd}" for pid, cmd in _processes()
                 if _group(pid) == self.proc.pid or (str(self.db_file) in cmd and "start-dev" in cmd)]
        found += [f"{what} port {port} still listening" for what, port in self.ports.items() if _listening(port)]
        return found

    async def stop(self) -> None:
        """Whatever happened: nothing of the run survives the test."""
        if self.proc is not None and self.proc.returncode is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            await self.proc.wait()
        for pid, cmd in _processes():
            if str(self.db_file) in cmd:
                os.kill(pid, signal.SIGKILL)


def _processes() -> list[tuple[int, str]]:
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.append((int(entry.name), (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()))
            except OSError:
                continue
    return found


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _linux_only() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc to find the run's processes")


async def test_dev_py_up_stopped_by_sigint_to_its_own_process_exits_130_and_leaves_nothing_running(
    tmp_path: pathlib.Path,
) -> None:
    _linux_only()
    if pathlib.Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        pytest.skip("dev.py runs the repository's .venv, and these tests do not run in it")
    run = Run(tmp_path)
    try:
        proc = await run.start(sys.executable, str(ROOT / "dev.py"))
        await run.ready()
        proc.send_signal(signal.SIGINT)  # dev.py's process only, not its group (as Ctrl-C would)
        assert await run.wait() == 130, run.output()
        assert "Traceback" not in run.stderr.read_text() and "KeyboardInterrupt" not in run.stderr.read_text(), run.output()
        assert "Temporal dev server stopped" in run.lines, run.output()
        assert run.leftovers() == []
    finally:
        await run.stop()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_wfi_up_stopped_by_a_signal_to_its_process_stops_its_server_and_frees_its_ports(
    tmp_path: pathlib.Path, signum: signal.Signals
) -> None:
    _linux_only()
    run = Run(tmp_path)
    try:
        proc = await run.start(*WFI)
        await run.ready()
        proc.send_signal(signum)
        assert await run.wait() == 0, run.output()
        assert "Temporal dev server stopped" in run.lines, run.output()
        assert "Traceback" not in run.stderr.read_text(), run.output()
        assert run.leftovers() == []
    finally:
        await run.stop()
