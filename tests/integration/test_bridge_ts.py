"""A bridge in another language speaks the wire contract (issue 34 item 2, docs/wire.md): the TypeScript
bridge of examples/bridge-ts (the official @temporalio/client, the team's AES-GCM codec plugged into
its client) delivers by update and by signal and handles every disposition as the page says; the
`temporal` CLI's `workflow update execute` / `workflow signal` with JSON, the fallback for Go, Java
or a shell, works as well. Each ends with a normal delivery accepted and its run started.

The npm project is installed once per lock file into .wfi/bridge-ts/<digest> (npm reaches its
registry from CI's machine; later runs reuse it), copied there so the checkout stays clean.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import pathlib
import shutil
import subprocess

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.codec import assert_only_encrypted, load_module, write_team_codec
from tests.support.paths import ROOT
from tests.support.runs import describe_or_none
from tests.support.temporal import binary
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import workflow_id_for

pytestmark = pytest.mark.xdist_group("bridge-ts")  # one npm install at a time
BRIDGE = ROOT / "examples" / "bridge-ts"
HOOK = """
name: {name}
on:
  http.request: {{}}
  as: hook
"""


def _installed() -> pathlib.Path:
    """The bridge built in a cache folder of its own, keyed by its sources and lock file."""
    npm, node = shutil.which("npm"), shutil.which("node")
    if not npm or not node:
        pytest.skip("node and npm are needed for the TypeScript bridge (Debian: apt-get install nodejs npm)")
    sources = [BRIDGE / "package.json", BRIDGE / "package-lock.json", BRIDGE / "tsconfig.json", *sorted((BRIDGE / "src").glob("*.ts"))]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:16]
    home = ROOT / ".wfi" / "bridge-ts" / digest
    if not (home / "dist" / "bridge.js").exists():
        shutil.rmtree(home, ignore_errors=True)
        (home / "src").mkdir(parents=True)
        for path in sources:
            shutil.copy2(path, home / path.relative_to(BRIDGE))
        for command in ([npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"], [npm, "run", "build"]):
            done = subprocess.run(command, cwd=home, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, f"{' '.join(command)} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return home


async def _bridge(home: pathlib.Path, address: str, workflow: str, lines: list[dict], key: bytes | None) -> list[dict]:
    args = ["node", str(home / "dist" / "bridge.js"), "--address", address, "--workflow", workflow,
            *(["--key", key.hex()] if key else [])]
    proc = await asyncio.create_subprocess_exec(*args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate("".join(json.dumps(x) + "\n" for x in lines).encode()), 180)
    assert proc.returncode == 0, err.decode()
    return [json.loads(x) for x in out.decode().splitlines()]


def _hook(ident: str, body: object) -> dict:
    return {"delivery_id": ident, "method": "POST", "headers": {"content-type": "application/json"}, "body": body}


async def _run_started(client: Client, run_key: str) -> None:
    assert await describe_or_none(client, run_key) is not None, f"{run_key} not started yet"


async def test_the_typescript_bridge_delivers_through_the_team_s_codec_and_handles_every_disposition(
    dev_env, tmp_path: pathlib.Path, task_queue: str,
) -> None:
    home = _installed()
    key = AESGCM.generate_key(bit_length=256)
    team = load_module(write_team_codec(tmp_path, key))
    client = Client(dev_env.client.service_client, namespace=dev_env.client.namespace,
                    data_converter=team.data_converter, plugins=[WfiPlugin(sample_runs=True)])
    name = unique("bridge")
    secret = f"SECRET-{name}"
    async with Worker(client, task_queue=task_queue):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(make_spec(tmp_path, HOOK.format(name=name), task_queue=task_queue))
        lines = [
            {"via": "update", "entry": "hook", "payload": _hook("u-1", {"note": secret})},
            {"via": "update", "entry": "hook", "payload": _hook("u-1", {"note": secret})},  # a redelivery
            {"via": "update", "entry": "hook", "payload": _hook("u-1", {"note": "changed"})},  # same id, other payload
            {"via": "update", "entry": "hook", "payload": {"delivery_id": "u-2", "method": "BREW", "body": {}}},
            {"via": "signal", "entry": "hook", "payload": _hook("s-1", {"note": secret})},
            {"via": "signal", "entry": "hook", "payload": _hook("s-1", {"note": secret})},
        ]
        answers = await _bridge(home, dev_env.client.service_client.config.target_host, name, lines, key)
        assert [(a["delivery_id"], a["via"], a["disposition"], a["outcome"]) for a in answers] == [
            ("u-1", "update", "accepted", "taken"),
            ("u-1", "update", "duplicate", "taken"),
            ("u-1", "update", "conflict", "refused"),
            ("u-2", "update", "invalid", "refused"),
            ("s-1", "signal", "accepted", "taken"),
            ("s-1", "signal", "accepted", "taken"),  # the query reads the first one's record
        ], answers
        state = await wfi.state(name, include_events=True)
        kinds = state["summary"]["error_counts"] if "summary" in state else state["error_counts"]
        assert kinds.get("conflict") == 1 and kinds.get("invalid") == 1, kinds
        for ident in ("u-1", "s-1"):
            record = await wfi.delivery(name, "hook", ident)
            assert record is not None and record["disposition"] == "accepted", record
            await assert_eventually(lambda r=record: _run_started(client, r["run_key"]), timeout=60)
        errors = state["errors"] if "errors" in state else state["summary"]["errors"]
        assert any(e["kind"] == "invalid" and e["delivery_id"] == "u-2" for e in errors), errors  # recorded with its id
        await assert_eventually(lambda: assert_only_encrypted(client, workflow_id_for(name), [secret.encode()]), timeout=30)
        # The activation goes on: a new delivery from the bridge is accepted and starts its run.
        more = await _bridge(home, dev_env.client.service_client.config.target_host, name,
                             [{"via": "update", "entry": "hook", "payload": _hook("u-3", {})}], key)
        assert more[0]["disposition"] == "accepted", more
        record = await wfi.delivery(name, "hook", "u-3")
        assert record is not None
        await assert_eventually(lambda: _run_started(client, record["run_key"]), timeout=60)


@pytest.mark.parametrize("failures", ["encrypted", "plain"])
async def test_the_typescript_bridge_without_the_team_s_codec_is_refused_at_its_first_update_then_delivers_with_it(
    dev_env, tmp_path: pathlib.Path, task_queue: str, failures: str,
) -> None:
    home = _installed()
    key = AESGCM.generate_key(bit_length=256)
    team = load_module(write_team_codec(tmp_path, key))
    # The team's converter moves failure messages into an encrypted payload (DefaultFailureConverterWithEncodedAttributes);
    # without it, failures travel as they are.
    converter = team.data_converter if failures == "encrypted" else DataConverter(payload_codec=team.codec)
    client = Client(dev_env.client.service_client, namespace=dev_env.client.namespace,
                    data_converter=converter, plugins=[WfiPlugin(sample_runs=True)])
    name = unique("forgetful")
    secret = f"SECRET-{name}"
    address = dev_env.client.service_client.config.target_host
    async with Worker(client, task_queue=task_queue):
        wfi = WfiClient(client, task_queue=task_queue)
        spec = make_spec(tmp_path, HOOK.format(name=name), task_queue=task_queue,
                         temporal={"data_converter": "team_codec:data_converter"})
        assert spec.unencoded == "refuse"
        await wfi.activate(spec)
        line = {"via": "update", "entry": "hook", "payload": _hook("u-1", {"note": secret})}
        [forgot] = await _bridge(home, address, name, [line], None)  # no --key: plain JSON payloads
        assert (forgot["disposition"], forgot["outcome"]) == (None, "refused"), forgot
        if failures == "plain":  # the refusal's type, which docs/wire.md explains (the bridge prints the type)
            assert forgot["message"].startswith("Unencoded:"), forgot
        else:  # the TypeScript SDK cannot read the encrypted failure, and says so: the same diagnosis
            assert forgot["message"] == "error: Unknown encoding: binary/encrypted", forgot
        assert await wfi.delivery(name, "hook", "u-1") is None
        await assert_eventually(lambda: assert_only_encrypted(client, workflow_id_for(name), [secret.encode()]), timeout=30)
        [sent] = await _bridge(home, address, name, [line], key)
        assert (sent["disposition"], sent["outcome"]) == ("accepted", "taken"), sent
        record = await wfi.delivery(name, "hook", "u-1")
        assert record is not None
        await assert_eventually(lambda: _run_started(client, record["run_key"]), timeout=60)


async def test_the_temporal_cli_with_json_delivers_by_update_and_by_signal(dev_env, wfi: WfiClient, tmp_path: pathlib.Path,
                                                                           task_queue: str) -> None:
    name = unique("cli-bridge")
    await wfi.activate(make_spec(tmp_path, HOOK.format(name=name), task_queue=task_queue))
    address = dev_env.client.service_client.config.target_host
    target = ["--address", address, "--namespace", dev_env.client.namespace, "--workflow-id", workflow_id_for(name)]

    async def cli(*args: str) -> str:
        # A shell user's retry: the same update id again after a transient refusal (on a loaded
        # machine: "Workflow Task in failed state" while a slow task timed out and is retried).
        proc = await asyncio.create_subprocess_exec(binary("temporal"), "workflow", *args, *target,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        return out.decode()

    request = json.dumps({"entry": "hook", "payload": _hook("c-1", {"from": "cli"})})
    answer = await assert_eventually(lambda: cli("update", "execute", "--name", "deliver", "--input", request,
                                                 "--update-id", f"cli-{name}", "--output", "json"), timeout=120, interval=2)
    assert '"accepted"' in answer, answer
    signalled = json.dumps({"entry": "hook", "payload": _hook("c-2", {"from": "cli"})})
    await cli("signal", "--name", "deliver_signal", "--input", signalled)

    async def taken(ident: str) -> dict:
        record = await wfi.delivery(name, "hook", ident)
        assert record is not None and record["disposition"] == "accepted", record
        return record

    for ident in ("c-1", "c-2"):
        await assert_eventually(lambda i=ident: taken(i), timeout=60)
        record = await taken(ident)
        await assert_eventually(lambda r=record: _run_started(wfi.client, r["run_key"]), timeout=60)
