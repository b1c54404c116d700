"""A codec endpoint is a secret's neighbour (issue 32, item 5; issue 31, item 6): credentials in a
codec server's URL are refused as a connection's inline secret is; a codec server that fails, hangs
or echoes the ``Authorization`` header back is reported as a payload codec failure, never quoting its
answer, by the commands and by the ingress (503 ``codec_unavailable``, ``/readyz`` not ready); a
first ``wfi activate`` without the team's codec leaves nothing running and no plaintext history.

The codec server is tests/support/codec.py's, over real HTTP on 127.0.0.1; the team's codec is the
AES-GCM module of that file, as in test_codec.py."""

from __future__ import annotations

import json
import logging
import pathlib
import uuid

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from tests.support.activation import unique
from tests.support.cli import cli_env, wfi
from tests.support.codec import CodecServer, assert_only_encrypted, load_module, write_team_codec
from tests.support.ingress import served
from tests.support.runs import describe_or_none
from tests.support.waits import assert_eventually
from wf_initiation.core.deployment import load_deployment
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import workflow_id_for

HOOK = "name: {name}\non:\n  http.request: {{}}\n"
PASSWORD = f"hunter2-{uuid.uuid4().hex[:8]}"


class Team:
    """A team's directory: its codec module and Workfiles, and a deployment that may name a codec."""

    def __init__(self, tmp_path: pathlib.Path, address: str, *, names: int = 1) -> None:
        self.dir, self.address, self.queue = tmp_path, address, unique("tq-codec-secret")
        self.module = load_module(write_team_codec(tmp_path, AESGCM.generate_key(bit_length=256)))
        self.names = [unique("sealed") for _ in range(names)]
        for name in self.names:
            (tmp_path / f"{name}.yaml").write_text(HOOK.format(name=name))
        self.auth = f"Bearer S3CRET-{uuid.uuid4().hex}"

    def deployment(self, file: str = "deployment.yaml", **temporal: str) -> pathlib.Path:
        path = self.dir / file
        path.write_text(json.dumps({
            "temporal": {"address": self.address, "task_queue": self.queue, **temporal},
            "ingress": {"default_auth": {"scheme": "none"}},
            "workflows": {n: {"workfile": f"{n}.yaml", "run": {"workflow_type": "wfi.EchoRun", "task_queue": self.queue}}
                          for n in self.names}}))
        return path

    def client(self, dev_env) -> Client:  # noqa: ANN001 - the session fixture
        return Client(dev_env.client.service_client, namespace=dev_env.client.namespace,
                      data_converter=self.module.data_converter, plugins=[WfiPlugin(sample_runs=True)])


def no_secret(*texts: str, secrets: tuple[str, ...]) -> None:
    for text in texts:
        for secret in secrets:
            assert secret not in text, f"{secret!r} printed: {text!r}"


async def test_credentials_in_a_codec_endpoint_are_refused_without_printing_them(dev_env, tmp_path: pathlib.Path) -> None:
    team = Team(tmp_path, dev_env.client.service_client.config.target_host)
    with_userinfo = f"http://codec:{PASSWORD}@127.0.0.1:9"
    in_query = f"http://127.0.0.1:9/?token={PASSWORD}"
    for endpoint in (with_userinfo, in_query):
        refused = await wfi("state", "--deployment", str(team.deployment(codec_endpoint=endpoint)), "--workflow", team.names[0])
        assert refused.code == 1 and "Traceback" not in refused.stderr, refused.stderr
        assert "temporal.codec_endpoint" in refused.stderr and "--codec-auth" in refused.stderr, refused.stderr
        no_secret(refused.stdout, refused.stderr, secrets=(PASSWORD,))
    plain = str(team.deployment("plain.yaml"))
    refused = await wfi("state", "--deployment", plain, "--workflow", team.names[0], "--codec-endpoint", with_userinfo)
    assert refused.code == 2 and "argument --codec-endpoint" in refused.stderr and "--codec-auth" in refused.stderr
    no_secret(refused.stdout, refused.stderr, secrets=(PASSWORD,))
    refused = await wfi("state", "--deployment", plain, "--workflow", team.names[0],
                        env=cli_env(TEMPORAL_CODEC_ENDPOINT=with_userinfo))
    refused.assert_one_line_error(1, "TEMPORAL_CODEC_ENDPOINT", "holds credentials")
    no_secret(refused.stdout, refused.stderr, secrets=(PASSWORD,))


async def test_a_failing_hanging_or_echoing_codec_server_is_a_codec_failure_that_quotes_nothing(
    dev_env, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    team = Team(tmp_path, dev_env.client.service_client.config.target_host)
    name, client = team.names[0], team.client(dev_env)
    with CodecServer(team.module.codec, auth=team.auth) as server:
        deployment = team.deployment(codec_endpoint=server.url)
        args = ("--deployment", str(deployment), "--workflow", name)
        env = cli_env(TEMPORAL_CODEC_AUTH=team.auth)
        secrets = (team.auth, team.auth.split()[1])
        async with Worker(client, task_queue=team.queue):
            activated = await wfi("activate", str(tmp_path / f"{name}.yaml"), "--deployment", str(deployment), env=env)
            assert activated.code == 0, activated.stderr
            payload = json.dumps({"delivery_id": "d-1", "method": "POST", "body": {}})

            server.mode = "fail"
            failed = await wfi("deliver", *args, "--payload", payload, env=env)
            failed.assert_one_line_error(1, "codec server", "HTTP 500", "not shown")
            no_secret(failed.stdout, failed.stderr, secrets=secrets)
            server.mode = "hang"
            hung = await wfi("deliver", *args, "--payload", payload, env=env)
            hung.assert_one_line_error(1, "codec server", "did not answer within 10s", "payload codec failure")
            assert "worker" not in hung.stderr

            # The ingress builds its own client with the codec server, as `wfi serve` does.
            monkeypatch.setenv("TEMPORAL_CODEC_AUTH", team.auth)
            # INFO, the ingress's level: httpcore's own DEBUG trace prints every response header of
            # every HTTP call (docs/deployment.md says so), which no library of ours can turn off per call.
            caplog.set_level(logging.INFO)
            async with served(load_deployment(deployment), None) as ingress:
                for mode in ("fail", "hang"):
                    server.mode = mode
                    answer = await ingress.http.post(f"/hooks/{name}", json={"n": 1}, headers={"Idempotency-Key": "k-1"})
                    assert answer.status_code == 503 and answer.json()["error"] == "codec_unavailable", answer.text
                    assert "codec" in answer.json()["message"] and "Temporal cannot be reached" not in answer.text
                    ingress.ingress._ready = None  # readiness is cached for 2 s
                    ready = await ingress.http.get("/readyz")
                    assert ready.status_code == 503 and "codec server" in ready.json()["codec"], ready.text
                    no_secret(answer.text, ready.text, secrets=secrets)
                server.mode = "ok"
                ingress.ingress._ready = None
                ready = await ingress.http.get("/readyz")
                assert ready.status_code == 200, ready.text
                accepted = await ingress.http.post(f"/hooks/{name}", json={"n": 1}, headers={"Idempotency-Key": "k-1"})
                assert accepted.status_code == 202 and accepted.json()["disposition"] == "accepted", accepted.text
            no_secret(caplog.text, secrets=secrets)
            assert "payload codec" in caplog.text, "the ingress logs the codec failure"

            async def its_run_started() -> None:
                assert await describe_or_none(client, accepted.json()["run_key"]) is not None

            await assert_eventually(its_run_started, timeout=60)
        await assert_only_encrypted(client, workflow_id_for(name), [])


_GONE_WITHIN = 180  # seconds; the server's own delays, in _gone's docstring


async def _gone(client: Client, workflow_id: str) -> None:
    """Deleted, and no longer listed: the server deletes a workflow's visibility record after its
    history, so a list read in between names a run whose history is gone (CI on a loaded machine).
    The record's delete waits until the run's close is acknowledged in the visibility queue's state,
    which the server persists every ~30 s, and retries 3 s x 1.5^n apart (temporal's
    visibility_queue_task_executor.go, ``ensureCloseBeforeDelete``): up to ~100 s, hence _GONE_WITHIN."""
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        assert exc.status == RPCStatusCode.NOT_FOUND
    else:
        raise AssertionError(f"{workflow_id} still exists")
    listed = [wf.run_id async for wf in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    assert not listed, f"{workflow_id} deleted, still listed: {listed}"


async def test_a_first_wfi_activate_without_the_team_s_codec_leaves_nothing_running_and_nothing_in_plaintext(
    dev_env, tmp_path: pathlib.Path,
) -> None:
    team = Team(tmp_path, dev_env.client.service_client.config.target_host, names=3)
    first, second, third = team.names
    client = team.client(dev_env)  # the worker has the team's codec; the deployment names none
    keyless = str(team.deployment())
    async with Worker(client, task_queue=team.queue):
        # The first activation of the task queue: nothing to compare with before the start, so its
        # start is undone once the activation's encrypted answer shows the team encrypts.
        refused = await wfi("activate", str(tmp_path / f"{first}.yaml"), "--deployment", keyless)
        assert refused.code == 1 and "binary/encrypted" in refused.stderr and "deleted" in refused.stderr, refused.stderr
        await assert_eventually(lambda: _gone(client, workflow_id_for(first)), timeout=_GONE_WITHIN)

        with_codec = ("--data-converter", "team_codec:data_converter")
        for name in (first, second):
            ok = await wfi("activate", str(tmp_path / f"{name}.yaml"), "--deployment", keyless, *with_codec, cwd=str(tmp_path))
            assert ok.code == 0, ok.stderr
        # A new activation beside encrypted ones is refused before anything is started.
        refused = await wfi("activate", str(tmp_path / f"{third}.yaml"), "--deployment", keyless)
        assert refused.code == 1 and "nothing was started" in refused.stderr, refused.stderr
        assert await describe_or_none(client, workflow_id_for(third)) is None

        delivered = await wfi("deliver", "--deployment", keyless, "--workflow", first, *with_codec, "--json",
                              "--payload", json.dumps({"delivery_id": "d-1", "method": "POST", "body": {}}), cwd=str(tmp_path))
        assert delivered.code == 0 and delivered.json()["disposition"] == "accepted", delivered.stderr

        async def its_run_started() -> None:
            assert await describe_or_none(client, delivered.json()["run_key"]) is not None

        await assert_eventually(its_run_started, timeout=60)
    await assert_only_encrypted(client, workflow_id_for(first), [])
