"""`wfi up --activate` with the examples, end to end: every example starts a run within a minute
(split from tests/core/test_examples.py, which validates them without a server)."""

from __future__ import annotations

import asyncio
import os
import pathlib
import shlex
import shutil
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from tests.support.cli import WFI, cli_env, wfi
from tests.support.paths import ROOT
from tests.support.waits import assert_eventually
from tests.support.worker_proc import free_port
from wf_initiation.client import WfiClient
from wf_initiation.core.deployment import load_deployment

EXAMPLES_DIR = ROOT / "examples"
EXAMPLES = sorted(p for p in EXAMPLES_DIR.glob("*.yaml") if p.name != "deployment.yaml")  # the rest are Workfiles


def documented_commands() -> list[list[str]]:
    """The commands of examples/README.md's "Try every example", split as a shell would."""
    readme = (EXAMPLES_DIR / "README.md").read_text()
    block = readme.split("## Try every example", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [shlex.split(line) for line in block.replace("\\\n", " ").splitlines() if line.strip()]


class Up:
    """`wfi up --activate` of a copy of examples/ as it is, in its own session, on free ports.

    The copy's live sources and feed port are its own (wf_initiation/cli/_example_sources.py): a
    second `up` on this machine, of another clone, collides with it nowhere."""

    def __init__(self, tmp_path: pathlib.Path) -> None:
        self.dir = tmp_path / "examples"
        shutil.copytree(EXAMPLES_DIR, self.dir, ignore=shutil.ignore_patterns("*.db", ".wfi"))
        self.deployment = self.dir / "deployment.yaml"
        self.live = self.dir / ".wfi" / "sources"
        self.port = free_port()
        self.stderr = tmp_path / "up.stderr"
        self.lines: list[str] = []
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with self.stderr.open("wb") as err:
            self.proc = await asyncio.create_subprocess_exec(
                *WFI, "up", "--activate", "--deployment", str(self.deployment), "--port", str(self.port),
                "--ui-port", str(free_port()), "--ingress-port", str(free_port()), "--db-file", str(self.dir.parent / "up.db"),
                stdout=asyncio.subprocess.PIPE, stderr=err, env=cli_env(), start_new_session=True)

    async def activated(self, count: int, timeout: float = 180) -> None:
        """Read its output until ``count`` Workfiles are activated."""
        assert self.proc is not None and self.proc.stdout is not None
        async with asyncio.timeout(timeout):
            while sum(line.startswith(("activated ", "rebound ", "unchanged ")) for line in self.lines) < count:
                line = await self.proc.stdout.readline()
                if not line:
                    pytest.fail(f"wfi up ended early: {self.lines} {self.stderr.read_text()[-3000:]}")
                self.lines.append(line.decode().rstrip())

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(self.proc.wait(), 90)
            finally:
                if self.proc.returncode is None:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    await self.proc.wait()


@pytest.fixture
async def up(tmp_path: pathlib.Path) -> AsyncIterator[Up]:
    running = Up(tmp_path)
    try:
        yield running
    finally:
        await running.stop()


def started(state: dict[str, Any]) -> list[str]:
    return [r["run_key"] for r in [*state["recent_runs"], *state["runs"].values()] if r.get("started_at")]


@pytest.mark.slow
async def test_up_activate_with_the_examples_starts_a_run_of_every_example_within_a_minute(up: Up) -> None:
    names = list(load_deployment(up.deployment).workflows)
    assert sorted(names) == sorted(p.stem for p in EXAMPLES)
    await up.start()
    await up.activated(len(names))
    began = asyncio.get_running_loop().time()
    sources = [line for line in up.lines if line.startswith("example sources: ")]
    assert len(sources) == 3, up.lines  # the database created, the sheet copied, the feed served
    feed_port = int((up.live / "feed-port").read_text())
    assert f"example sources: created {up.live / 'orders.db'} from {up.dir / 'sources' / 'orders.sql'}" in up.lines
    assert f"example sources: serving the feeds of {up.dir / 'sources'} at http://127.0.0.1:{feed_port}/" in up.lines
    address = ("--address", f"127.0.0.1:{up.port}")
    for command in documented_commands():
        assert command[0] == "wfi", command
        done = await wfi(*[str(up.deployment) if a == "examples/deployment.yaml" else a for a in command[1:]], *address)
        assert done.code == 0, f"{shlex.join(command)}: {done.stdout}{done.stderr}"

    client = await Client.connect(f"127.0.0.1:{up.port}", data_converter=pydantic_data_converter)
    examples = WfiClient(client, task_queue=load_deployment(up.deployment).temporal.task_queue)

    async def every_example_has_a_run() -> None:
        without = [name for name in names if not started(await examples.state(name))]
        assert without == [], f"no run started yet for {without}"

    await assert_eventually(every_example_has_a_run, timeout=60 - (asyncio.get_running_loop().time() - began))
    errors = up.stderr.read_text()
    assert "Completing activity as failed" not in errors and "poll of" not in errors, errors[-3000:]
