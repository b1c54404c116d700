"""`wfi up` restarts a hung ingress, not only a dead one (issue 32, item 6): an ingress process that
answers no `GET /healthz` (here: SIGSTOPped, as a process stuck in a blocking call is) is killed
after the liveness probe's failures and started again, and the new one takes webhooks that start
their runs. (A dead ingress: tests/integration/test_ingress_cli.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import re
import signal
import sys

import httpx
import pytest

from tests.support.activation import unique
from tests.support.hostile import run_started
from wf_initiation.cli.serve import LIVENESS_EVERY, LIVENESS_FAILURES, LIVENESS_TIMEOUT

WFI = (sys.executable, "-m", "wf_initiation")
HOOK = "name: {name}\non:\n  http.request: {{}}\n"
CHILD = re.compile(r"webhook ingress on (http://\S+): POST.*\(process (\d+)\)")


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k != "TEMPORAL_ADDRESS"}, "PYTHONTZPATH": ""}


async def _line(stream: asyncio.StreamReader, pattern: re.Pattern[str], seen: list[str], timeout: float) -> re.Match[str]:
    async def read() -> re.Match[str]:
        while True:
            raw = await stream.readline()
            if not raw:
                pytest.fail(f"wfi up ended before {pattern.pattern!r}: {seen}")
            seen.append(raw.decode(errors="replace").rstrip())
            if found := pattern.search(seen[-1]):
                return found
    return await asyncio.wait_for(read(), timeout)


async def test_a_hung_ingress_is_killed_and_restarted_and_the_new_one_starts_runs(dev_env, tmp_path: pathlib.Path) -> None:
    name, queue = unique("up-hung"), unique("up-hung-q")
    (tmp_path / f"{name}.yaml").write_text(HOOK.format(name=name))
    path = tmp_path / "deployment.json"
    path.write_text(json.dumps({
        "temporal": {"task_queue": queue},
        "workflows": {name: {"workfile": f"{name}.yaml", "run": {"workflow_type": "wfi.EchoRun", "task_queue": queue}}},
        "ingress": {"default_auth": {"scheme": "none"}},
    }))
    address = dev_env.client.service_client.config.target_host
    proc = await asyncio.create_subprocess_exec(
        *WFI, "up", "--deployment", str(path), "--address", address, "--activate", "--ingress-port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env())
    assert proc.stdout is not None and proc.stderr is not None
    out: list[str] = []
    err: list[str] = []
    errors = asyncio.create_task(_collect(proc.stderr, err))
    hung = None
    try:
        first = await _line(proc.stdout, CHILD, out, 120)
        hung = int(first.group(2))
        if not any(f"activated {name}" in line for line in out):
            await _line(proc.stdout, re.compile(f"activated {name}"), out, 120)
        os.kill(hung, signal.SIGSTOP)  # alive, its port open, answering nothing
        detect = LIVENESS_FAILURES * (LIVENESS_EVERY + LIVENESS_TIMEOUT) + 60
        again = await _line(proc.stdout, CHILD, out, detect)
        assert int(again.group(2)) != hung, "a new ingress process"
        assert not os.path.exists(f"/proc/{hung}") or "zombie" in pathlib.Path(f"/proc/{hung}/status").read_text()
        async with httpx.AsyncClient(base_url=again.group(1), timeout=60) as http:
            answer = await http.post(f"/hooks/{name}", json={"after": "hang"}, headers={"Idempotency-Key": "h-1"})
            assert answer.status_code == 202 and answer.json()["disposition"] == "accepted", answer.text
        await run_started(dev_env.client, answer.json()["run_key"])
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.wait(), 90)
        await errors
        assert any(f"the webhook ingress (process {hung}) answered no GET" in line and
                   f"{LIVENESS_FAILURES} times in a row: it hangs; killing it" in line for line in err), err
        assert any("webhook ingress exited (killed by signal 9); restarting it" in line for line in err), err
    finally:
        if hung is not None:
            with contextlib.suppress(ProcessLookupError):  # gone already: what the test wants
                os.kill(hung, signal.SIGKILL)
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        errors.cancel()


async def _collect(stream: asyncio.StreamReader, into: list[str]) -> None:
    while raw := await stream.readline():
        into.append(raw.decode(errors="replace").rstrip())
