"""`wfi serve` and `wfi up` as processes: a bad ingress section is one line and exit 1, SIGTERM lets
the requests in flight finish, and `wfi up` gives a working webhook endpoint beside its worker."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import re
import signal
import sys

import httpx
import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from tests.support.activation import unique
from tests.support.hostile import run_started
from tests.support.ingress import activate_all, deployment_with
from tests.support.runs import describe_or_none
from tests.support.waits import assert_eventually
from tests.support.worker_proc import free_port
from wf_initiation.client import WfiClient
from wf_initiation.plugin import WfiPlugin

WFI = (sys.executable, "-m", "wf_initiation")
HOOK = """
name: {name}
on:
  http.request: {{}}
"""
URL = re.compile(r"webhook ingress on (http://\S+): POST")


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k != "TEMPORAL_ADDRESS"}, "PYTHONTZPATH": ""}


def _write(tmp_path: pathlib.Path, name: str, deployment_doc: dict) -> pathlib.Path:
    (tmp_path / f"{name}.yaml").write_text(HOOK.format(name=name))
    path = tmp_path / "deployment.json"  # JSON is YAML
    path.write_text(json.dumps(deployment_doc))
    return path


async def _lines_until(stream: asyncio.StreamReader, pattern: str, seen: list[str], timeout: float = 90) -> re.Match:
    async def read() -> re.Match:
        while True:
            raw = await stream.readline()
            if not raw:
                pytest.fail(f"the process ended before {pattern!r}: {seen}")
            seen.append(raw.decode().rstrip())
            found = re.search(pattern, seen[-1])
            if found:
                return found
    return await asyncio.wait_for(read(), timeout)


async def test_wfi_serve_refuses_a_section_it_cannot_serve_in_one_line(tmp_path: pathlib.Path) -> None:
    name = unique("bad")
    path = _write(tmp_path, name, {
        "workflows": {name: {"workfile": f"{name}.yaml", "run": {"workflow_type": "wfi.EchoRun", "task_queue": "q"}}},
        "ingress": {"endpoints": [{"workflow": name, "entry": "nope", "auth": {"scheme": "none"}}]},
    })
    proc = await asyncio.create_subprocess_exec(*WFI, "serve", "--deployment", str(path), "--port", "0",
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env())
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1
    assert err.decode().count("\n") == 1 and "no external entry 'nope'" in err.decode(), err.decode()

    taken = free_port()
    path.write_text(json.dumps({"workflows": json.loads(path.read_text())["workflows"],
                                "ingress": {"default_auth": {"scheme": "none"}}}))
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        proc = await asyncio.create_subprocess_exec(*WFI, "serve", "--deployment", str(path), "--port", str(taken),
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env())
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1 and err.decode().count("\n") == 1 and str(taken) in err.decode(), err.decode()


async def test_sigterm_finishes_the_request_in_flight_before_wfi_serve_exits(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-8
    name = unique("graceful")
    deployment = deployment_with(tmp_path, {name: HOOK.format(name=name)}, task_queue=task_queue,
                                 ingress={"default_auth": {"scheme": "none"}})
    wfi = WfiClient(dev_env.client, task_queue=task_queue)
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        await activate_all(wfi, deployment)
    path = tmp_path / "deployment.json"
    path.write_text(json.dumps({
        "temporal": {"address": dev_env.client.service_client.config.target_host, "task_queue": task_queue},
        "workflows": {name: {"workfile": f"{name}.yaml", "run": {"workflow_type": "wfi.EchoRun", "task_queue": task_queue}}},
        "ingress": {"default_auth": {"scheme": "none"}},
    }))
    proc = await asyncio.create_subprocess_exec(*WFI, "serve", "--deployment", str(path), "--port", "0",
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env())
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        url = (await _lines_until(proc.stdout, URL.pattern, seen)).group(1)
        await _lines_until(proc.stdout, "connected", seen)
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            # No worker: the delivery waits in the ingress for its durable disposition.
            in_flight = asyncio.create_task(http.post(f"/hooks/{name}", json={"n": 1}, headers={"Idempotency-Key": "g-1"}))

            async def waiting() -> None:
                metrics = (await http.get("/metrics")).text
                assert "wfi_ingress_deliveries_in_flight 1.0" in metrics

            await assert_eventually(waiting)
            proc.send_signal(signal.SIGTERM)
            await _lines_until(proc.stdout, "finishing the requests in flight", seen)
            with pytest.raises(httpx.ConnectError):  # it accepts no new connection meanwhile
                async with httpx.AsyncClient(base_url=url, timeout=5) as fresh:
                    await fresh.get("/healthz")
            assert proc.returncode is None, "still running while a request is in flight"
            async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
                answered = await in_flight
                assert answered.status_code == 202 and answered.json()["disposition"] == "accepted", answered.text
                assert await asyncio.wait_for(proc.wait(), 60) == 0
        await _lines_until(proc.stdout, "ingress stopped", seen)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_wfi_up_starts_the_ingress_beside_the_worker_and_a_webhook_starts_a_run(tmp_path: pathlib.Path) -> None:
    # proves: EXT-1, EXT-8
    name = unique("up-hook")
    port, ui_port, ingress_port = free_port(), free_port(), free_port()
    path = _write(tmp_path, name, {
        "temporal": {"task_queue": unique("up-ingress")},
        "workflows": {name: {"workfile": f"{name}.yaml", "run": {"workflow_type": "wfi.EchoRun", "task_queue": "wfi-up-hooks"}}},
        "ingress": {"default_auth": {"scheme": "none"}},
    })
    doc = json.loads(path.read_text())
    doc["workflows"][name]["run"]["task_queue"] = doc["temporal"]["task_queue"]
    path.write_text(json.dumps(doc))
    log = tmp_path / "up.stderr"
    with log.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            *WFI, "up", "--deployment", str(path), "--port", str(port), "--ui-port", str(ui_port),
            "--db-file", str(tmp_path / "up.db"), "--activate", "--ingress-port", str(ingress_port),
            stdout=asyncio.subprocess.PIPE, stderr=stderr, env=_env())
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        # The ingress (a process of its own) and the activation get ready in either order.
        url = (await _lines_until(proc.stdout, URL.pattern, seen)).group(1)
        assert url == f"http://127.0.0.1:{ingress_port}", "the port is printed"
        if not any(f"activated {name}" in line for line in seen):
            await _lines_until(proc.stdout, f"activated {name}", seen)
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            answer = await http.post(f"/hooks/{name}", json={"hello": "up"}, headers={"Idempotency-Key": "up-1"})
            assert answer.status_code == 202 and answer.json()["disposition"] == "accepted", answer.text
            assert (await http.get("/readyz")).json()["activations"] == {name: "running"}
        client = await Client.connect(f"127.0.0.1:{port}", data_converter=pydantic_data_converter)

        async def ran() -> dict:
            assert await describe_or_none(client, answer.json()["run_key"]) is not None
            return await client.get_workflow_handle(answer.json()["run_key"]).result()

        result = await assert_eventually(ran, timeout=60)
        assert result["input"]["bindings"]["request"]["body"] == {"hello": "up"}
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 90) == 0
        rest = (await proc.stdout.read()).decode().splitlines()
        order = [line for line in seen + rest if "ingress stopping" in line or "worker stopped" in line]
        assert order and "ingress stopping" in order[0], f"the ingress drains before the worker stops: {order}"
    finally:
        if proc.returncode is None:  # SIGINT first: a SIGKILLed `wfi up` leaves its dev server running
            proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(proc.wait(), 60)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def test_the_ingress_of_wfi_up_is_a_process_of_its_own_restarted_when_it_dies_and_ended_with_wfi_up(
    dev_env, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-1
    name = unique("up-child")
    queue = unique("up-child-q")
    path = _write(tmp_path, name, {
        "temporal": {"task_queue": queue},
        "workflows": {name: {"workfile": f"{name}.yaml", "run": {"workflow_type": "wfi.EchoRun", "task_queue": queue}}},
        "ingress": {"default_auth": {"scheme": "none"}},
    })
    address = dev_env.client.service_client.config.target_host
    proc = await asyncio.create_subprocess_exec(
        *WFI, "up", "--deployment", str(path), "--address", address, "--activate", "--ingress-port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env())
    seen: list[str] = []
    errors: list[str] = []
    assert proc.stdout is not None and proc.stderr is not None
    stderr = asyncio.create_task(_collect(proc.stderr, errors))
    child = re.compile(URL.pattern + r".*\(process (\d+)\)")
    try:
        first = await _lines_until(proc.stdout, child.pattern, seen)
        pid = int(first.group(2))
        assert pid != proc.pid
        if not any(f"activated {name}" in line for line in seen):
            await _lines_until(proc.stdout, f"activated {name}", seen)
        os.kill(pid, signal.SIGKILL)
        again = await _lines_until(proc.stdout, child.pattern, seen)
        assert int(again.group(2)) != pid, "a new ingress process"
        assert any("webhook ingress exited (killed by signal 9); restarting it" in line for line in errors), errors
        async with httpx.AsyncClient(base_url=again.group(1), timeout=60) as http:
            answer = await http.post(f"/hooks/{name}", json={"after": "restart"}, headers={"Idempotency-Key": "r-1"})
            assert answer.status_code == 202 and answer.json()["disposition"] == "accepted", answer.text
        await run_started(dev_env.client, answer.json()["run_key"])

        proc.kill()  # even a SIGKILLed `wfi up` takes its ingress with it: the child's stdin closes
        await proc.wait()
        restarted = int(again.group(2))

        async def gone() -> None:
            assert not os.path.exists(f"/proc/{restarted}"), "the ingress outlived wfi up"
        await assert_eventually(gone, timeout=60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        stderr.cancel()


async def _collect(stream: asyncio.StreamReader, into: list[str]) -> None:
    while raw := await stream.readline():
        into.append(raw.decode(errors="replace").rstrip())
