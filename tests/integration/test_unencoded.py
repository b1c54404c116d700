"""No plaintext by accident (issue 34, item 3), on a real dev server: a deployment whose payloads go
through the team's AES-GCM codec, and a plain temporalio ``Client`` without it (a bridge that forgot
the codec) sending the ``deliver`` and ``deliver_many`` updates and a ``deliver_signal``. With
``temporal.unencoded: refuse`` (the default of a deployment that names a codec) the updates are
refused before anything enters history and the signal is recorded as refused, visible in
``wfi state`` and the operator page, with nothing of its payload kept; with ``record`` they are taken
and recorded; a deployment without a codec takes them as ever. Each ends with deliveries through the
team's codec (``WfiClient``, the ingress) taken and their runs started. The decision and the codec
wrapper without a server: tests/core/test_unencoded.py."""

from __future__ import annotations

import json
import pathlib
import uuid
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from ruamel.yaml import YAML
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer, Worker

from tests.support.activation import unique
from tests.support.cli import wfi as wfi_cli
from tests.support.codec import load_module, plaintext_in, write_team_codec
from tests.support.hostile import hook, plain_signal, plain_update, run_started
from tests.support.ingress import served
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient, build_spec
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.deployment import Deployment, load_deployment
from wf_initiation.core.engine import Disposition
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import DELIVER_MANY_UPDATE, UNENCODED, shard_workflow_id, workflow_id_for

HOOK = """
name: {name}
on:
  http.request: {{}}
  as: hook
"""
UNENCODED_KINDS = ("unencoded_refused", "unencoded")


class Team:
    """A team's project: its AES-GCM codec module beside a Workfile and a deployment naming it (or not)."""

    def __init__(self, tmp_path: pathlib.Path, dev_env: Any, task_queue: str, *, codec: bool = True,
                 workflow: dict[str, Any] | None = None, **temporal: str) -> None:
        self.name, self.queue, self.codec = unique("plain"), task_queue, codec
        self.module = load_module(write_team_codec(tmp_path, AESGCM.generate_key(bit_length=256)))
        (tmp_path / f"{self.name}.yaml").write_text(HOOK.format(name=self.name))
        self.deployment_file = tmp_path / "deployment.yaml"
        doc = {"temporal": {"address": dev_env.client.service_client.config.target_host, "task_queue": task_queue,
                            **({"data_converter": "team_codec:data_converter"} if codec else {}), **temporal},
               "workflows": {self.name: {"workfile": f"{self.name}.yaml", **(workflow or {}),
                                         "run": {"workflow_type": "wfi.EchoRun", "task_queue": task_queue}}},
               "ingress": {"default_auth": {"scheme": "none"}}}
        with self.deployment_file.open("w") as fh:
            YAML(typ="safe", pure=True).dump(doc, fh)
        self.deployment: Deployment = load_deployment(self.deployment_file)
        service, namespace = dev_env.client.service_client, dev_env.client.namespace
        converter = self.module.data_converter if codec else None
        self.client = Client(service, namespace=namespace, plugins=[WfiPlugin(sample_runs=True)],
                             **({"data_converter": converter} if converter else {}))
        self.plain = Client(service, namespace=namespace)  # the forgetful bridge: the SDK's default converter
        self.wfi = WfiClient(self.client, task_queue=task_queue)

    async def plain_update(self, ident: str) -> dict[str, Any]:
        """The ``deliver`` update from the plain client, and its answer: written by the worker through the
        team's codec (the forgetful bridge cannot read it), so read here with the team's key."""
        raw = await self.plain.get_workflow_handle(workflow_id_for(self.name)).execute_update(
            "deliver", {"entry": None, "payload": hook(ident, note="plain")}, id=f"plain-{uuid.uuid4().hex}",
            result_type=RawValue)
        [answer] = await (self.module.data_converter if self.codec else self.client.data_converter).decode(
            [raw.payload], [dict])
        return answer

    def spec(self) -> ActivationSpec:
        return build_spec(self.deployment.resolve_path(f"{self.name}.yaml"), self.deployment)

    async def unencoded_errors(self) -> list[dict[str, Any]]:
        return [e for e in (await self.wfi.state(self.name))["errors"] if e["kind"] in UNENCODED_KINDS]

    async def page(self) -> str:
        handle = self.client.get_workflow_handle(workflow_id_for(self.name))
        return (await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)).current_details

    async def history(self) -> Any:
        return await self.client.get_workflow_handle(workflow_id_for(self.name)).fetch_history()

    async def taken_through_the_codec(self, ident: str) -> None:
        """The ending of every test: deliveries through the team's codec are taken and start their runs."""
        result = await self.wfi.deliver(self.name, hook(f"{ident}-codec", note="through the codec"))
        assert result.disposition == Disposition.ACCEPTED, result
        await self.wfi.signal_delivery(self.name, hook(f"{ident}-codec-signal", note="through the codec"))
        [many] = await self.wfi.deliver_many(self.name, [(None, hook(f"{ident}-codec-many"))])
        assert many.disposition == Disposition.ACCEPTED, many
        signalled = await _recorded(self, f"{ident}-codec-signal")
        for run_key in (result.run_key, many.run_key, signalled["run_key"]):
            assert run_key is not None
            await run_started(self.client, run_key)


async def _recorded(team: Team, ident: str) -> dict[str, Any]:
    async def held() -> dict[str, Any]:
        record = await team.wfi.delivery(team.name, "hook", ident)
        assert record is not None and record["disposition"] == "accepted", record
        return record
    return await assert_eventually(held, timeout=60)


async def _refused(team: Team, call: Any) -> ApplicationError:
    """The failure a plain client's update met; its message read with the team's key (the team's failure
    converter encrypts messages; the type is plain for anyone)."""
    with pytest.raises(WorkflowUpdateFailedError) as failed:
        await call
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == UNENCODED, repr(cause)
    assert cause.failure is not None
    decoded = await team.module.data_converter.decode_failure(cause.failure)
    assert isinstance(decoded, ApplicationError)
    return decoded


# ---------------------------------------------------------------------------- refuse
async def test_a_plain_client_s_updates_are_refused_out_of_history_and_its_signal_recorded_as_refused_then_the_codec_delivers(
    dev_env, tmp_path: pathlib.Path, task_queue: str,
) -> None:
    team = Team(tmp_path, dev_env, task_queue)
    update_secret, signal_secret = f"UPDATE-{uuid.uuid4().hex}", f"SIGNAL-{uuid.uuid4().hex}"
    async with Worker(team.client, task_queue=task_queue):
        spec = team.spec()
        assert spec.unencoded == "refuse", "a deployment that names a codec refuses unencoded deliveries by default"
        await team.wfi.activate(spec)

        refused = await _refused(team, plain_update(team.plain, team.name, hook("u-1", note=update_secret)))
        assert "without the team's payload codec" in refused.message and "docs/wire.md" in refused.message, refused.message
        handle = team.plain.get_workflow_handle(workflow_id_for(team.name))
        await _refused(team, handle.execute_update(DELIVER_MANY_UPDATE, [{"entry": None, "payload": hook("m-1", note=update_secret)}],
                                                   id=f"plain-{uuid.uuid4().hex}", result_type=list))
        await plain_signal(team.plain, team.name, hook("s-1", note=signal_secret))

        async def refused_signal_recorded() -> list[dict[str, Any]]:
            errors = await team.unencoded_errors()
            assert [e["kind"] for e in errors] == ["unencoded_refused"], errors
            return errors
        [error] = await assert_eventually(refused_signal_recorded, timeout=60)
        assert error["entry"] is None and error["delivery_id"] is None and "send it again" in error["message"], error
        for ident in ("u-1", "m-1", "s-1"):
            assert await team.wfi.delivery(team.name, "hook", ident) is None, f"{ident} was taken"
        state = await team.wfi.state(team.name, include_events=True)
        assert state["summary"]["error_counts"] == {"unencoded_refused": 1}, state["summary"]["error_counts"]
        assert signal_secret not in json.dumps(state) and update_secret not in json.dumps(state), "no plaintext kept"
        assert "unencoded_refused" in await team.page()
        shown = await wfi_cli("state", "--deployment", str(team.deployment_file), "--workflow", team.name,
                              cwd=str(pathlib.Path.home()))
        assert shown.code == 0 and "unencoded_refused" in shown.stdout, shown.stderr

        history = await team.history()
        assert not plaintext_in(history.events, [update_secret.encode()]), "a refused update never entered history"
        assert plaintext_in(history.events, [signal_secret.encode()]), "a signal is in history once sent (as the docs say)"

        await team.taken_through_the_codec("after-refusal")
        assert [e["kind"] for e in await team.unencoded_errors()] == ["unencoded_refused"], "nothing through the codec flagged"
    history = await team.history()
    replayed = await Replayer(workflows=[], plugins=[WfiPlugin()], data_converter=team.module.data_converter
                              ).replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None, replayed.replay_failure


async def test_every_shard_of_a_sharded_activation_refuses_a_plain_client_s_delivery_before_routing_it(
    dev_env, tmp_path: pathlib.Path, task_queue: str,
) -> None:
    team = Team(tmp_path, dev_env, task_queue, workflow={"scale": {"shards": 2}})
    async with Worker(team.client, task_queue=task_queue):
        await team.wfi.activate(team.spec())
        for shard in (0, 1):  # each shard is refused the same, whichever shard takes the id
            handle = team.plain.get_workflow_handle(shard_workflow_id(team.name, shard))
            for ident in ("a", "b", "c"):
                await _refused(team, handle.execute_update(
                    "deliver", {"entry": "hook", "payload": hook(f"u-{shard}-{ident}")}, id=f"plain-{uuid.uuid4().hex}"))
            await handle.signal("deliver_signal", {"entry": "hook", "payload": hook(f"s-{shard}")})

        async def both_recorded() -> None:
            kinds = [e["kind"] for e in await team.unencoded_errors()]
            assert kinds == ["unencoded_refused", "unencoded_refused"], kinds
        await assert_eventually(both_recorded, timeout=60)
        for ident in ("s-0", "s-1"):
            assert await team.wfi.delivery(team.name, "hook", ident) is None
        await team.taken_through_the_codec("after-shards")


# ---------------------------------------------------------------------------- record
async def test_with_record_a_plain_client_s_deliveries_are_taken_and_recorded_with_their_ids(
    dev_env, tmp_path: pathlib.Path, task_queue: str,
) -> None:
    team = Team(tmp_path, dev_env, task_queue, unencoded="record")
    async with Worker(team.client, task_queue=task_queue):
        await team.wfi.activate(team.spec())
        answer = await team.plain_update("u-1")
        assert answer["disposition"] == "accepted", answer
        await plain_signal(team.plain, team.name, hook("s-1", note="plain"))
        signalled = await _recorded(team, "s-1")
        for run_key in (answer["run_key"], signalled["run_key"]):
            await run_started(team.client, run_key)
        errors = await team.unencoded_errors()
        assert sorted((e["kind"], e["entry"], e["delivery_id"]) for e in errors) == [
            ("unencoded", "hook", "s-1"), ("unencoded", "hook", "u-1")], errors
        assert all("plaintext" in e["message"] for e in errors), errors
        assert "**unencoded**" in await team.page()

        await team.taken_through_the_codec("after-record")
        assert len(await team.unencoded_errors()) == 2, "nothing through the codec recorded"


# ---------------------------------------------------------------------------- accept
@pytest.mark.parametrize("setup", ["no codec", "a codec, unencoded: accept"])
async def test_an_activation_that_accepts_takes_a_plain_client_s_deliveries_as_before(
    dev_env, tmp_path: pathlib.Path, task_queue: str, setup: str,
) -> None:
    team = Team(tmp_path, dev_env, task_queue, codec=setup != "no codec",
                **({"unencoded": "accept"} if setup != "no codec" else {}))
    async with Worker(team.client, task_queue=task_queue):
        spec = team.spec()
        assert spec.unencoded == "accept"
        await team.wfi.activate(spec)
        answer = await team.plain_update("u-1")
        assert answer["disposition"] == "accepted", answer
        await plain_signal(team.plain, team.name, hook("s-1", note="plain"))
        signalled = await _recorded(team, "s-1")
        for run_key in (answer["run_key"], signalled["run_key"]):
            await run_started(team.client, run_key)
        assert not await team.unencoded_errors()
        await team.taken_through_the_codec("after-accept")


# ---------------------------------------------------------------------------- the ingress
async def test_the_ingress_with_the_team_s_codec_delivers_to_a_refusing_activation(
    dev_env, tmp_path: pathlib.Path, task_queue: str,
) -> None:
    team = Team(tmp_path, dev_env, task_queue)
    async with Worker(team.client, task_queue=task_queue):
        await team.wfi.activate(team.spec())
        async with served(team.deployment, team.client) as ingress:
            first = await ingress.http.post(f"/hooks/{team.name}", json={"note": "through the ingress"},
                                            headers={"Idempotency-Key": "k-1"})
            assert first.status_code == 202 and first.json()["disposition"] == "accepted", first.text
        await run_started(team.client, first.json()["run_key"])
        assert not await team.unencoded_errors()
        await team.taken_through_the_codec("after-ingress")
