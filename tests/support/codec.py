"""A team's encrypting codec for the tests of issue 22: an AES-256-GCM payload codec written as the
team's own module (imported by `wfi` processes through `--data-converter` or the deployment's
`temporal.data_converter`), a codec server speaking the Temporal codec server protocol over HTTP,
and the check that a history holds nothing but encrypted payloads."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import pathlib
import threading
import uuid
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType
from typing import Any

from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

ENCRYPTED = "binary/encrypted"

TEAM_CODEC = '''
"""The team's codec: AES-256-GCM over each serialized payload (Temporal's encryption sample)."""
import os

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes, PayloadCodec

KEY = bytes.fromhex("{key}")


class AesGcmCodec(PayloadCodec):
    def __init__(self, key: bytes = KEY) -> None:
        self._aes = AESGCM(key)

    async def encode(self, payloads):
        out = []
        for p in payloads:
            nonce = os.urandom(12)
            out.append(Payload(metadata={{"encoding": b"binary/encrypted"}},
                               data=nonce + self._aes.encrypt(nonce, p.SerializeToString(), None)))
        return out

    async def decode(self, payloads):
        out = []
        for p in payloads:
            if p.metadata.get("encoding") != b"binary/encrypted":
                out.append(p)
                continue
            decoded = Payload()
            decoded.ParseFromString(self._aes.decrypt(p.data[:12], p.data[12:], None))
            out.append(decoded)
        return out


data_converter = DataConverter(payload_codec=AesGcmCodec(),
                               failure_converter_class=DefaultFailureConverterWithEncodedAttributes)
codec = AesGcmCodec()
'''


def write_team_codec(directory: pathlib.Path, key: bytes, name: str = "team_codec") -> pathlib.Path:
    """Write the team's codec module ``name`` with ``key`` into ``directory``; return its path."""
    path = directory / f"{name}.py"
    path.write_text(TEAM_CODEC.format(key=key.hex()))
    return path


def load_module(path: pathlib.Path) -> ModuleType:
    """Import a module from its file under a name of its own (the test's in-process client uses it)."""
    spec = importlib.util.spec_from_file_location(f"team_codec_{uuid.uuid4().hex}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------- codec server
class CodecServer:
    """A codec server on 127.0.0.1 (a free port), in a thread: ``POST /encode`` and ``/decode`` with
    ``{"payloads": [...]}``, as the temporal CLI and the Web UI call one. With ``auth`` it answers
    401 to a request without that ``Authorization`` header. ``calls`` counts the calls per path and
    ``namespaces`` records the ``X-Namespace`` headers."""

    def __init__(self, codec: Any, *, auth: str | None = None) -> None:
        self.codec, self.auth = codec, auth
        self.calls: dict[str, int] = {}
        self.namespaces: set[str] = set()
        # "ok"; "fail": HTTP 500 echoing the request's Authorization header in its body and a header;
        # "hang": no answer until the server stops (or 60 s).
        self.mode = "ok"
        self._release = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> CodecServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                operation = self.path.rstrip("/").rsplit("/", 1)[-1]
                server.calls[operation] = server.calls.get(operation, 0) + 1
                server.namespaces.add(self.headers.get("X-Namespace", ""))
                if server.auth is not None and self.headers.get("Authorization") != server.auth:
                    return self._answer(401, b'{"error": "unauthorized"}')
                if server.mode == "hang":
                    server._release.wait(60)
                    return self._answer(503, b"{}")
                if server.mode == "fail":
                    echoed = self.headers.get("Authorization", "")
                    return self._answer(500, json.dumps({"error": "boom", "authorization": echoed}).encode(),
                                        {"X-Echo-Authorization": echoed})
                if operation not in ("encode", "decode"):
                    return self._answer(404, b"{}")
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                payloads = list(json_format.Parse(body, Payloads()).payloads)
                done = asyncio.run(getattr(server.codec, operation)(payloads))
                self._answer(200, json_format.MessageToJson(Payloads(payloads=done)).encode())

            def _answer(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


# ---------------------------------------------------------------------------- what a history holds
def _payloads(message: Any, *, skip: Sequence[str] = ("search_attributes",)) -> Iterator[Any]:
    """Every Payload of a protobuf message, outside search attributes (which Temporal indexes, so
    they are never encoded by a codec)."""
    from google.protobuf.message import Message
    from temporalio.api.common.v1 import Payload

    for field, value in message.ListFields():
        if field.message_type is None or field.name in skip:
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
                yield from _payloads(item, skip=skip)


def _user_data(events: Sequence[Any]) -> Iterator[tuple[Any, Any]]:
    """(event, payload) for every payload that can hold user data: not the SDK's patch markers
    (`workflow.patched`: the patch id, written by the SDK's core as plain JSON, never through a codec)."""
    for event in events:
        if event.marker_recorded_event_attributes.marker_name == "core_patch":
            continue
        for payload in _payloads(event):
            yield event, payload


def history_encodings(events: Sequence[Any]) -> set[str]:
    """The encodings of every payload the events hold (search attributes and patch markers aside)."""
    return {p.metadata.get("encoding", b"").decode() for _, p in _user_data(events)}


def plaintext_in(events: Sequence[Any], needles: Sequence[bytes]) -> list[str]:
    """Events whose serialized form holds one of the needles."""
    return [f"{e.event_type}: {n!r}" for e in events for n in needles if n in e.SerializeToString()]


async def assert_only_encrypted(client: Any, workflow_id: str, needles: Sequence[bytes], *, runs: int = 1) -> None:
    """At least ``runs`` runs of ``workflow_id`` are listed, and every one holds only encrypted
    payloads and none of ``needles`` (an AssertionError until visibility lists them: wrap it in
    ``assert_eventually``)."""
    listed = [wf.run_id async for wf in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    assert len(listed) >= runs, f"{len(listed)} run(s) of {workflow_id} listed, expected {runs}"
    for run_id in listed:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        plain = [(e.event_id, e.event_type, str(p)[:300]) for e, p in _user_data(history.events)
                 if p.metadata.get("encoding", b"").decode() != ENCRYPTED]
        assert not plain, (workflow_id, run_id, plain)
        assert not plaintext_in(history.events, needles), (workflow_id, run_id)

