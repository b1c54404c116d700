"""WfiPlugin composes with what the user configured: an encrypting codec, a failure converter that
encodes attributes, their own payload converter; sample runs are off by default."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import uuid
from collections.abc import Iterable, Sequence

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowFailureError
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import (
    BinaryNullPayloadConverter,
    BinaryPlainPayloadConverter,
    CompositePayloadConverter,
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
)
from temporalio.service import RPCError
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import Disposition
from wf_initiation.plugin import FlaggingCodec, WfiPlugin, WfiSetupError, compose_data_converter
from wf_initiation.wire import workflow_id_for
from wf_initiation.workflows.activation import ActivationWorkflow
from wf_initiation.workflows.runapi import WaitForExample
from wf_initiation.workflows.sample_runs import EchoRun

ENCRYPTED = b"binary/encrypted"

MAIL = """
name: {name}
on:
  mail.received:
    inbox: support@acme.com
  as: message
"""


class AesGcmCodec(PayloadCodec):
    """The encryption codec of Temporal's samples: AES-256-GCM over each serialized payload."""

    def __init__(self, key: bytes | None = None) -> None:
        self._aes = AESGCM(key or AESGCM.generate_key(bit_length=256))

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for p in payloads:
            nonce = os.urandom(12)
            out.append(Payload(metadata={"encoding": ENCRYPTED}, data=nonce + self._aes.encrypt(nonce, p.SerializeToString(), None)))
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for p in payloads:
            if p.metadata.get("encoding") != ENCRYPTED:
                out.append(p)
                continue
            decoded = Payload()
            decoded.ParseFromString(self._aes.decrypt(p.data[:12], p.data[12:], None))
            out.append(decoded)
        return out


class BytesOnly(CompositePayloadConverter):
    """A user's payload converter that carries only bytes and None."""

    def __init__(self) -> None:
        super().__init__(BinaryNullPayloadConverter(), BinaryPlainPayloadConverter())


class MyPydantic(PydanticPayloadConverter):
    pass


def _user_converter() -> DataConverter:
    # The user's choices: the SDK's default payload converter, an encrypting codec, and a failure
    # converter that moves failure messages and stack traces into the (encrypted) payloads.
    return DataConverter(payload_codec=AesGcmCodec(), failure_converter_class=DefaultFailureConverterWithEncodedAttributes)


def _plaintext_in(events: Iterable[object], needles: Sequence[bytes]) -> list[str]:
    found = []
    for event in events:
        raw = event.SerializeToString()  # type: ignore[attr-defined]
        found += [f"{event.event_type}: {n!r}" for n in needles if n in raw]  # type: ignore[attr-defined]
    return found


@pytest.mark.parametrize("plugin_on", ["client", "worker"])
async def test_an_encrypting_codec_keeps_activation_and_run_histories_free_of_plaintext(
    dev_env, task_queue: str, tmp_path: pathlib.Path, plugin_on: str,
) -> None:
    service, namespace = dev_env.client.service_client, dev_env.client.namespace
    plugin = WfiPlugin(sample_runs=True)
    if plugin_on == "client":  # Client.connect(..., plugins=[WfiPlugin()]): the worker takes the plugin from the client
        client = Client(service, namespace=namespace, data_converter=_user_converter(), plugins=[plugin])
        worker_plugins, caller = [], client
    else:  # Worker(client, plugins=[WfiPlugin()]) on the user's own client
        client = Client(service, namespace=namespace, data_converter=_user_converter())
        worker_plugins = [plugin]
        caller = Client(service, namespace=namespace, data_converter=compose_data_converter(client.data_converter))
    converter = caller.data_converter
    assert isinstance(converter.payload_codec, AesGcmCodec)
    assert converter.failure_converter_class is DefaultFailureConverterWithEncodedAttributes
    assert converter.payload_converter_class is PydanticPayloadConverter

    secret = f"PLAINTEXT-{uuid.uuid4().hex}"
    name = unique("sealed")
    spec = make_spec(tmp_path, MAIL.format(name=name), task_queue=task_queue)
    async with Worker(client, task_queue=task_queue, plugins=worker_plugins):
        wfi = WfiClient(caller, task_queue=task_queue)
        await wfi.activate(spec)
        ok = await wfi.deliver(name, {"message_id": "m-1", "from": "a@b.c", "recipient": "help@acme.com",
                                      "subject": secret, "thread_id": "t1"})
        failing = await wfi.deliver(name, {"message_id": "m-2", "from": "a@b.c", "recipient": "help@acme.com",
                                           "subject": secret, "thread_id": "t2", "fail": True})
        assert ok.disposition == failing.disposition == Disposition.ACCEPTED

        async def started(run_key: str) -> None:
            try:
                await caller.get_workflow_handle(run_key).describe()
            except RPCError as exc:  # the run is started by an activity just after the disposition
                raise AssertionError(f"run {run_key} not started yet") from exc
        for run_key in (ok.run_key, failing.run_key):
            await assert_eventually(lambda run_key=run_key: started(run_key), timeout=60)
        result = await caller.get_workflow_handle(ok.run_key).result()
        assert result["input"]["bindings"]["message"]["subject"] == secret  # the run read it through the codec
        with pytest.raises(WorkflowFailureError) as failed:
            await caller.get_workflow_handle(failing.run_key).result()
        assert "asked to fail" in str(failed.value.cause)  # decoded for the caller with the key

        # The payload, a failure message, and the UI summaries of activities, timers and runs (user metadata).
        needles = [secret.encode(), b"asked to fail", b"run(s)", b"next deadline", b"run from trigger"]
        for workflow_id in (workflow_id_for(name), ok.run_key, failing.run_key):
            history = await caller.get_workflow_handle(workflow_id).fetch_history()
            assert not _plaintext_in(history.events, needles), workflow_id
            first = history.events[0].workflow_execution_started_event_attributes
            assert [p.metadata["encoding"] for p in first.input.payloads] and all(
                p.metadata["encoding"] == ENCRYPTED for p in first.input.payloads)
        # A plain client without the key sees only ciphertext.
        keyless = Client(service, namespace=namespace)
        raw = await keyless.get_workflow_handle(workflow_id_for(name)).fetch_history()
        assert not _plaintext_in(raw.events, needles)


async def test_a_payload_converter_that_cannot_carry_pydantic_models_is_refused_in_one_line(dev_env, task_queue: str) -> None:
    mine = dataclasses.replace(DataConverter.default, payload_converter_class=BytesOnly, payload_codec=AesGcmCodec())
    with pytest.raises(WfiSetupError) as on_client:
        Client(dev_env.client.service_client, namespace=dev_env.client.namespace, data_converter=mine, plugins=[WfiPlugin()])
    plain = Client(dev_env.client.service_client, namespace=dev_env.client.namespace, data_converter=mine)
    with pytest.raises(WfiSetupError) as on_worker:
        Worker(plain, task_queue=task_queue, plugins=[WfiPlugin()])
    for message in (str(on_client.value), str(on_worker.value)):
        assert "\n" not in message and "BytesOnly" in message and "PydanticPayloadConverter" in message


async def test_a_pydantic_based_payload_converter_and_the_codec_are_kept_as_they_are(dev_env, task_queue: str) -> None:
    codec = AesGcmCodec()
    mine = DataConverter(payload_converter_class=MyPydantic, payload_codec=codec,
                         failure_converter_class=DefaultFailureConverterWithEncodedAttributes)
    client = Client(dev_env.client.service_client, namespace=dev_env.client.namespace, data_converter=mine, plugins=[WfiPlugin()])
    assert client.data_converter is mine
    worker = Worker(client, task_queue=task_queue)
    on_worker = worker.client.data_converter  # nothing composed: only the codec is wrapped, to flag plaintext deliveries
    assert on_worker.payload_converter_class is MyPydantic and on_worker.failure_converter_class is mine.failure_converter_class
    assert isinstance(on_worker.payload_codec, FlaggingCodec) and on_worker.payload_codec.codec is codec
    assert client.data_converter is mine  # the user's client is left as it is


async def test_sample_run_workflows_are_registered_only_when_asked_for(dev_env, task_queue: str) -> None:
    default = Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin()])
    asked = Worker(dev_env.client, task_queue=f"{task_queue}-samples", plugins=[WfiPlugin(sample_runs=True)])
    assert not {EchoRun, WaitForExample} & set(default.config(active_config=True)["workflows"])
    assert {EchoRun, WaitForExample} <= set(asked.config(active_config=True)["workflows"])
    assert ActivationWorkflow in default.config(active_config=True)["workflows"]
