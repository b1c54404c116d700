"""wf_initiation.testing takes the deployment's codec (issue 31, item 6; STYLE 19: the helper never
ignores the user's data converter): an environment started with ``deployment=`` encodes every
payload of the activation and its runs with the team's codec, one started without it refuses an
activation of that deployment, and ``from_client`` keeps the client's own converter."""

from __future__ import annotations

import pathlib
import uuid
from datetime import timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.client import Client

from tests.support.activation import unique
from tests.support.codec import ENCRYPTED, history_encodings, load_module, plaintext_in, write_team_codec
from wf_initiation import Disposition
from wf_initiation.errors import WfiSetupError
from wf_initiation.plugin import WfiPlugin
from wf_initiation.testing import WfiTestEnvironment
from wf_initiation.wire import workflow_id_for

WORKFILE = """
name: {name}
on:
  mail.received: {{inbox: support@acme.com}}
  as: message
"""
SECRET_SUBJECT = "the quarterly numbers, before they are public"


class Project:
    """A team's project: its codec module, a Workfile, and a deployment naming the codec."""

    def __init__(self, tmp_path: pathlib.Path) -> None:
        self.key = AESGCM.generate_key(bit_length=256)
        self.module_name = f"team_codec_{uuid.uuid4().hex[:8]}"  # imported by name: one per test
        self.module = load_module(write_team_codec(tmp_path, self.key, name=self.module_name))
        self.name = unique("sealed")
        self.workfile = tmp_path / f"{self.name}.yaml"
        self.workfile.write_text(WORKFILE.format(name=self.name))
        self.deployment = tmp_path / "deployment.yaml"
        self.deployment.write_text(
            f"temporal: {{task_queue: {unique('q')}, data_converter: '{self.module_name}:data_converter'}}\n"
            f"workflows:\n  {self.name}: {{run: {{workflow_type: wfi.EchoRun, task_queue: {unique('runs')}}}}}\n")


def mail(message_id: str) -> dict[str, Any]:
    return {"message_id": message_id, "from": "ann@example.com", "recipient": "help@acme.com", "subject": SECRET_SUBJECT}


async def test_an_environment_started_with_the_deployment_encodes_everything_with_its_codec(tmp_path: pathlib.Path) -> None:
    project = Project(tmp_path)
    async with await WfiTestEnvironment.start(plugin=WfiPlugin(sample_runs=True), deployment=project.deployment) as env:
        assert env.client.data_converter.payload_codec is not None
        async with env.activation(project.workfile, deployment=project.deployment) as sealed:
            first = await sealed.deliver(mail("m-1"))
            assert first.disposition is Disposition.ACCEPTED
            [run] = await sealed.wait_for_runs(1)
            assert run.input.bindings["message"]["subject"] == SECRET_SUBJECT  # decoded with the team's codec
            assert (await sealed.deliver(mail("m-1"))).disposition is Disposition.DUPLICATE
            second = await sealed.deliver(mail("m-2"))
            assert second.disposition is Disposition.ACCEPTED
            await sealed.wait_for_runs(2)
            for workflow_id in (workflow_id_for(project.name), run.run_key):
                events = (await env.client.get_workflow_handle(workflow_id).fetch_history()).events
                assert history_encodings(events) == {ENCRYPTED}, workflow_id
                assert not plaintext_in(events, [SECRET_SUBJECT.encode(), b"ann@example.com"]), workflow_id


async def test_an_environment_without_the_codec_refuses_an_activation_of_that_deployment(tmp_path: pathlib.Path) -> None:
    project = Project(tmp_path)
    async with await WfiTestEnvironment.start(plugin=WfiPlugin(sample_runs=True)) as env:
        with pytest.raises(WfiSetupError, match=rf"names the team's codec \(the deployment's temporal.data_converter "
                                                rf"{project.module_name}:data_converter\) and this test environment's "
                                                r"client has none.*WfiTestEnvironment.start\(deployment=\.\.\.\)"):
            env.activation(project.workfile, deployment=project.deployment)
        plain = tmp_path / "plain.yaml"  # the same Workfile under a deployment without a codec still runs
        plain.write_text(f"temporal: {{task_queue: {unique('q')}}}\nworkflows:\n  {project.name}: "
                         f"{{run: {{workflow_type: wfi.EchoRun, task_queue: {unique('runs')}}}}}\n")
        async with env.activation(project.workfile, deployment=plain) as activation:
            assert (await activation.deliver(mail("m-1"))).disposition is Disposition.ACCEPTED
            await activation.wait_for_runs(1)


async def test_the_user_s_data_converter_wins_and_from_client_keeps_the_client_s(dev_env, tmp_path: pathlib.Path) -> None:
    project = Project(tmp_path)
    given = project.module.data_converter
    async with await WfiTestEnvironment.start(plugin=WfiPlugin(sample_runs=True), data_converter=given) as env:
        assert env.client.data_converter.payload_codec is given.payload_codec
        env.activation(project.workfile, deployment=project.deployment)  # the user's converter: taken as theirs
    client = await Client.connect(dev_env.client.service_client.config.target_host, namespace=dev_env.client.namespace,
                                  data_converter=given, plugins=[WfiPlugin()])
    mine = WfiTestEnvironment.from_client(client)
    assert mine.client.data_converter.payload_codec is given.payload_codec
    async with mine.activation(project.workfile, deployment=project.deployment) as activation:
        with pytest.raises(WfiSetupError, match="keeps real time"):
            await activation.advance(timedelta(seconds=1))
        assert (await activation.deliver(mail("m-1"))).disposition is Disposition.ACCEPTED
        events = (await client.get_workflow_handle(workflow_id_for(project.name)).fetch_history()).events
        assert history_encodings(events) == {ENCRYPTED}
