"""Issue 18 item 2: thousands of idle and trickling connections against real processes.

`wfi up` runs its ingress in a process of its own: a flood of 3,000 slow connections (reopened as
fast as the ingress closes them) takes the ingress's file descriptors, never the worker's, and
while it goes on a schedule fires on time, a poll takes a new row and a webhook is accepted, each
starting its run. `wfi serve` with a descriptor limit far below the flood keeps answering and logs
a bounded amount, no traceback.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import pathlib
import re
import resource
import signal
import sys
import time
from datetime import datetime
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from tests.support.activation import unique
from tests.support.hostile import run_started, task_failures
from tests.support.ingress import activate_all, deployment_with
from tests.support.paths import ROOT
from tests.support.waits import assert_eventually
from tests.support.worker_proc import free_port
from wf_initiation.client import WfiClient
from wf_initiation.plugin import WfiPlugin

WFI = (sys.executable, "-m", "wf_initiation")
FLOOD = 3000
LIMIT = 1024  # the common default soft limit of open files; the flood is three times that
URL = re.compile(r"webhook ingress on (http://\S+): POST.*at most (\d+) connections \(process (\d+)\)")


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k != "TEMPORAL_ADDRESS"}, "PYTHONTZPATH": ""}


def _limit_files(soft: int) -> Any:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    return apply


def _need_files(n: int) -> None:
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < n:
        pytest.skip(f"the flood needs {n} open files and this machine's hard limit is lower")


async def _flood(host: str, port: int, connections: int, seconds: float, path: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.support.flood", host, str(port), str(connections), str(seconds), path,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE)


async def _flood_result(proc: asyncio.subprocess.Process) -> dict[str, int]:
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    return json.loads(out.decode().strip().splitlines()[-1])


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def _lines(stream: asyncio.StreamReader, seen: list[str]) -> None:
    while raw := await stream.readline():
        seen.append(raw.decode(errors="replace").rstrip())


async def _until(seen: list[str], pattern: str, timeout: float = 90) -> re.Match:
    async def found() -> re.Match:
        for line in seen:
            if match := re.search(pattern, line):
                return match
        raise AssertionError(f"no line matches {pattern!r} yet: {seen[-5:]}")
    return await assert_eventually(found, timeout=timeout, interval=0.2)


SCHEDULED = "name: {name}\non:\n  time.schedule: {{interval: 5s}}\n"
POLLED = "name: {name}\non:\n  sheet.row_added: {{sheet: feed}}\n  as: row\n"
HOOKED = "name: {name}\non:\n  http.request: {{}}\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to count descriptors")
async def test_a_flood_of_slow_connections_under_wfi_up_leaves_every_activation_of_the_worker_on_time(
    tmp_path: pathlib.Path,
) -> None:
    # proves: SCHED-6, POLL-6, EXT-1, EXT-8
    _need_files(FLOOD + 512)
    queue = unique("flood-q")
    scheduled, polled, hooked = unique("flood-sched"), unique("flood-poll"), unique("flood-hook")
    sheet = tmp_path / "feed.csv"
    sheet.write_text("id,title\r\n1,first\r\n")
    run = {"workflow_type": "wfi.EchoRun", "task_queue": queue}
    for name, text in ((scheduled, SCHEDULED), (polled, POLLED), (hooked, HOOKED)):
        (tmp_path / f"{name}.yaml").write_text(text.format(name=name))
    deployment = tmp_path / "deployment.json"  # JSON is YAML
    deployment.write_text(json.dumps({
        "temporal": {"task_queue": queue},
        "connections": {"sheets": {"connector": "sheet", "dir": str(tmp_path)}},
        "workflows": {
            scheduled: {"workfile": f"{scheduled}.yaml", "run": run},
            polled: {"workfile": f"{polled}.yaml", "run": run, "poll": {"interval": "1s"}},
            hooked: {"workfile": f"{hooked}.yaml", "run": run},
        },
        "ingress": {"default_auth": {"scheme": "none"}},
    }))
    port, ui_port, ingress_port = free_port(), free_port(), free_port()
    up = await asyncio.create_subprocess_exec(
        *WFI, "up", "--deployment", str(deployment), "--port", str(port), "--ui-port", str(ui_port),
        "--db-file", str(tmp_path / "up.db"), "--activate", "--ingress-port", str(ingress_port),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env(), preexec_fn=_limit_files(LIMIT))
    seen: list[str] = []
    errors: list[str] = []
    assert up.stdout is not None and up.stderr is not None
    readers = [asyncio.create_task(_lines(up.stdout, seen)), asyncio.create_task(_lines(up.stderr, errors))]
    flood = None
    try:
        announced = await _until(seen, URL.pattern)
        url, cap, ingress_pid = announced.group(1), int(announced.group(2)), int(announced.group(3))
        assert cap <= LIMIT - 4 * 32 - 64, f"the cap ({cap}) leaves descriptors free below the limit ({LIMIT})"
        assert ingress_pid != up.pid, "the ingress is a process of its own"
        for name in (scheduled, polled, hooked):
            await _until(seen, f"activated {name}")
        client = await Client.connect(f"127.0.0.1:{port}", data_converter=pydantic_data_converter)
        wfi = WfiClient(client, task_queue=queue)

        flood = await _flood("127.0.0.1", ingress_port, FLOOD, 45, f"/hooks/{hooked}")
        attack_began = time.monotonic()

        async def flooded() -> None:
            assert _descriptors(ingress_pid) > cap // 2, "the flood holds the ingress's connections"
        await assert_eventually(flooded, timeout=30, interval=0.5)
        worker_files = _descriptors(up.pid)
        assert worker_files < 200, f"the worker's process holds {worker_files} descriptors: none of the flood's"

        # A webhook sent into the flood is accepted at once (retried only if its connection is refused).
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            sent = time.monotonic()

            async def accepted() -> httpx.Response:
                try:
                    answer = await http.post(f"/hooks/{hooked}", json={"during": "flood"},
                                             headers={"Idempotency-Key": '"in-the-flood"'})
                except httpx.TransportError as exc:
                    raise AssertionError(f"refused: {exc!r}") from None
                assert answer.status_code == 202, answer.text
                return answer
            answer = await assert_eventually(accepted, timeout=20, interval=0.2)
            accepted_in = time.monotonic() - sent
            assert accepted_in < 10, "the webhook got in within seconds"
        await run_started(client, answer.json()["run_key"], timeout=20)

        # A row appended now is polled (every 1s) and its run starts.
        appended = time.monotonic()
        with sheet.open("a") as f:
            f.write("2,second\r\n")

        async def row_run_started() -> None:
            events = (await wfi.state(polled, include_events=True))["events"].values()
            keys = [e["run_key"] for e in events if e.get("disposition") == "accepted" and e.get("run_key")]
            assert len(keys) >= 2, events
            for key in keys:
                await run_started(client, key, timeout=1)
        await assert_eventually(row_run_started, timeout=20, interval=0.5)
        row_in = time.monotonic() - appended
        assert row_in < 15, "the new row was taken within a few polls"

        # Schedule occurrences during the flood: each run began within seconds of its instant.
        async def fired_during_flood() -> list[dict[str, Any]]:
            occurrences = (await wfi.state(scheduled))["schedules"]["schedule"]["occurrences"]
            admitted = [o for o in occurrences if o["disposition"] == "admitted"]
            assert len(admitted) >= 3, occurrences
            return admitted
        admitted = await assert_eventually(fired_during_flood, timeout=40, interval=1.0)
        for occurrence in admitted[-3:]:
            instant = datetime.fromisoformat(occurrence["scheduled_at"].replace("Z", "+00:00"))
            fired = datetime.fromisoformat(occurrence["fired_at"].replace("Z", "+00:00"))
            assert (fired - instant).total_seconds() < 3, f"occurrence late by {fired - instant}: {occurrence}"
        assert time.monotonic() - attack_began < 45, "all of it while the flood went on"

        ingress_files = _descriptors(ingress_pid)
        stats = await _flood_result(flood)
        flood = None
        lateness = [o["fired_at"] + " for " + o["scheduled_at"] for o in admitted[-3:]]
        print(f"flood {stats}; descriptors: ingress {ingress_files} (cap {cap}), worker {worker_files}; "
              f"webhook accepted in {accepted_in:.2f}s, row run in {row_in:.2f}s; fired {lateness}")
        assert stats["opened"] >= FLOOD and stats["closed_by_server"] + stats["answered"] > FLOOD, stats
        for name in (scheduled, polled, hooked):
            assert await task_failures(client, name) == [], f"{name}: a workflow task failed during the flood"
        logged = "\n".join(seen + errors)
        assert "Traceback" not in logged
        assert len([line for line in errors if "connections refused" in line]) <= 10, errors[-20:]

        # After the flood, the webhook activation takes a normal delivery and starts its run.
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            after = await http.post(f"/hooks/{hooked}", json={"after": "flood"}, headers={"Idempotency-Key": '"after"'})
            assert after.status_code == 202 and after.json()["disposition"] == "accepted", after.text
        await run_started(client, after.json()["run_key"])
        up.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(up.wait(), 90) == 0
        await asyncio.gather(*readers)
        assert not os.path.exists(f"/proc/{ingress_pid}") or _zombie(ingress_pid), "the ingress stopped with wfi up"
    finally:
        if flood is not None and flood.returncode is None:
            flood.kill()
        await _stop(up)
        for reader in readers:
            reader.cancel()


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """SIGINT first: a SIGKILLed `wfi up` would leave its embedded dev server running."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()


def _zombie(pid: int) -> bool:
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to count descriptors")
async def test_wfi_serve_keeps_answering_through_a_descriptor_exhaustion_attempt_and_logs_little(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-1, EXT-8
    limit, connections = 256, 2000  # eight times the descriptors the process may open
    _need_files(connections + 512)
    name = unique("exhaust")
    deployment = deployment_with(tmp_path, {name: HOOKED.format(name=name)}, task_queue=task_queue,
                                 ingress={"default_auth": {"scheme": "none"}})
    path = tmp_path / "deployment.json"
    path.write_text(json.dumps({"temporal": {"task_queue": task_queue}, "workflows": deployment.workflows,
                                "ingress": {"default_auth": {"scheme": "none"}}}))
    port = free_port()
    log = tmp_path / "serve.log"
    wfi = WfiClient(dev_env.client, task_queue=task_queue)
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        await activate_all(wfi, deployment)
        with log.open("wb") as out:
            serve = await asyncio.create_subprocess_exec(
                *WFI, "serve", "--deployment", str(path), "--port", str(port),
                "--address", dev_env.client.service_client.config.target_host,
                stdout=out, stderr=out, env=_env(), preexec_fn=_limit_files(limit))
        flood = None
        try:
            announced = await _until_in_file(log, r"at most (\d+) connections")
            assert int(announced.group(1)) < limit - 64
            url = f"http://127.0.0.1:{port}"
            flood = await _flood("127.0.0.1", port, connections, 30, f"/hooks/{name}")
            answered = []
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                began = time.monotonic()
                while time.monotonic() - began < 25:  # a sender's deliveries all through the attack
                    n = len(answered)
                    try:
                        answer = await http.post(f"/hooks/{name}", json={"n": n}, headers={"Idempotency-Key": f'"d-{n}"'})
                    except httpx.TransportError:
                        answered.append(None)
                        continue
                    answered.append(answer.status_code)
            stats = await _flood_result(flood)
            flood = None
            assert stats["opened"] > connections, stats
            assert len(answered) >= 10 and answered.count(202) >= 0.9 * len(answered), collections.Counter(answered)
            state = await wfi.state(name, include_events=True)
            kept = {e["delivery_id"] for e in state["events"].values()}
            assert {f"d-{n}" for n, status in enumerate(answered) if status == 202} <= kept
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                normal = await http.post(f"/hooks/{name}", json={"after": 1}, headers={"Idempotency-Key": '"after"'})
            assert normal.status_code == 202 and normal.json()["disposition"] == "accepted", normal.text
            await run_started(dev_env.client, normal.json()["run_key"])
            serve.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(serve.wait(), 60) == 0
            text = log.read_text()
            assert log.stat().st_size < 8_000, f"{log.stat().st_size} bytes of log: {text[-2000:]}"
            assert "Traceback" not in text and "out of system resource" not in text, text[-2000:]
        finally:
            if flood is not None and flood.returncode is None:
                flood.kill()
            if serve.returncode is None:
                serve.kill()
                await serve.wait()


async def _until_in_file(path: pathlib.Path, pattern: str, timeout: float = 60) -> re.Match:
    async def found() -> re.Match:
        match = re.search(pattern, path.read_text(errors="replace"))
        assert match, path.read_text(errors="replace")[-500:]
        return match
    return await assert_eventually(found, timeout=timeout, interval=0.2)
