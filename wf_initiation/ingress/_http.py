"""A plain HTTP request and response, as the ingress's receiver takes and gives them: any server or
framework hands over an :class:`HttpRequest` and sends back the :class:`HttpResponse` (``_app`` does
both for Starlette)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterable, Sequence
from typing import Any

from wf_initiation.errors import InvalidInput


@dataclasses.dataclass(frozen=True, slots=True)
class HttpRequest:
    """One HTTP request, as any server or framework hands it over.

    ``headers``: (name, value) pairs in order, latin-1 text (names lowercase, as ASGI gives them);
    ``query``: the raw query string; ``path``: the path as the server parsed it (for messages);
    ``body``: the body's chunks as they arrive (read once, up to the limit); ``peer``: the sender's
    address, for logs."""

    method: str
    path: str
    headers: Sequence[tuple[str, str]]
    body: AsyncIterable[bytes]
    query: str = ""
    peer: str = "?"


@dataclasses.dataclass(frozen=True, slots=True)
class HttpResponse:
    """The answer: ``body`` is the JSON document's bytes; ``headers`` lowercase names."""

    status_code: int
    body: bytes
    headers: dict[str, str] = dataclasses.field(default_factory=dict)


class Disconnected(InvalidInput):
    """The sender went away before its body was received in full (raised by the body's iterator)."""


def error(status: int, code: str, message: str, retry_after: int | None = None, *,
          headers: dict[str, str] | None = None) -> HttpResponse:
    return json_response({"error": code, "message": message}, status,
                         {**(headers or {}), **({"retry-after": str(retry_after)} if retry_after is not None else {})})


def json_response(body: dict[str, Any], status: int, headers: dict[str, str] | None = None) -> HttpResponse:
    """As Starlette's ``JSONResponse`` renders it: compact, UTF-8, never NaN."""
    text = json.dumps(body, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":"))
    return HttpResponse(status, text.encode("utf-8"), {k.lower(): v for k, v in (headers or {}).items()})
