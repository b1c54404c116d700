"""What the client checks and derives before it sends (limits, update ids, bulk chunks). Which of
Temporal's errors it retries with the same id: :mod:`wf_initiation._from_temporal`."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from wf_initiation.core._expr import canonical_key
from wf_initiation.core.limits import (
    MAX_ACTION_ID_CHARS,
    MAX_BULK_BYTES,
    json_problem,
    json_size,
    length_problem,
    payload_size_problem,
)
from wf_initiation.errors import DeliveryRefused, DeliveryTooLarge
from wf_initiation.wire import MAX_BULK, DeliveryRequest


def cancelling() -> bool:
    """Whether the running task is being cancelled (a caller's timeout): a call is then not retried."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def update_id_for(entry: str | None, payload: Any) -> str:
    """The update id :meth:`WfiClient.deliver` derives: same delivery, same id, so a retried delivery
    is answered by the first within one run of the activation.

    Args:
        entry: The trigger entry (or None).
        payload: The payload.

    Returns:
        ``dlv-`` and a digest of both.
    """
    try:
        body = canonical_key(payload)
    except Exception:
        body = repr(payload)
    return "dlv-" + hashlib.sha256(f"{entry}\x1f{body}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def bound_update_id(update_id: str, entry: str | None, payload: Any) -> str:
    """A caller's update id bound to the delivery's content: the same id with another payload is
    another update (the activation then answers ``conflict`` or ``duplicate`` by delivery id).

    Args:
        update_id: The caller's id.
        entry: The trigger entry (or None).
        payload: The payload.

    Returns:
        The update id sent.

    Raises:
        DeliveryRefused: the caller's id is longer than ``MAX_ACTION_ID_CHARS``.
    """
    too_long = length_problem("the update id", update_id, MAX_ACTION_ID_CHARS)
    if too_long is not None:
        raise DeliveryRefused(too_long)
    return f"{update_id}~{update_id_for(entry, payload)[4:20]}"


def check_size(payload: Any) -> int:
    """Refuse a payload that is not plain JSON within the limits; return its size in bytes."""
    problem = json_problem(payload)
    if problem is not None:
        raise DeliveryRefused(f"the payload cannot be delivered: {problem}")
    size = json_size(payload)
    too_large = payload_size_problem(size)
    if too_large is not None:
        raise DeliveryTooLarge(too_large)
    return size


def bulk_chunks(deliveries: list[tuple[str | None, Any]]) -> list[list[DeliveryRequest]]:
    """Split deliveries into ``deliver_many`` updates of at most ``MAX_BULK`` each and ``MAX_BULK_BYTES``.

    Args:
        deliveries: ``(entry, payload)`` pairs.

    Returns:
        The requests of each update, in order.

    Raises:
        DeliveryRefused: a payload is not plain JSON within the limits.
    """
    chunks: list[list[DeliveryRequest]] = [[]]
    size = 0
    for entry, payload in deliveries:
        n = check_size(payload) + len(entry or "") + 64
        if chunks[-1] and (len(chunks[-1]) >= MAX_BULK or size + n > MAX_BULK_BYTES):
            chunks.append([])
            size = 0
        chunks[-1].append(DeliveryRequest(entry=entry, payload=payload))
        size += n
    return [c for c in chunks if c]
