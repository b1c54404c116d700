"""Every tool works for a team that encrypts its payloads (issue 22, item 1): the `wfi` commands, the
worker, `wfi up`, the ingress and the conformance kit take the team's data converter (a
`module:attr` in the deployment or `--data-converter`) or a codec server (`--codec-endpoint`), write
nothing unencrypted, and refuse in one line, before acting, what they could not read or would write
in plaintext."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import uuid

import httpx
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from ruamel.yaml import YAML
from temporalio.client import Client
from temporalio.worker import Worker

from tests.support.activation import unique
from tests.support.cli import MAIL_WORKFILE, cli_env, mail, wfi
from tests.support.codec import CodecServer, assert_only_encrypted, load_module, write_team_codec
from tests.support.ingress import served
from tests.support.runs import describe_or_none
from tests.support.waits import assert_eventually
from tests.support.worker_proc import free_port
from wf_initiation.client import WfiClient, build_spec
from wf_initiation.core.deployment import load_deployment, parse_deployment
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import workflow_id_for

WFI = (sys.executable, "-m", "wf_initiation")
HOOK = """
name: {name}
on:
  http.request: {{}}
"""
URL = re.compile(r"webhook ingress on (http://\S+): POST")


class Team:
    """A team's project directory: its codec module, a Workfile and a deployment naming the codec."""

    def __init__(self, tmp_path: pathlib.Path, address: str, task_queue: str, *, workfile: str = MAIL_WORKFILE,
                 codec_key: bool = True, **temporal: str) -> None:
        self.dir = tmp_path
        self.key = AESGCM.generate_key(bit_length=256)
        self.module = load_module(write_team_codec(tmp_path, self.key))
        self.name = unique("sealed")
        self.queue = task_queue
        self.workfile = tmp_path / f"{self.name}.yaml"
        self.workfile.write_text(workfile.format(name=self.name))
        self.deployment = self.write_deployment("deployment.yaml", address,
                                                **({"data_converter": "team_codec:data_converter"} if codec_key else {}),
                                                **temporal)
        self.secret = f"SECRET-{uuid.uuid4().hex}"

    def write_deployment(self, file: str, address: str, **temporal: str) -> pathlib.Path:
        path = self.dir / file
        doc = {"temporal": {"address": address, "task_queue": self.queue, **temporal},
               "workflows": {self.name: {"workfile": self.workfile.name,
                                         "run": {"workflow_type": "wfi.EchoRun", "task_queue": self.queue}}}}
        with path.open("w") as fh:
            YAML(typ="safe", pure=True).dump(doc, fh)
        return path

    def client(self, dev_env) -> Client:  # noqa: ANN001 - the session fixture
        """A client of the dev server with the team's data converter (and the plugin's pydantic converter)."""
        return Client(dev_env.client.service_client, namespace=dev_env.client.namespace,
                      data_converter=self.module.data_converter, plugins=[WfiPlugin(sample_runs=True)])

    def mail(self, mid: str, **extra: object) -> str:
        return mail(mid, subject=self.secret, **extra)

    @property
    def workflow_id(self) -> str:
        return workflow_id_for(self.name)

    def args(self, *extra: str) -> tuple[str, ...]:
        return ("--deployment", str(self.deployment), "--workflow", self.name, *extra)


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


async def _stop(proc: asyncio.subprocess.Process, sig: int = signal.SIGTERM) -> int:
    if proc.returncode is None:
        proc.send_signal(sig)
        try:
            return await asyncio.wait_for(proc.wait(), 90)
        except TimeoutError:
            proc.kill()
            return await proc.wait()
    return proc.returncode


async def _history_length(client: Client, workflow_id: str) -> int:
    return (await client.get_workflow_handle(workflow_id).describe()).raw_description.workflow_execution_info.history_length


# ---------------------------------------------------------------------------- the commands and the worker
async def test_every_command_and_wfi_worker_use_the_deployment_s_data_converter_and_history_holds_only_ciphertext(
    dev_env, tmp_path: pathlib.Path,
) -> None:
    address = dev_env.client.service_client.config.target_host
    team = Team(tmp_path, address, unique("tq-codec"))
    proc = await asyncio.create_subprocess_exec(*WFI, "worker", "--deployment", str(team.deployment), cwd=str(tmp_path),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=cli_env())
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        await _lines_until(proc.stdout, "worker ready", seen)
        run = dict(cwd=str(pathlib.Path.home()))  # the module is found beside the deployment, from any directory
        activated = await wfi("activate", str(team.workfile), "--deployment", str(team.deployment), "--json", **run)
        assert activated.code == 0 and activated.json()["outcome"] == "activated", activated.stderr
        delivered = await wfi("deliver", *team.args("--payload", team.mail("m-1"), "--json"), **run)
        assert delivered.code == 0 and delivered.json()["disposition"] == "accepted", delivered.stderr
        signalled = await wfi("deliver", *team.args("--payload", team.mail("m-2", thread="t2"), "--signal"), **run)
        assert signalled.code == 0, signalled.stderr
        for flags in ((), ("--summary",), ("--events",)):
            state = await wfi("state", *team.args(*flags, "--json"), **run)
            assert state.code == 0, state.stderr
        assert "message\x1fm-2" in state.json()["events"], "the signalled delivery was read through the codec"
        for action in ("pause", "resume"):  # answered through the codec: a mail entry has nothing to pause
            operated = await wfi("operate", action, *team.args("--json"), **run)
            assert operated.json()["ok"] is False and "nothing to" in operated.json()["message"], operated.stdout + operated.stderr

        client = team.client(dev_env)
        run_key = delivered.json()["run_key"]
        await assert_eventually(lambda: _exists(client, run_key), timeout=60)
        result = await client.get_workflow_handle(run_key).result()
        assert result["input"]["bindings"]["message"]["subject"] == team.secret, "the worker decoded the payload"

        drained = await wfi("deactivate", *team.args("--drain", "--wait", "--json"), timeout=120, **run)
        assert drained.code == 0 and drained.json()["outcome"] == "deactivated", drained.stdout + drained.stderr
        again = await wfi("activate", str(team.workfile), "--deployment", str(team.deployment), "--json", **run)
        assert again.code == 0 and again.json()["outcome"] == "activated", again.stderr  # read the final state
        await assert_eventually(lambda: assert_only_encrypted(client, team.workflow_id, [team.secret.encode()], runs=2),
                                timeout=30)
        await assert_only_encrypted(client, run_key, [team.secret.encode()])
        assert await _stop(proc) == 0
    finally:
        await _stop(proc, signal.SIGKILL)


async def _exists(client: Client, workflow_id: str) -> None:
    assert await describe_or_none(client, workflow_id) is not None, f"{workflow_id} not started yet"


async def test_a_command_without_the_codec_or_with_another_key_refuses_before_writing_in_one_line(
    dev_env, tmp_path: pathlib.Path,
) -> None:
    address = dev_env.client.service_client.config.target_host
    team = Team(tmp_path, address, unique("tq-codec"), codec_key=False)  # the deployment names no codec
    (tmp_path / "other").mkdir()
    write_team_codec(tmp_path / "other", AESGCM.generate_key(bit_length=256), name="wrong_codec")
    client = team.client(dev_env)
    async with Worker(client, task_queue=team.queue):
        wfi_client = WfiClient(client, task_queue=team.queue)
        await wfi_client.activate(build_spec(team.workfile, load_deployment(team.deployment)))
        before = await _history_length(client, team.workflow_id)
        for command in (("deliver", *team.args("--payload", team.mail("m-1"))),
                        ("deliver", *team.args("--payload", team.mail("m-1"), "--signal")),
                        ("state", *team.args()),
                        ("operate", "pause", *team.args()),
                        ("deactivate", *team.args("--drain")),
                        ("activate", str(team.workfile), "--deployment", str(team.deployment))):
            refused = await wfi(*command)
            refused.assert_one_line_error(1, "binary/encrypted", "--data-converter", "--codec-endpoint")
        wrong = await wfi("deliver", *team.args("--payload", team.mail("m-1")),
                          "--data-converter", "wrong_codec:data_converter", cwd=str(tmp_path / "other"))
        wrong.assert_one_line_error(1, "cannot decode", "InvalidTag")
        assert await _history_length(client, team.workflow_id) == before, "nothing was written"
        # With the codec the same delivery goes through, and the activation starts its run.
        ok = await wfi("deliver", *team.args("--payload", team.mail("m-1"), "--json"),
                       "--data-converter", "team_codec:data_converter", cwd=str(tmp_path))
        assert ok.code == 0 and ok.json()["disposition"] == "accepted", ok.stderr
        await assert_eventually(lambda: _exists(client, ok.json()["run_key"]), timeout=60)
        await assert_only_encrypted(client, team.workflow_id, [team.secret.encode()])


async def test_bad_data_converter_references_are_one_line_naming_the_flag_or_key(dev_env, tmp_path: pathlib.Path) -> None:
    address = dev_env.client.service_client.config.target_host
    team = Team(tmp_path, address, unique("tq-codec"), codec_key=False)
    (tmp_path / "not_a_codec.py").write_text("value = 42\ndef boom():\n    raise RuntimeError('no key configured')\n")
    cases = {
        "nosuch_module:data_converter": ("--data-converter", "cannot import 'nosuch_module'"),
        "team_codec:missing": ("--data-converter", "has no attribute 'missing'"),
        "not_a_codec:value": ("--data-converter", "is a int, not a temporalio DataConverter or PayloadCodec"),
        "not_a_codec:boom": ("--data-converter", "no key configured"),
    }
    for reference, fragments in cases.items():
        result = await wfi("state", *team.args("--data-converter", reference), cwd=str(tmp_path))
        result.assert_one_line_error(1, *fragments)
    usage = await wfi("state", *team.args("--data-converter", "no-colon"))
    assert usage.code == 2 and "MODULE:ATTR" in usage.stderr
    both = await wfi("state", *team.args("--data-converter", "a:b", "--codec-endpoint", "http://127.0.0.1:1"))
    both.assert_one_line_error(1, "not both")
    bad = team.write_deployment("bad.yaml", address, data_converter="team_codec")
    result = await wfi("state", "--deployment", str(bad), "--workflow", team.name)
    assert result.code == 1 and "temporal.data_converter" in result.stderr and "MODULE:ATTR" in result.stderr


# ---------------------------------------------------------------------------- a codec server
async def test_a_codec_server_serves_every_command_from_the_flag_the_environment_and_the_profile(
    dev_env, tmp_path: pathlib.Path,
) -> None:
    address = dev_env.client.service_client.config.target_host
    team = Team(tmp_path, address, unique("tq-codec"), codec_key=False)
    client = team.client(dev_env)
    with CodecServer(team.module.codec, auth="Bearer t0k") as server:
        async with Worker(client, task_queue=team.queue):
            flags = ("--codec-endpoint", server.url, "--codec-auth", "Bearer t0k")
            activated = await wfi("activate", str(team.workfile), "--deployment", str(team.deployment), *flags, "--json")
            assert activated.code == 0 and activated.json()["outcome"] == "activated", activated.stderr
            delivered = await wfi("deliver", *team.args("--payload", team.mail("m-1"), "--json"), *flags)
            assert delivered.code == 0 and delivered.json()["disposition"] == "accepted", delivered.stderr
            env = cli_env(TEMPORAL_CODEC_ENDPOINT=server.url, TEMPORAL_CODEC_AUTH="Bearer t0k")
            state = await wfi("state", *team.args("--events", "--json"), env=env)
            assert state.code == 0 and "message\x1fm-1" in state.json()["events"], state.stderr
            profile = tmp_path / "temporal.toml"
            profile.write_text(f'[profile.team]\n[profile.team.codec]\nendpoint = "{server.url}"\nauth = "Bearer t0k"\n')
            operated = await wfi("operate", "pause", *team.args("--profile", "team", "--config-file", str(profile)))
            assert "nothing to pause" in operated.stdout, operated.stdout + operated.stderr  # the answer, decoded
            refused = await wfi("state", *team.args("--codec-endpoint", server.url))
            refused.assert_one_line_error(1, "HTTP 401", "--codec-auth")
            await assert_eventually(lambda: _exists(client, delivered.json()["run_key"]), timeout=60)
        await assert_only_encrypted(client, team.workflow_id, [team.secret.encode()])
        assert server.calls.get("encode") and server.calls.get("decode") and server.namespaces == {"default"}
    gone = await wfi("state", *team.args("--codec-endpoint", server.url, "--codec-auth", "Bearer t0k"))
    gone.assert_one_line_error(1, "could not be reached", "--codec-endpoint")


# ---------------------------------------------------------------------------- the ingress and wfi up
async def test_wfi_serve_with_the_deployment_s_codec_answers_with_the_disposition_and_writes_ciphertext(
    dev_env, tmp_path: pathlib.Path,
) -> None:
    from wf_initiation.ingress import build

    address = dev_env.client.service_client.config.target_host
    team = Team(tmp_path, address, unique("tq-codec"), workfile=HOOK)
    doc = YAML(typ="safe").load(team.deployment.read_text())
    doc["ingress"] = {"default_auth": {"scheme": "none"}}
    team.deployment.write_text(json.dumps(doc))
    client = team.client(dev_env)
    library = build(team.deployment)  # the ASGI app of `wf_initiation.ingress.app(...)` connects the same way
    assert type((await library.client()).data_converter.payload_codec).__name__ == "AesGcmCodec"
    async with Worker(client, task_queue=team.queue):
        await WfiClient(client, task_queue=team.queue).activate(build_spec(team.workfile, load_deployment(team.deployment)))
        proc = await asyncio.create_subprocess_exec(*WFI, "serve", "--deployment", str(team.deployment), "--port", "0",
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                    env=cli_env())
        seen: list[str] = []
        try:
            assert proc.stdout is not None
            url = (await _lines_until(proc.stdout, URL.pattern, seen)).group(1)
            await _lines_until(proc.stdout, "connected", seen)
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                body = {"secret": team.secret}
                first = await http.post(f"/hooks/{team.name}", json=body, headers={"Idempotency-Key": "k-1"})
                assert first.status_code == 202 and first.json()["disposition"] == "accepted", first.text
                again = await http.post(f"/hooks/{team.name}", json=body, headers={"Idempotency-Key": "k-1"})
                assert again.status_code == 200 and again.json()["disposition"] == "duplicate", again.text
            run_key = first.json()["run_key"]
            await assert_eventually(lambda: _exists(client, run_key), timeout=60)
            assert (await client.get_workflow_handle(run_key).result())["input"]["bindings"]["request"]["body"] == body
        finally:
            assert await _stop(proc) == 0
    await assert_only_encrypted(client, team.workflow_id, [team.secret.encode()])
    await assert_only_encrypted(client, run_key, [team.secret.encode()])
    # An ingress without the codec writes nothing into that history: 503 (retry later), one log line.
    keyless = parse_deployment({**doc, "temporal": {"task_queue": team.queue}}, base_dir=str(tmp_path))
    before = await _history_length(client, team.workflow_id)
    async with served(keyless, dev_env.client) as ingress:
        refused = await ingress.http.post(f"/hooks/{team.name}", json={"secret": "again"}, headers={"Idempotency-Key": "k-2"})
    assert refused.status_code == 503 and refused.json()["error"] == "codec_unavailable", refused.text
    assert "payload codec" in refused.json()["message"], "the codec is named (issue 31, item 6)"
    assert await _history_length(client, team.workflow_id) == before


async def test_wfi_up_with_its_own_server_takes_the_data_converter_flag_for_worker_activation_and_ingress(
    tmp_path: pathlib.Path,
) -> None:
    port, ui_port, ingress_port = free_port(), free_port(), free_port()
    team = Team(tmp_path, "ignored-by-up:1", unique("tq-up-codec"), workfile=HOOK, codec_key=False)
    doc = YAML(typ="safe").load(team.deployment.read_text())
    doc["ingress"] = {"default_auth": {"scheme": "none"}}
    team.deployment.write_text(json.dumps(doc))
    proc = await asyncio.create_subprocess_exec(
        *WFI, "up", "--deployment", str(team.deployment), "--port", str(port), "--ui-port", str(ui_port),
        "--db-file", str(tmp_path / "up.db"), "--activate", "--ingress-port", str(ingress_port),
        "--data-converter", "team_codec:data_converter", cwd=str(tmp_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=cli_env())
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        await _lines_until(proc.stdout, f"activated {team.name}", seen)
        if not any(line.startswith("webhook ingress on") for line in seen):  # its own process: may come later
            await _lines_until(proc.stdout, "^webhook ingress on", seen)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ingress_port}", timeout=60) as http:
            async def listening() -> None:  # the ingress is a process of its own under wfi up
                try:
                    assert (await http.get("/healthz")).status_code == 200
                except httpx.TransportError as exc:
                    raise AssertionError(f"the ingress does not answer yet: {exc}") from None

            await assert_eventually(listening, timeout=60)
            answer = await http.post(f"/hooks/{team.name}", json={"secret": team.secret}, headers={"Idempotency-Key": "u-1"})
            assert answer.status_code == 202 and answer.json()["disposition"] == "accepted", answer.text
        client = await Client.connect(f"127.0.0.1:{port}", data_converter=team.module.data_converter,
                                      plugins=[WfiPlugin()])
        await assert_eventually(lambda: _exists(client, answer.json()["run_key"]), timeout=60)
        await assert_only_encrypted(client, team.workflow_id, [team.secret.encode()])
        await assert_only_encrypted(client, answer.json()["run_key"], [team.secret.encode()])
        assert await _stop(proc, signal.SIGINT) == 0
    finally:
        await _stop(proc, signal.SIGKILL)


# ---------------------------------------------------------------------------- the conformance kit
async def test_the_conformance_kit_runs_its_cases_through_the_team_s_codec(dev_env, tmp_path: pathlib.Path) -> None:
    address = dev_env.client.service_client.config.target_host
    team = Team(tmp_path, address, unique("tq-kit-codec"), codec_key=False)
    deployment = tmp_path / "kit.yaml"
    deployment.write_text(f"temporal: {{address: '{address}', task_queue: {team.queue}}}\n")
    client = team.client(dev_env)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    cases = ["external.every_disposition_of_a_delivery_is_returned_and_recorded",
             "external.equal_keys_run_one_at_a_time_in_acceptance_order_and_a_suspended_run_holds_its_key"]
    async with Worker(client, task_queue=team.queue):
        proc = await asyncio.to_thread(subprocess.run, [
            *WFI, "conformance", "run", "--deployment", str(deployment), "--out", str(tmp_path / "report"), "--json",
            "--data-converter", "team_codec:data_converter", *[arg for case in cases for arg in ("--case", case)],
        ], capture_output=True, text=True, timeout=900, env=env, cwd=str(tmp_path))
    report = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else None
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert report is not None and sum(c["outcome"] == "passed" for cap in report["capabilities"] for c in cap["cases"]) == 2

    async def both_listed() -> list[str]:
        query = f"TaskQueue = '{team.queue}' AND WorkflowType = 'wfi.Activation'"
        found = [wf.id async for wf in client.list_workflows(query)]
        assert len(found) == 2, found
        return found

    for workflow_id in await assert_eventually(both_listed, timeout=30):
        await assert_only_encrypted(client, workflow_id, [b"hold"])


async def test_an_answer_written_through_a_codec_the_command_lacks_is_one_line_naming_the_fix(
    dev_env, tmp_path: pathlib.Path,
) -> None:
    # A first activation has no history to compare with: the encrypting worker's answer is what shows
    # that the command lacks the team's codec.
    address = dev_env.client.service_client.config.target_host
    team = Team(tmp_path, address, unique("tq-codec"), codec_key=False)
    async with Worker(team.client(dev_env), task_queue=team.queue):
        result = await wfi("activate", str(team.workfile), "--deployment", str(team.deployment))
    result.assert_one_line_error(1, "encoded as binary/encrypted", "--data-converter", "--codec-endpoint")
