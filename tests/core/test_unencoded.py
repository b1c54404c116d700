"""No plaintext by accident (issue 34, item 3), without a server: the deployment's ``temporal.unencoded``
and its default, carried in the spec; what the engine records for a delivery that arrived without
the team's codec; and the worker's codec wrapper that tells such a delivery apart
(wf_initiation/core/unencoded.py, wf_initiation/plugin.py ``FlaggingCodec``). The same on a real
server: tests/integration/test_unencoded.py."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import zlib
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import PayloadCodec, SerializationContext, WithSerializationContext, WorkflowSerializationContext

from tests.support.codec import load_module, write_team_codec
from wf_initiation.client import build_spec
from wf_initiation.core._diagnostics import DiagnosticError
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.deployment import parse_deployment
from wf_initiation.core.engine import Engine, initial_state
from wf_initiation.core.unencoded import FLAG
from wf_initiation.plugin import FlaggingCodec, worker_data_converter

T0 = datetime(2026, 12, 6, tzinfo=UTC)
HOOK = "name: {name}\non:\n  http.request: {{}}\n  as: hook\n"


def _spec(tmp_path: pathlib.Path, **temporal: Any) -> ActivationSpec:
    workfile = tmp_path / "hooks.yaml"
    workfile.write_text(HOOK.format(name="hooks"))
    deployment = parse_deployment({"temporal": {"task_queue": "tq", **temporal},
                                   "workflows": {"hooks": {"run": {"workflow_type": "wfi.EchoRun", "task_queue": "tq"}}}},
                                  base_dir=str(tmp_path))
    return build_spec(workfile, deployment)


# ---------------------------------------------------------------------------- the setting
@pytest.mark.parametrize(("temporal", "expected"), [
    ({}, "accept"),
    ({"data_converter": "team_codec:data_converter"}, "refuse"),
    ({"codec_endpoint": "https://codec.example.com"}, "refuse"),
    ({"data_converter": "team_codec:data_converter", "unencoded": "record"}, "record"),
    ({"data_converter": "team_codec:data_converter", "unencoded": "accept"}, "accept"),
    ({"unencoded": "refuse"}, "refuse"),
])
def test_a_deployment_that_names_a_codec_refuses_unencoded_deliveries_unless_it_says_otherwise(
    tmp_path: pathlib.Path, temporal: dict[str, str], expected: str,
) -> None:
    assert _spec(tmp_path, **temporal).unencoded == expected


def test_an_unknown_unencoded_setting_is_refused_naming_the_three_choices(tmp_path: pathlib.Path) -> None:
    with pytest.raises(DiagnosticError) as refused:
        _spec(tmp_path, unencoded="warn")
    [diagnostic] = refused.value.diagnostics
    assert diagnostic.path == "temporal.unencoded"
    assert all(f"'{choice}'" in diagnostic.message for choice in ("refuse", "record", "accept")), diagnostic.message


def test_accept_leaves_the_activation_id_as_it_was_and_another_choice_is_a_new_binding(tmp_path: pathlib.Path) -> None:
    plain = _spec(tmp_path)
    assert _spec(tmp_path, unencoded="accept").activation_id == plain.activation_id
    assert _spec(tmp_path, data_converter="team_codec:data_converter", unencoded="accept").activation_id == plain.activation_id
    refusing = _spec(tmp_path, data_converter="team_codec:data_converter")
    recording = _spec(tmp_path, unencoded="record")
    assert len({plain.activation_id, refusing.activation_id, recording.activation_id}) == 3


def test_a_spec_recorded_before_the_setting_reads_as_accept(tmp_path: pathlib.Path) -> None:
    recorded = _spec(tmp_path, data_converter="team_codec:data_converter").model_dump(mode="json")
    del recorded["unencoded"]
    assert ActivationSpec.model_validate(recorded).unencoded == "accept"


# ---------------------------------------------------------------------------- the engine's decision
def test_a_refused_delivery_is_recorded_without_its_entry_id_or_payload(tmp_path: pathlib.Path) -> None:
    spec = _spec(tmp_path, data_converter="team_codec:data_converter")
    engine = Engine(spec, initial_state(spec, T0))
    refusal = engine.unencoded_refusal("a deliver update")
    assert refusal is not None and "team's payload codec" in refusal and "docs/wire.md" in refusal
    assert "nothing was recorded" in refusal
    assert not engine.error_counts(), "the validator's question records nothing"

    decision = engine.unencoded("a deliver_signal signal", T0, entry="hook", delivery_id="SECRET-id")
    assert decision.value is not None and "not taken" in decision.value and not decision.commands
    [error] = engine.state.errors
    assert (error.kind, error.entry, error.delivery_id) == ("unencoded_refused", None, None)
    assert "SECRET" not in json.dumps(engine.full_state(), default=str)
    page = engine.markdown()
    assert "unencoded_refused" in page and "give it the codec" in page, page


def test_under_record_a_delivery_is_taken_and_recorded_with_its_entry_and_id(tmp_path: pathlib.Path) -> None:
    spec = _spec(tmp_path, data_converter="team_codec:data_converter", unencoded="record")
    engine = Engine(spec, initial_state(spec, T0))
    assert engine.unencoded_refusal("a deliver update") is None
    assert engine.unencoded("a deliver update", T0, entry="hook", delivery_id="u-1").value is None
    [error] = engine.state.errors
    assert (error.kind, error.entry, error.delivery_id) == ("unencoded", "hook", "u-1")
    assert "plaintext" in error.message and "docs/wire.md" in error.message
    assert "unencoded" in engine.markdown()


def test_under_accept_nothing_is_refused_or_recorded(tmp_path: pathlib.Path) -> None:
    spec = _spec(tmp_path)
    engine = Engine(spec, initial_state(spec, T0))
    assert engine.unencoded_refusal("a deliver update") is None
    assert engine.unencoded("a deliver_signal signal", T0, entry="hook", delivery_id="s-1").value is None
    assert not engine.state.errors


# ---------------------------------------------------------------------------- the worker's codec
def _json(value: Any) -> Payload:
    return pydantic_data_converter.payload_converter.to_payloads([value])[0]


@pytest.fixture
def aes(tmp_path: pathlib.Path) -> PayloadCodec:
    return load_module(write_team_codec(tmp_path, bytes(range(32)))).codec


async def test_the_worker_s_codec_flags_what_came_in_plaintext_and_nothing_it_decoded(aes: PayloadCodec) -> None:
    flagging = FlaggingCodec(aes)
    sent = _json({"entry": "hook", "payload": {"delivery_id": "u-1"}})
    [encrypted] = await aes.encode([sent])
    forged = Payload()
    forged.CopyFrom(sent)
    forged.metadata[FLAG] = b"1"
    [forged_encrypted] = await aes.encode([forged])  # a flag inside an encrypted payload: the sender's, removed
    decoded = await flagging.decode([encrypted, sent, forged_encrypted, forged])
    assert [FLAG in p.metadata for p in decoded] == [False, True, False, True]
    assert decoded[0] == sent and decoded[2] == sent
    value = pydantic_data_converter.payload_converter.from_payloads([decoded[1]])[0]
    assert value == {"entry": "hook", "payload": {"delivery_id": "u-1"}}, "the flag changes nothing a handler decodes"
    assert FLAG not in sent.metadata, "what it was given is not changed"
    assert await flagging.encode([sent]) != [sent]


class SmallAsIs(PayloadCodec):
    """A codec that compresses only payloads of 100 bytes or more, and leaves smaller ones as they are."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [Payload(metadata={"encoding": b"binary/zlib"}, data=zlib.compress(p.SerializeToString()))
                if p.ByteSize() >= 100 else p for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for p in payloads:
            if p.metadata.get("encoding") == b"binary/zlib":
                inner = Payload()
                inner.ParseFromString(zlib.decompress(p.data))
                p = inner
            out.append(p)
        return out


async def test_a_payload_the_codec_itself_would_leave_as_it_is_is_in_the_team_s_encoding() -> None:
    small, large = _json({"id": "s"}), _json({"id": "l", "text": "x" * 200})
    decoded = await FlaggingCodec(SmallAsIs()).decode([small, large])
    assert [FLAG in p.metadata for p in decoded] == [False, True]


class Contextual(PayloadCodec, WithSerializationContext):
    def __init__(self, context: SerializationContext | None = None) -> None:
        self.context = context

    def with_context(self, context: SerializationContext) -> Contextual:
        return Contextual(context)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


def test_a_worker_wraps_the_codec_once_keeps_its_serialization_context_and_leaves_a_converter_without_one(
    aes: PayloadCodec,
) -> None:
    assert worker_data_converter(pydantic_data_converter) is pydantic_data_converter, "no codec: nothing to tell apart"
    team = dataclasses.replace(pydantic_data_converter, payload_codec=aes)
    wrapped = worker_data_converter(team)
    assert isinstance(wrapped.payload_codec, FlaggingCodec) and wrapped.payload_codec.codec is aes
    assert worker_data_converter(wrapped) is wrapped
    assert wrapped.payload_converter_class is team.payload_converter_class
    context = WorkflowSerializationContext(namespace="default", workflow_id="wfi-activation:hooks")
    with_context = worker_data_converter(dataclasses.replace(team, payload_codec=Contextual())).with_context(context)
    assert isinstance(with_context.payload_codec, FlaggingCodec)
    assert isinstance(with_context.payload_codec.codec, Contextual) and with_context.payload_codec.codec.context is context
    assert wrapped.with_context(context).payload_codec is wrapped.payload_codec  # a codec without context: kept
