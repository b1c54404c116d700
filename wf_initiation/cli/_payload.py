"""A delivery's payload from ``--payload``, ``--payload-file`` or stdin, checked before anything is sent.

Refused here, each with one line and exit status 2: text that is not UTF-8, not JSON, NaN or
Infinity (Python's ``json`` accepts them, JSON does not, and they cannot be compared or stored),
numbers out of float range (``1e999``), integers of more than ``MAX_INT_DIGITS`` digits, lone
UTF-16 surrogates (not Unicode text), nesting deeper than ``MAX_PAYLOAD_DEPTH`` and compact JSON
larger than ``MAX_DELIVERY_BYTES`` (wf_initiation.core.limits; the activation enforces the same limits).
"""

from __future__ import annotations

import json
import sys
from typing import Any, BinaryIO

from wf_initiation.cli import EXIT_USAGE, UserError
from wf_initiation.core.limits import (
    MAX_DELIVERY_BYTES,
    MAX_INT_DIGITS,
    MAX_PAYLOAD_DEPTH,
    nesting_depth,
    payload_size_problem,
    strict_json,
)
from wf_initiation.errors import JsonNumberError

# Indented JSON is larger than its compact form: read this much before judging the size.
MAX_TEXT_BYTES = 8 * MAX_DELIVERY_BYTES


class PayloadRefused(UserError):
    """The payload cannot be sent as it is; exit status 2."""

    def __init__(self, message: str):
        super().__init__(message, exit_code=EXIT_USAGE)


def read_payload(payload: str | None, payload_file: str | None, stdin: BinaryIO | None = None) -> Any:
    """The JSON value given by ``--payload`` text, a ``--payload-file`` path (``-``: stdin) or piped stdin."""
    if payload is not None:
        text, source = payload, "--payload"
    else:
        stream = stdin if stdin is not None else sys.stdin.buffer
        if payload_file not in (None, "-"):
            text, source = _decode(_read_file(payload_file), payload_file), payload_file
        elif payload_file == "-" or not stream.isatty():
            text, source = _decode(_read_limited(stream, "stdin"), "stdin"), "stdin"
        else:
            raise PayloadRefused("give the payload with --payload JSON, --payload-file FILE, or on stdin")
    return parse(text, source)


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return _read_limited(fh, path)
    except OSError as exc:
        raise PayloadRefused(f"cannot read {path}: {exc.strerror}") from None


def _read_limited(stream: BinaryIO, source: str) -> bytes:
    data = stream.read(MAX_TEXT_BYTES + 1)
    if len(data) > MAX_TEXT_BYTES:
        raise PayloadRefused(f"the payload from {source} is over {MAX_TEXT_BYTES} bytes; the limit is "
                             f"{MAX_DELIVERY_BYTES} bytes of JSON: send a reference (URL, object key) instead")
    return data


def _decode(data: bytes, source: str) -> str:
    try:
        return data.decode("utf-8-sig")  # a leading byte-order mark is allowed and dropped
    except UnicodeDecodeError as exc:
        raise PayloadRefused(f"the payload from {source} is not UTF-8 text (byte 0x{data[exc.start]:02x} at "
                             f"offset {exc.start}); JSON must be UTF-8: convert it, e.g. with iconv") from None


def parse(text: str, source: str) -> Any:
    """The JSON value of ``text``, or PayloadRefused saying what is wrong and how to fix it."""
    if not text.strip():
        raise PayloadRefused(f"the payload from {source} is empty; give a JSON value")
    try:
        value = strict_json(text)
    except JsonNumberError as exc:
        raise _number_refused(source, exc) from None
    except json.JSONDecodeError as exc:
        raise PayloadRefused(f"the payload from {source} is not valid JSON: {exc}") from None
    except RecursionError:  # json's decoder recurses once per level: ~1,000 levels end it
        raise _too_deep(source, "too many to read") from None
    depth = nesting_depth(value)
    if depth > MAX_PAYLOAD_DEPTH:
        raise _too_deep(source, f"{depth} levels")
    _check_value(value, source)
    return value


def _number_refused(source: str, exc: JsonNumberError) -> PayloadRefused:
    if exc.kind == "digits":
        return PayloadRefused(f"the payload from {source} has an integer of more than {MAX_INT_DIGITS} digits: "
                              "send such a number as a string")
    if exc.kind == "constant":
        return PayloadRefused(f"the payload from {source} contains {exc.text}, which is not a JSON number: "
                              "send null or a string instead")
    return PayloadRefused(f"the payload from {source} has the number {exc.text}, beyond the range of a double "
                          "(it would become Infinity): send it as a string")


def _too_deep(source: str, levels: str) -> PayloadRefused:
    return PayloadRefused(f"the payload from {source} nests arrays and objects deeper than the limit of "
                          f"{MAX_PAYLOAD_DEPTH} levels ({levels}): flatten it or send a reference")


def _check_value(value: Any, source: str) -> None:
    try:
        compact = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start] if isinstance(exc.object, str) else "?"
        raise PayloadRefused(f"the payload from {source} contains a lone UTF-16 surrogate (\\u{ord(bad):04x}), "
                             "which is not Unicode text: fix the text's encoding at its source") from None
    too_large = payload_size_problem(len(compact), f"the payload from {source}")
    if too_large is not None:
        raise PayloadRefused(too_large)
