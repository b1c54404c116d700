"""Running `wfi` as a real subprocess in tests, and the Workfile + deployment pair the CLI tests use."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML

WFI = (sys.executable, "-m", "wf_initiation")
MAIL_WORKFILE = """
name: {name}
inputs:
  region: eu
on:
  mail.received:
    inbox: support@acme.com
  as: message
  queue_by: "{{{{ message.thread_id }}}}"
"""


@dataclass
class Cli:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    def assert_one_line_error(self, code: int, *fragments: str) -> None:
        """Exit ``code``, exactly one line on stderr holding every fragment, no traceback."""
        assert self.code == code, f"exit {self.code}, expected {code}: {self.stderr}"
        assert "Traceback" not in self.stderr, self.stderr
        assert self.stderr.count("\n") == 1 and self.stderr.endswith("\n"), repr(self.stderr)
        for fragment in fragments:
            assert fragment in self.stderr, f"{fragment!r} not in {self.stderr!r}"


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TEMPORAL_ADDRESS"}
    return {**env, "PYTHONTZPATH": "", **extra}


async def wfi(*args: str, input: str | bytes | None = None, env: dict[str, str] | None = None, timeout: float = 60,
              cwd: str | None = None) -> Cli:
    """Run ``python -m wf_initiation ARGS`` without blocking the event loop (an in-process worker keeps serving)."""
    proc = await asyncio.create_subprocess_exec(
        *WFI, *args, stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env or cli_env(), cwd=cwd,
    )
    data = input.encode() if isinstance(input, str) else input
    out, err = await asyncio.wait_for(proc.communicate(data), timeout)
    return Cli(proc.returncode or 0, out.decode(), err.decode())


def wfi_sync(*args: str | bytes, input: bytes | None = None, env: dict[str, str] | None = None,
             cwd: str | pathlib.Path | None = None, timeout: float = 60) -> Cli:
    """The same, blocking (for tests without a server)."""
    done = subprocess.run([*WFI, *args], input=input, capture_output=True, env=env or cli_env(), cwd=cwd,
                          timeout=timeout, stdin=None if input is not None else subprocess.DEVNULL)
    return Cli(done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace"))


@dataclass
class Pair:
    name: str
    workfile: pathlib.Path
    deployment: pathlib.Path

    def write_deployment(self, address: str, task_queue: str, *, inputs: dict[str, Any] | None = None,
                         capabilities: list[str] | None = None) -> None:
        doc: dict[str, Any] = {
            "temporal": {"address": address, "task_queue": task_queue},
            "workflows": {self.name: {"workfile": str(self.workfile), "inputs": inputs or {},
                                      "run": {"workflow_type": "wfi.EchoRun", "task_queue": task_queue}}},
        }
        if capabilities is not None:
            doc["capabilities"] = capabilities
        with self.deployment.open("w") as fh:
            YAML(typ="safe", pure=True).dump(doc, fh)

    @property
    def target(self) -> tuple[str, ...]:
        return ("--deployment", str(self.deployment), "--workflow", self.name)


def mail(mid: str, thread: str = "t1", **extra: Any) -> str:
    return json.dumps({"message_id": mid, "from": "a@b.c", "recipient": "help@acme.com", "subject": "hi",
                       "thread_id": thread, **extra})
