"""Decoding what senders hand the activation's handlers, so no input can fail a workflow task.

Handlers of signals and updates that outsiders can send take a ``RawValue`` and decode it here. A
value the data converter cannot decode (JSON nested ~200 deep hits pydantic's recursion limit,
NaN from a bridge with another JSON encoder, a number out of range) would otherwise make the SDK
drop a signal after its sender was told it was durable, or reject an update with a message about
the converter; here it becomes a one-line problem the handler records (``invalid``) or refuses.
Oversized arguments are refused before decoding. :func:`unencoded` tells whether an argument reached
the worker without the team's payload codec (the flag of ``core.unencoded``).
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from wf_initiation.core.limits import clip
    from wf_initiation.core.unencoded import FLAG
    from wf_initiation.errors import InvalidInput

T = TypeVar("T")


class Undecodable(InvalidInput, ValueError):
    """The argument could not be taken: its one-line reason is the message."""


def decode(raw: Any, kind: type[T], *, max_bytes: int | None, what: str) -> T:
    """Decode a handler's raw argument as ``kind``, or raise :class:`Undecodable` saying why.

    ``raw`` is a ``RawValue`` (or, when the SDK already decoded it, the value itself). ``max_bytes``:
    refused past it before decoding; None when an update's validator measured it already.
    """
    if not isinstance(raw, RawValue):
        return raw
    size = len(raw.payload.data)
    if max_bytes is not None and size > max_bytes:
        raise Undecodable(f"{what} is {size} bytes; the limit is {max_bytes}")
    try:
        return workflow.payload_converter().from_payload(raw.payload, kind)
    except ValidationError as exc:
        first = exc.errors()[0] if exc.errors() else {"msg": str(exc)}
        where = "/".join(str(p) for p in first.get("loc", ())) or "argument"
        raise Undecodable(clip(f"{what} could not be decoded ({where}: {first['msg']}); a payload must be JSON "
                               "nested at most 64 levels, with finite numbers") or "") from None
    except Exception as exc:  # noqa: BLE001 - any converter failure is the sender's input, never the task's
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise Undecodable(clip(f"{what} could not be decoded: {message}") or "") from None


def unencoded(raw: Any) -> bool:
    """Whether a handler's raw argument reached the worker without the team's payload codec: flagged by
    the worker's codec (``wf_initiation.plugin.FlaggingCodec``; never on a worker without a codec)."""
    return isinstance(raw, RawValue) and FLAG in raw.payload.metadata
