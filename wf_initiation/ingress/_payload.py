"""From an HTTP request to the payload an entry's manifest expects. Pure: no I/O, no clock.

For ``http.request`` the payload is the request itself::

    {"delivery_id": ..., "method": "POST", "path": "/hooks/github",
     "headers": {"x-github-event": "push"},
     "query": {"a": "1", "tags": ["x", "y"]}, "body": <parsed body>}

It must be the same for every redelivery of one event, or the redelivery would be a conflict
(EXT-3/4) instead of a duplicate. So its headers are only those that are part of the event (the
hook's list: by scheme, or the endpoint's ``headers``), never one of a single attempt
(:func:`wf_initiation.core.ingress.attempt_header`: signatures, timestamps and credentials, which
never enter history anyway, transport, proxy, tracing, sender-build and retry headers), and the body
paths listed in ``ignore_body`` are left out.
"""

from __future__ import annotations

import codecs
import email.message
import urllib.parse
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from wf_initiation.core.ingress import attempt_header
from wf_initiation.core.limits import json_problem, json_size, nesting_depth, strict_json
from wf_initiation.errors import InvalidInput

from ._auth import STANDARD_NAMES, standard_headers
from .limits import ENVELOPE_BYTES

IDEMPOTENCY_KEY = "idempotency-key"


class BadRequest(InvalidInput, ValueError):
    """The request cannot become a payload; ``status``, ``code`` and ``headers`` say how to answer."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.headers = status, code, headers


# Content codings the ingress undoes (RFC 9110 8.4), with zlib: brotli and zstd would need
# libraries the project does not depend on, so they are refused (415) like any other.
CODINGS = ("gzip", "x-gzip", "deflate", "identity")


def decode_content(body: bytes, content_encoding: str | None, limit: int) -> bytes:
    """The body with its content codings undone, in reverse order of application; the decoded
    body may be at most ``limit`` bytes too (413: a few KiB of gzip can hold gigabytes)."""
    codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    if not body:
        return body
    unknown = [c for c in codings if c not in CODINGS]
    if unknown:
        raise BadRequest(415, "unsupported_content_encoding", f"Content-Encoding {unknown[0][:40]!r} is not "
                         "supported: send the body uncompressed, gzip or deflate",
                         headers={"Accept-Encoding": "gzip, deflate"})
    for coding in reversed(codings):
        if coding != "identity":
            body = _inflate(body, coding, limit)
    return body


def _inflate(data: bytes, coding: str, limit: int) -> bytes:
    gzip = coding in ("gzip", "x-gzip")
    # HTTP's deflate is the zlib format (RFC 9110 8.4.1.2); some senders send raw deflate.
    for wbits in ((16 + zlib.MAX_WBITS,) if gzip else (zlib.MAX_WBITS, -zlib.MAX_WBITS)):
        try:
            return _inflate_members(data, wbits, limit, coding)
        except zlib.error:
            continue
    raise BadRequest(400, "bad_encoding", f"the body is not valid {coding} data (Content-Encoding: {coding})")


def _inflate_members(data: bytes, wbits: int, limit: int, coding: str) -> bytes:
    out = b""
    while True:  # a gzip body may be several members, one after the other (RFC 1952)
        inflater = zlib.decompressobj(wbits)
        out += inflater.decompress(data, limit + 1 - len(out))
        if len(out) > limit or inflater.unconsumed_tail:
            raise BadRequest(413, "body_too_large", f"the body decoded from {coding} is over the limit of {limit} "
                             "bytes: send a reference (URL, object key) instead of the content")
        if not inflater.eof:
            raise BadRequest(400, "bad_encoding", f"the {coding} body is cut short")
        data = inflater.unused_data
        if not data or wbits != 16 + zlib.MAX_WBITS:
            if data:
                raise BadRequest(400, "bad_encoding", f"the {coding} body has bytes after its end")
            return out


def parse_body(body: bytes, content_type: str | None, max_depth: int, *, form_payload: bool = False) -> Any:
    """The body as a JSON value: JSON, a form (fields to strings or lists), text, or None when empty.

    A declared ``charset`` is honoured (UTF-8, US-ASCII, ISO-8859-1, windows-1252; JSON only in
    UTF-8 or US-ASCII, RFC 8259); another is 415. Text that does not decode in its charset, a form
    field whose percent-encoded bytes do not, and JSON strings holding a lone surrogate are 400: a
    payload never carries U+FFFD where the sender sent something else.

    ``form_payload``: a form whose only field is ``payload`` holds JSON there (GitHub's form encoding).
    """
    if not body:
        return None
    media = (content_type or "").split(";", 1)[0].strip().lower()
    charset = _charset(content_type)
    if media == "application/json" or media.endswith("+json"):
        return _json(_text(body, _json_charset(charset)), max_depth)
    if media == "application/x-www-form-urlencoded":
        form = _multi(fields(_text(body, charset or "utf-8", what="the form"), charset or "utf-8", what="form field"))
        if form_payload and set(form) == {"payload"} and isinstance(form["payload"], str):
            return _json(form["payload"], max_depth)
        return form
    if media.startswith("text/"):
        return _text(body, charset or "utf-8")
    if not media:
        text = _text(body, "utf-8")
        try:
            return _json(text, max_depth)
        except BadRequest as exc:
            if exc.code == "json_too_deep":
                raise
            return text
    raise BadRequest(415, "unsupported_media_type",
                     f"content type {media!r} is not supported: send application/json, "
                     "application/x-www-form-urlencoded or text/*")


# Charsets a body may declare, by Python codec name: ASCII-compatible ones, so that a form's
# percent-encoded bytes mean what they say. JSON is UTF-8 (RFC 8259 8.1; ASCII is a subset).
CHARSETS = {"utf-8": "UTF-8", "ascii": "US-ASCII", "iso8859-1": "ISO-8859-1", "cp1252": "windows-1252"}
JSON_CHARSETS = ("utf-8", "ascii")


def _charset(content_type: str | None) -> str | None:
    """The declared charset as a Python codec name, or None; 415 for one the ingress does not decode."""
    if not content_type or "charset" not in content_type.lower():
        return None
    header = email.message.Message()
    header["content-type"] = content_type
    declared = header.get_content_charset()
    if declared is None:
        return None
    try:
        codec = codecs.lookup(declared).name
    except LookupError:
        codec = ""
    if codec not in CHARSETS:
        raise BadRequest(415, "unsupported_charset", f"charset {declared[:40]!r} is not supported: send "
                         f"{', '.join(CHARSETS.values())} (UTF-8 is the default)")
    return codec


def _json_charset(charset: str | None) -> str:
    if charset is not None and charset not in JSON_CHARSETS:
        raise BadRequest(415, "unsupported_charset", f"JSON is UTF-8 (RFC 8259), not {CHARSETS[charset]}: send "
                         "it in UTF-8, with charset=utf-8 or no charset")
    return charset or "utf-8"


def _text(body: bytes, charset: str, *, what: str = "the body") -> str:
    try:
        return body.decode(charset)
    except UnicodeDecodeError as exc:
        raise BadRequest(400, "bad_encoding", f"{what} is not {CHARSETS.get(charset, charset)} text (byte "
                         f"{exc.start}); send it in its declared charset (UTF-8 when none is declared)") from None


def fields(text: str, charset: str, *, what: str) -> list[tuple[str, str]]:
    """Form or query fields, in order; a field whose percent-encoded bytes are not ``charset`` text is 400.

    Percent-decoding in ISO-8859-1 maps each byte to one character, so the bytes come back
    unchanged and are then decoded strictly, rather than turning invalid UTF-8 into U+FFFD."""
    try:
        pairs = urllib.parse.parse_qsl(text, keep_blank_values=True, encoding="iso8859-1", errors="strict")
        return [(_field(name, charset), _field(value, charset)) for name, value in pairs]
    except UnicodeError:
        raise BadRequest(400, "bad_encoding", f"a {what} is not percent-encoded {CHARSETS.get(charset, charset)} "
                         "text: percent-encode the bytes of its UTF-8 form") from None


def _field(octets: str, charset: str) -> str:
    return octets if octets.isascii() else octets.encode("iso8859-1").decode(charset)


def _json(text: str, max_depth: int) -> Any:
    try:
        value = strict_json(text)
    except RecursionError:
        raise BadRequest(400, "json_too_deep", f"the JSON body nests deeper than {max_depth} levels") from None
    except ValueError as exc:
        raise BadRequest(400, "bad_json", f"the body is not valid JSON: {str(exc)[:200]}") from None
    if depth_exceeds(value, max_depth):
        raise BadRequest(400, "json_too_deep", f"the JSON body nests deeper than {max_depth} levels (the limit): "
                         "flatten it")
    problem = json_problem(value, max_depth=max_depth)  # JSON escapes can spell lone surrogates
    if problem is not None:
        raise BadRequest(400, "bad_json", f"the body is not plain JSON text: {problem}")
    return value


def depth_exceeds(value: Any, limit: int) -> bool:
    """Whether arrays/objects nest more than ``limit`` levels (a scalar is depth 0)."""
    return nesting_depth(value, stop_past=limit) > limit


def _multi(pairs: Iterable[tuple[str, str]]) -> dict[str, str | list[str]]:
    """Query or form fields: a name given once maps to its string, a repeated one to the list in order."""
    out: dict[str, str | list[str]] = {}
    for name, value in pairs:
        if name not in out:
            out[name] = value
        elif isinstance(out[name], list):
            out[name].append(value)  # type: ignore[union-attr]
        else:
            out[name] = [out[name], value]  # type: ignore[list-item]
    return out


def kept_headers(headers: Sequence[tuple[str, str]], event: Sequence[str] | None, drop: Iterable[str] = ()) -> dict[str, str]:
    """The event's headers for the payload, lower-cased; a repeated header's values joined with ', '
    (RFC 9110). ``event``: the names that are part of the event (None: every header), never one of
    a single attempt (``attempt_header``) nor one in ``drop`` (a token endpoint's token header)."""
    dropped = {d.lower() for d in drop}
    wanted = None if event is None else {h.lower() for h in event if not attempt_header(h)} - dropped
    out: dict[str, str] = {}
    for name, value in headers:
        name = name.lower()
        if (name not in wanted) if wanted is not None else (name in dropped or attempt_header(name)):
            continue
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def header_delivery_id(headers: Mapping[str, str], name: str) -> str | None:
    """The delivery id in header ``name``; an Idempotency-Key is a structured-field string
    (IETF draft-ietf-httpapi-idempotency-key-header: ``Idempotency-Key: "8e03978e-..."``),
    so its quotes are removed; a bare token is taken as is. ``webhook-id`` is read where the
    request's Standard Webhooks headers are (:func:`standard_headers`: Svix's ``svix-id``)."""
    name = name.lower()
    if name == STANDARD_NAMES[0]:
        name = standard_headers(headers)[0]
    raw = headers.get(name)
    if raw is None or not raw.strip():
        return None
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return value or None


def body_delivery_id(body: Any, path: str) -> str | None:
    """The delivery id at a dotted ``path`` in the JSON body: a non-empty string or an integer."""
    value = body
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    return str(value) or None


def without_paths(body: Any, paths: Sequence[str]) -> Any:
    """``body`` with each dotted path removed (a copy along the removed paths only)."""
    for path in paths:
        body = _drop(body, path.split("."))
    return body


def _drop(value: Any, parts: list[str]) -> Any:
    if not isinstance(value, dict) or parts[0] not in value:
        return value
    if len(parts) == 1:
        return {k: v for k, v in value.items() if k != parts[0]}
    return {**value, parts[0]: _drop(value[parts[0]], parts[1:])}


def check_envelope(payload: dict[str, Any]) -> None:
    """431 when an ``http.request`` payload without its body is over ``ENVELOPE_BYTES`` as JSON: the
    body keeps the rest of the payload limit (``MAX_BODY_BYTES``), whatever the headers."""
    size = json_size({**payload, "body": None})
    if size > ENVELOPE_BYTES:
        raise BadRequest(431, "headers_too_large", f"the headers, query and delivery id kept in the payload take {size} "
                         f"bytes as JSON; the limit is {ENVELOPE_BYTES}: send fewer or shorter ones "
                         "(ingress.endpoints[].headers lists the headers to keep)")


def request_payload(
    *, delivery_id: str, method: str, path: str, headers: dict[str, str], query: Sequence[tuple[str, str]], body: Any,
) -> dict[str, Any]:
    """The ``http.request`` payload (manifest ``wf_initiation/core/manifests/http.request.yaml``)."""
    return {"delivery_id": delivery_id, "method": method, "path": path, "headers": headers,
            "query": _multi(query), "body": body}
