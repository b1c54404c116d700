"""The team's data converter for every client wf-initiation builds: a ``module:attr`` reference to a
``DataConverter`` or ``PayloadCodec`` (``--data-converter``, the deployment's
``temporal.data_converter``), or a remote codec server (``--codec-endpoint``, as the ``temporal`` CLI
and the Web UI use one); and the check that a client can read an activation's history before it
writes to it.

Which codec a command uses, first found wins (the connection's order, docs/cli.md):
``--data-converter`` or ``--codec-endpoint``; ``TEMPORAL_CODEC_ENDPOINT``; the config file profile's
``codec.endpoint``; the deployment's ``temporal.data_converter`` or ``temporal.codec_endpoint``.
The codec server's ``Authorization`` header: ``--codec-auth``, ``TEMPORAL_CODEC_AUTH``, the
profile's ``codec.auth``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.converter import DataConverter, PayloadCodec

from wf_initiation._sdk import unknown_encoding
from wf_initiation.core.connections import describe_url, redact
from wf_initiation.core.deployment import DATA_CONVERTER_REFERENCE, codec_endpoint_problem
from wf_initiation.errors import CodecError

CODEC_FIX = ("give every command the team's codec: --data-converter MODULE:ATTR or --codec-endpoint URL, "
             "or temporal.data_converter / temporal.codec_endpoint in the deployment (wfi help deployment)")
CODEC_TIMEOUT = 10.0
"""Seconds one call of a codec server may take: well within a delivery's 30 s and a command's 60 s,
so a hanging codec server is reported as a codec failure, not as a worker that does not answer."""
HISTORY_PAGE = 64  # events read to find out how the activation's payloads are encoded
SAMPLE = 8  # encoded payloads decoded as a probe


@dataclass(frozen=True)
class CodecSetting:
    """Where a client's payload codec comes from: a reference, or a codec server."""

    source: str
    reference: str | None = None
    endpoint: str | None = None
    auth: str | None = None
    base_dir: str | None = None


def reference_problem(value: str) -> str | None:
    """Why ``value`` is not a ``module:attr`` reference, or None."""
    if DATA_CONVERTER_REFERENCE.match(value):
        return None
    return f"{value!r} is not MODULE:ATTR, e.g. myteam.codec:data_converter"


def endpoint_problem(value: str) -> str | None:
    """Why ``value`` is not a codec server URL (or one with credentials in it), or None."""
    return codec_endpoint_problem(value)


# ---------------------------------------------------------------------------- the converter
def data_converter(setting: CodecSetting | None, namespace: str) -> DataConverter:
    """The pydantic data converter with the setting's codec (none: the plain pydantic converter).

    Raises:
        CodecError: the reference cannot be imported or is not a converter or codec, or its payload
            converter cannot carry pydantic models.
    """
    from temporalio.contrib.pydantic import pydantic_data_converter

    if setting is None:
        return pydantic_data_converter
    if setting.endpoint:
        return dataclasses.replace(pydantic_data_converter,
                                   payload_codec=RemoteCodec(setting.endpoint, namespace=namespace, auth=setting.auth))
    assert setting.reference is not None
    return _composed(load_reference(setting.reference, setting.source, setting.base_dir), setting)


def _composed(found: DataConverter | PayloadCodec, setting: CodecSetting) -> DataConverter:
    from temporalio.contrib.pydantic import pydantic_data_converter

    from wf_initiation.plugin import WfiSetupError, check_payload_converter, compose_data_converter

    if isinstance(found, PayloadCodec):
        return dataclasses.replace(pydantic_data_converter, payload_codec=found)
    converter = compose_data_converter(found)
    try:
        check_payload_converter(converter)
    except WfiSetupError as exc:
        raise CodecError(f"{setting.source} {setting.reference}: {exc}") from None
    return converter


def load_reference(reference: str, source: str, base_dir: str | None = None) -> DataConverter | PayloadCodec:
    """Import ``module:attr``: a ``DataConverter`` or ``PayloadCodec``, or a class or function that
    makes one when called without arguments.

    The module is imported as installed; if it is not found, again with ``base_dir`` (the
    deployment file's directory) and the working directory on ``sys.path``.

    Raises:
        CodecError: naming ``source`` (the flag or key that gave the reference) and the fix.
    """
    problem = reference_problem(reference)
    if problem:
        raise CodecError(f"{source}: {problem}")
    module_name, _, attr = reference.partition(":")
    found: Any = _import(module_name, reference, source, base_dir)
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise CodecError(f"{source} {reference}: module {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(found, DataConverter | PayloadCodec) and callable(found):
        try:
            found = found()
        except Exception as exc:  # the team's factory failed: its own message says why
            raise CodecError(f"{source} {reference}: calling it failed: {type(exc).__name__}: {_line(exc)}") from None
    if not isinstance(found, DataConverter | PayloadCodec):
        raise CodecError(f"{source} {reference} is a {type(found).__name__}, not a temporalio DataConverter or "
                         "PayloadCodec (nor a class or function returning one)")
    return found


def _import(module_name: str, reference: str, source: str, base_dir: str | None) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if not exc.name or not module_name.startswith(exc.name):
            raise CodecError(f"{source} {reference}: importing it failed: {_line(exc)}") from None
    except Exception as exc:  # the team's module failed at import: its own message says why
        raise CodecError(f"{source} {reference}: importing it failed: {type(exc).__name__}: {_line(exc)}") from None
    for directory in (base_dir, os.getcwd()):
        if directory and directory not in sys.path:
            sys.path.insert(0, directory)
    try:
        return importlib.import_module(module_name)
    except Exception as exc:
        raise CodecError(f"{source} {reference}: cannot import {module_name!r} ({type(exc).__name__}: {_line(exc)}); "
                         "install it in this Python environment, or run from the directory that holds it") from None


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text[:200] + " ...") if len(text) > 200 else text or type(exc).__name__


# ---------------------------------------------------------------------------- remote codec
class RemoteCodec(PayloadCodec):
    """A codec server (the Temporal Codec Server protocol, as the ``temporal`` CLI's
    ``--codec-endpoint`` and the Web UI call it): ``POST {endpoint}/encode`` and ``/decode`` with
    ``{"payloads": [...]}`` in the protobuf JSON form, the namespace in ``X-Namespace`` (and in place
    of ``{namespace}`` in the endpoint), ``auth`` as the ``Authorization`` header.

    Args:
        endpoint: The server's base URL, e.g. ``https://codec.example.com`` or ``.../{namespace}``.
        namespace: The Temporal namespace the payloads belong to.
        auth: The ``Authorization`` header value, e.g. ``Bearer ...``.
        timeout: Seconds one call may take.
    """

    def __init__(self, endpoint: str, *, namespace: str, auth: str | None = None, timeout: float = CODEC_TIMEOUT) -> None:
        self.endpoint = endpoint.replace("{namespace}", namespace).rstrip("/")
        self._headers = {"Content-Type": "application/json", "X-Namespace": namespace}
        if auth:
            self._headers["Authorization"] = auth
        self._timeout = timeout
        self._clients: dict[int, Any] = {}  # one httpx client per event loop (a client is bound to its loop)

    @property
    def shown(self) -> str:
        """The endpoint fit for a message: never credentials (a URL with them is refused, this is the
        second line of defence)."""
        return redact(describe_url(self.endpoint))

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self._call("encode", payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self._call("decode", payloads)

    async def _call(self, operation: str, payloads: Sequence[Payload]) -> list[Payload]:
        """One call. Its errors name the server and what went wrong, and never quote what the server
        answered (a body or header may echo the Authorization header back)."""
        import httpx

        if not payloads:
            return []
        url = f"{self.endpoint}/{operation}"
        where = f"the codec server at {self.shown}/{operation}"
        body = json_format.MessageToJson(Payloads(payloads=payloads))
        try:
            response = await self._client().post(url, content=body, headers=self._headers)
        except httpx.TimeoutException:
            raise CodecError(f"{where} did not answer within {self._timeout:g}s (a payload codec failure, nothing was "
                             "sent to Temporal); check that the codec server is up, or --codec-endpoint / "
                             "TEMPORAL_CODEC_ENDPOINT / temporal.codec_endpoint") from None
        except httpx.HTTPError as exc:
            raise CodecError(f"{where} could not be reached ({type(exc).__name__}; a payload codec failure, nothing was "
                             "sent to Temporal); check --codec-endpoint / TEMPORAL_CODEC_ENDPOINT / "
                             "temporal.codec_endpoint") from None
        if response.status_code in (401, 403):
            raise CodecError(f"{where} refused the credentials (HTTP {response.status_code}); "
                             "check --codec-auth / TEMPORAL_CODEC_AUTH / the profile's codec.auth")
        if response.status_code != 200:
            raise CodecError(f"{where} answered HTTP {response.status_code} (a payload codec failure; its answer is "
                             "not shown, it may hold credentials): see the codec server's own log")
        try:
            out = json_format.Parse(response.text, Payloads(), ignore_unknown_fields=True)
        except json_format.ParseError:
            raise CodecError(f"{where} answered something other than payloads (not shown); is it a Temporal codec "
                             "server?") from None
        if len(out.payloads) != len(payloads):
            raise CodecError(f"{where} answered {len(out.payloads)} payloads for {len(payloads)}")
        return list(out.payloads)

    def _client(self) -> Any:
        import httpx

        loop = id(asyncio.get_running_loop())
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = httpx.AsyncClient(timeout=self._timeout)
        return client


PROBE_TIMEOUT = 5.0


async def codec_problem(converter: DataConverter) -> str | None:
    """Why the converter's codec server cannot be used now (one encode of an empty payload, at most
    ``PROBE_TIMEOUT`` seconds), or None; None too for an in-process codec (nothing to reach)."""
    codec = converter.payload_codec
    if not isinstance(codec, RemoteCodec):
        return None
    try:
        await asyncio.wait_for(codec.encode([Payload(metadata={"encoding": b"binary/null"})]), PROBE_TIMEOUT)
    except CodecError as exc:
        return str(exc)
    except TimeoutError:
        return f"the codec server at {codec.shown}/encode did not answer within {PROBE_TIMEOUT:g}s"
    return None


# ---------------------------------------------------------------------------- the history check
async def history_problem(client: Any, workflow_id: str) -> str | None:
    """Why ``client`` must not write to (or read) the workflow ``workflow_id``, or None.

    Reads the first events of its latest run (any status): payloads in an encoding the client's
    payload converter does not know were written through a codec. A client without a codec must
    not add plaintext to such a history; a client with one must be able to decode them (a probe of
    a few of them). A workflow that does not exist has nothing to compare with: None.
    """
    encoded = await _foreign_payloads(client, workflow_id)
    if not encoded:
        return None
    converter: DataConverter = client.data_converter
    encodings = sorted({_encoding(p) for p in encoded})
    what = f"the history of {workflow_id} holds payloads encoded as {', '.join(encodings)} (a payload codec)"
    if converter.payload_codec is None:
        return f"{what} and this client has no codec, so it would write in plaintext; {CODEC_FIX}"
    try:
        decoded = await converter.payload_codec.decode(encoded[:SAMPLE])
    except Exception as exc:  # a wrong key, a codec server refusing: the team's codec says why
        reason = str(exc) if isinstance(exc, CodecError) else f"{type(exc).__name__}: {_line(exc)}"
        return f"{what} that this client's codec cannot decode ({reason}): is it the team's codec and key? {CODEC_FIX}"
    still = sorted({_encoding(p) for p in decoded} - _known(converter))
    if still:
        return f"{what}; this client's codec leaves them encoded as {', '.join(still)}: is it the team's codec? {CODEC_FIX}"
    return None


SIBLINGS = 3  # other activations of the task queue looked at before a first activation


async def first_activation_problem(client: Any, task_queue: str) -> str | None:
    """Why ``client`` must not start a new activation on ``task_queue``, or None: its codec server
    cannot be reached (the start would fail half-way), or it has no codec while the other activations
    of the task queue were written through one (the new one's start event would hold its spec in
    plaintext: a new activation has no history of its own to check)."""
    problem = await codec_problem(client.data_converter)
    if problem is not None:
        return f"{problem}; nothing was started"
    if client.data_converter.payload_codec is not None:
        return None
    from temporalio.service import RPCError, RPCStatusCode

    from wf_initiation.wire import ACTIVATION_WORKFLOW

    query = f"WorkflowType = '{ACTIVATION_WORKFLOW}' AND TaskQueue = '{task_queue}'"
    try:
        siblings = [w.id async for w in client.list_workflows(query, limit=SIBLINGS, page_size=SIBLINGS)]
    except RPCError as exc:  # a server without visibility (the time-skipping one), a credential without it
        if exc.status in (RPCStatusCode.UNIMPLEMENTED, RPCStatusCode.PERMISSION_DENIED):
            return None
        raise
    for sibling in siblings:
        problem = await history_problem(client, sibling)
        if problem is not None:
            return f"another activation of task queue {task_queue!r}: {problem}; nothing was started"
    return None


async def discard_started(client: Any, workflow_ids: list[str]) -> str:
    """A first activation failed on its codec after it started: end what it started. Without a codec
    its history holds the spec in plaintext, so it is deleted; with one it is terminated (its history
    is encrypted). Returns what was done, for the error's message."""
    from temporalio.api.common.v1 import WorkflowExecution
    from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
    from temporalio.service import RPCError, RPCStatusCode

    plaintext = client.data_converter.payload_codec is None
    for wid in workflow_ids:
        try:
            if plaintext:
                await client.workflow_service.delete_workflow_execution(DeleteWorkflowExecutionRequest(
                    namespace=client.namespace, workflow_execution=WorkflowExecution(workflow_id=wid)), retry=True)
            else:
                await client.get_workflow_handle(wid).terminate(reason="wfi activate failed on the payload codec")
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
    return ("the activation it started was deleted (its start event held the spec in plaintext)" if plaintext
            else "the activation it started was terminated")


async def _foreign_payloads(client: Any, workflow_id: str) -> list[Payload]:
    from temporalio.api.common.v1 import WorkflowExecution
    from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
    from temporalio.service import RPCError, RPCStatusCode

    request = GetWorkflowExecutionHistoryRequest(namespace=client.namespace, execution=WorkflowExecution(workflow_id=workflow_id),
                                                 maximum_page_size=HISTORY_PAGE)
    try:
        page = await client.workflow_service.get_workflow_execution_history(request, retry=True)
    except RPCError as exc:
        # No history yet, or a credential that may not read histories: nothing to compare with
        # (the first real call then says what is wrong, if anything is).
        if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.PERMISSION_DENIED):
            return []
        raise
    known = _known(client.data_converter)
    return [p for event in page.history.events for p in payloads_in(event) if _encoding(p) not in known]


def payloads_in(message: Message) -> Iterator[Payload]:
    """Every ``Payload`` a protobuf message holds, at any depth (history events, their headers and memos)."""
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            items = list(value.values())
        elif field.is_repeated:
            items = list(value)
        else:
            items = [value]
        for item in items:
            if isinstance(item, Payload):
                yield item
            elif isinstance(item, Message):
                yield from payloads_in(item)


STANDARD_ENCODINGS = frozenset({"binary/null", "binary/plain", "json/protobuf", "binary/protobuf", "json/plain"})


def _known(converter: DataConverter) -> set[str]:
    """The encodings the payload converter reads (``json/plain``, ``binary/null``, ...): a composite
    converter's own list, else the SDK's default ones."""
    outer = converter.payload_converter
    inner = getattr(outer, "_inner_payload_converter", outer)  # the SDK wraps it for its transfer types
    converters = getattr(inner, "converters", None)
    if not converters:
        return set(STANDARD_ENCODINGS)
    return {key.decode() if isinstance(key, bytes) else str(key) for key in converters}


def _encoding(payload: Payload) -> str:
    return payload.metadata.get("encoding", b"").decode(errors="replace") or "(no encoding)"


def unknown_encoding_message(exc: BaseException, what: str) -> str:
    """One line for an answer in an encoding this client cannot read (``_sdk.is_unknown_encoding``)."""
    encoding = unknown_encoding(exc)
    return f"{what} is encoded as {encoding} (a payload codec) and this client has no codec to read it; {CODEC_FIX}"
