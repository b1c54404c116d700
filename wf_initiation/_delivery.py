"""What the client checks and derives before it sends (limits, update ids, bulk chunks) and which
of Temporal's errors it retries with the same id. Public through :mod:`wf_initiation.client`."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from temporalio.api.errordetails.v1 import QueryFailedFailure
from temporalio.client import RPCError, WorkflowQueryFailedError
from temporalio.service import RPCStatusCode

from wf_initiation.core._expr import canonical_key
from wf_initiation.core.limits import MAX_ACTION_ID_CHARS, MAX_BULK_BYTES, json_problem, json_size
from wf_initiation.wire import MAX_BULK, MAX_DELIVERY_BYTES, DeliveryRequest

_RETRYABLE = {RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED,
              RPCStatusCode.ABORTED}


_TRANSPORT = ("transport error", "connection refused", "connection reset", "broken pipe", "error trying to connect",
              "tcp connect error", "h2 protocol error", "connection closed")


def retryable(exc: RPCError) -> bool:
    # The update limit (RESOURCE_EXHAUSTED), a restarting server, and an update that met a failed
    # or rejected workflow task (e.g. at a continue-as-new) are all transient: retry with the same id.
    if exc.status in _RETRYABLE:
        return True
    if is_transport_error(exc) or is_call_timeout(exc):
        return True
    return exc.status == RPCStatusCode.FAILED_PRECONDITION and b"WorkflowNotReady" in (exc.raw_grpc_status or b"")


def is_transport_error(exc: RPCError) -> bool:
    """Whether the connection to the server failed (it is restarting): the call may not have arrived.

    Args:
        exc: The error of a call.

    Returns:
        True for a transport failure, which a caller retries with the same id.
    """
    text = str(exc.message).lower()
    return exc.status in (RPCStatusCode.UNKNOWN, RPCStatusCode.UNAVAILABLE, RPCStatusCode.CANCELLED,
                          RPCStatusCode.INTERNAL) and any(t in text for t in _TRANSPORT)


def is_call_timeout(exc: RPCError) -> bool:
    """Whether the call's own deadline passed before the server answered (the SDK reports it as
    CANCELLED, "Timeout expired"): a query to a busy worker, for one. Every call retried on it is
    idempotent (reads, updates and signals by id).

    Args:
        exc: The error of a call.

    Returns:
        True for the call's own timeout.
    """
    return exc.status == RPCStatusCode.CANCELLED and "timeout expired" in str(exc.message).lower()


def query_failure_type(exc: WorkflowQueryFailedError) -> str | None:
    """The failure type of a failed query, as the worker reported it (the server passes it on in the
    error's ``QueryFailedFailure`` detail).

    Args:
        exc: The query's error.

    Returns:
        The ``ApplicationError`` type, or None when it carries none.
    """
    rpc = exc.__cause__ or exc.__context__
    if not isinstance(rpc, RPCError):
        return None
    for detail in rpc.grpc_status.details:
        failure = QueryFailedFailure()
        if detail.Unpack(failure) and failure.HasField("failure"):
            return failure.failure.application_failure_info.type or None
    return None


def cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class DeliveryRefused(ValueError):
    """A delivery refused before sending: the message says why and what to send instead."""


class DeliveryTooLarge(DeliveryRefused):
    """A payload larger than a delivery may be (docs/limits.md): send a reference instead."""


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
    if len(update_id) > MAX_ACTION_ID_CHARS:
        raise DeliveryRefused(f"the update id has {len(update_id)} characters; the limit is {MAX_ACTION_ID_CHARS}")
    return f"{update_id}~{update_id_for(entry, payload)[4:20]}"


def check_size(payload: Any) -> int:
    """Refuse a payload that is not plain JSON within the limits; return its size in bytes."""
    problem = json_problem(payload)
    if problem is not None:
        raise DeliveryRefused(f"the payload cannot be delivered: {problem}")
    size = json_size(payload)
    if size > MAX_DELIVERY_BYTES:
        raise DeliveryTooLarge(
            f"payload is {size} bytes; the limit is {MAX_DELIVERY_BYTES} (Temporal payload limits): "
            "send a reference (URL, object key) instead of the content"
        )
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
