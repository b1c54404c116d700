"""Where this project depends on what the Temporal SDK or server does rather than on what they promise.

Each function here reads something exposed only as message text, a private attribute or an
error detail the SDK does not surface: they are the only places in the package that do. Each names
the upstream file (or issue) it depends on, and ``tests/integration/test_sdk_workarounds.py`` exercises each
against the installed SDK and a real server, so an upgrade that changes one fails there, naming the
function, instead of silently changing behaviour. Imported by workflow code too (passed through the
sandbox): nothing here does I/O.

One more lives where it acts: ``workflows/_start_input.py`` lets go of what a cached run kept of
the activation it began with (the ``ExecuteWorkflowInput`` the SDK keeps for the run, and views
into the first activation's message in it and in the run's details). If the SDK changes how it
keeps them, nothing breaks but the memory: ``tests/integration/test_start_input.py`` measures it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from temporalio.service import RPCError, RPCStatusCode

if TYPE_CHECKING:
    from collections.abc import Mapping

    from temporalio.client import WorkflowHandle, WorkflowQueryFailedError
    from temporalio.worker import Worker

FAILED_DECODING = "Failed decoding"
TRANSPORT_TEXTS = ("transport error", "connection refused", "connection reset", "broken pipe", "error trying to connect",
                   "tcp connect error", "h2 protocol error", "connection closed")
"""How the SDK's core words a failed connection in an ``RPCError``'s message (its status varies)."""
_LIMIT_WORDS = ("size", "exceeds", "too large", "too long", "limit")
_CONNECT_REASON = re.compile(r'(?:message|error): "([^"]+)"')
UNKNOWN_ENCODING = "Unknown payload encoding"
ACTIVITY_LOGGERS = ("temporalio.activity", "temporalio.worker._activity")
"""The loggers the SDK logs a failed activity attempt on (``temporalio/activity.py``'s ``logger``
adapter, and the module logger of ``temporalio/worker/_activity.py``)."""


# ---------------------------------------------------------------------------- message text
def failed_decoding(failure: Any) -> bool:
    """Whether an activity failed because the worker could not decode its argument.

    The SDK reports that as a retryable ``ApplicationError`` whose message starts with
    "Failed decoding arguments" (temporalio/worker/_activity.py); a retry can never pass, so the
    activation treats it as permanent. No error type or flag says so.
    """
    return (getattr(failure, "message", None) or "").startswith(FAILED_DECODING)


def is_transport_error(exc: RPCError) -> bool:
    """Whether the connection to the server failed (it is restarting): the call may not have arrived.

    The SDK's core reports a broken or refused connection with the status of the moment
    (``UNAVAILABLE``, ``UNKNOWN``, ``CANCELLED`` or ``INTERNAL``) and says so only in the message
    (sdk-core ``crates/client``, tonic's transport errors).
    """
    text = str(exc.message).lower()
    return exc.status in (RPCStatusCode.UNKNOWN, RPCStatusCode.UNAVAILABLE, RPCStatusCode.CANCELLED,
                          RPCStatusCode.INTERNAL) and any(t in text for t in TRANSPORT_TEXTS)


def is_call_timeout(exc: RPCError) -> bool:
    """Whether the call's own deadline (``rpc_timeout``) passed before the server answered.

    The SDK's core reports it as ``CANCELLED`` with the message "Timeout expired", the status it
    also gives a call the caller cancelled (sdk-core ``crates/client``).
    """
    return exc.status == RPCStatusCode.CANCELLED and "timeout expired" in str(exc.message).lower()


def refused_for_good(exc: RPCError) -> bool:
    """Whether the server refused a start because the request is over one of its limits (the
    input's size, above all): ``INVALID_ARGUMENT`` with the limit named only in the message
    ("Blob data size exceeds limit.", temporal ``common/persistence/...`` size checks). No retry can
    change it; any other ``INVALID_ARGUMENT`` may be a transient misconfiguration."""
    text = str(exc.message).lower()
    return exc.status == RPCStatusCode.INVALID_ARGUMENT and any(word in text for word in _LIMIT_WORDS)


def workflow_already_completed(exc: RPCError) -> bool:
    """Whether a signal or update reached a workflow whose run has ended: ``NOT_FOUND`` like a
    workflow that never existed, told apart only by the message "workflow execution already
    completed" (temporal ``service/history/consts``, ``ErrWorkflowCompleted``)."""
    return exc.status == RPCStatusCode.NOT_FOUND and "already completed" in str(exc.message).lower()


def is_unknown_encoding(exc: BaseException) -> bool:
    """Whether the payload converter met an encoding it has no converter for (the payload went
    through a codec this client lacks): a ``KeyError`` told apart by its text alone
    (temporalio/converter/_payload_converter.py, ``CompositePayloadConverter.from_payloads``)."""
    return isinstance(exc, KeyError) and UNKNOWN_ENCODING in str(exc)


def unknown_encoding(exc: BaseException) -> str:
    """The encoding an :func:`is_unknown_encoding` error names (e.g. ``binary/encrypted``)."""
    return str(exc).strip("'\"").removeprefix(UNKNOWN_ENCODING).strip()


def connect_error_reason(exc: BaseException) -> str | None:
    """The human part of a failed ``Client.connect`` (e.g. "Connection refused"), or None.

    The SDK raises ``RuntimeError("Failed client connect: ...")`` holding the core's Rust debug text
    (``tonic::transport::Error(Transport, ConnectError(... message: "Connection refused" ...))``,
    temporalio/bridge/client.py); its reason is a quoted ``message:`` or ``error:`` field.
    """
    found = _CONNECT_REASON.search(str(exc))
    return found.group(1) if found else None


# ---------------------------------------------------------------------------- error details
def workflow_not_ready(exc: RPCError) -> bool:
    """Whether an update was refused because the workflow's task keeps failing (transient: e.g. at
    a continue-as-new, or a worker that cannot take the task yet). The server answers
    ``FAILED_PRECONDITION`` with a ``WorkflowNotReadyFailure`` detail (temporal
    ``service/history/api/updateworkflow/api.go``), which the SDK does not raise as its own type;
    for an update-with-start the detail sits inside a ``MultiOperationExecutionFailure``, so the
    status's raw bytes are searched rather than its top-level details."""
    return exc.status == RPCStatusCode.FAILED_PRECONDITION and b"WorkflowNotReadyFailure" in (exc.raw_grpc_status or b"")


def is_namespace_not_found(exc: BaseException) -> bool:
    """Whether a call was refused because its namespace does not exist: ``NOT_FOUND`` like a missing
    workflow, told apart by a ``NamespaceNotFoundFailure`` detail the SDK does not raise as its own type."""
    return isinstance(exc, RPCError) and _has_detail(exc, "NamespaceNotFoundFailure")


def _has_detail(exc: RPCError, name: str) -> bool:
    details = getattr(exc.grpc_status, "details", None) or []
    return any(d.type_url.endswith(name) for d in details)


def query_failure_type(exc: WorkflowQueryFailedError) -> str | None:
    """The failure type of the workflow activation that failed while answering a query (the class
    name of what it raised: ``STALE_ACTIVATION`` for the fresh-query guard's refusal); None when none.

    ``WorkflowQueryFailedError`` keeps only the message; the type is in the ``QueryFailedFailure``
    detail of the ``RPCError`` the SDK raised it while handling (its ``__context__``,
    temporalio/client/_impl.py ``query_workflow``). A query handler's own exception comes without one.
    """
    from temporalio.api.errordetails.v1 import QueryFailedFailure

    rpc = exc.__cause__ or exc.__context__
    if not isinstance(rpc, RPCError):
        return None
    for detail in rpc.grpc_status.details:
        failure = QueryFailedFailure()
        if detail.Unpack(failure) and failure.HasField("failure"):
            return failure.failure.application_failure_info.type or None
    return None


# ---------------------------------------------------------------------------- private attributes
def started_new_run(handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether ``start_workflow`` with ``USE_EXISTING`` started a run (False: it answered with the
    running one). The server says so in the response's ``started`` field, which the SDK keeps on
    the handle as ``_start_workflow_response`` without exposing it (temporalio/client/_workflow.py).
    True when the SDK no longer keeps it, which counts a retried start twice rather than never."""
    return bool(getattr(getattr(handle, "_start_workflow_response", None), "started", True))


def release_shutdown(worker: Worker) -> None:
    """Let ``Worker.shutdown()`` return although the worker never ran.

    It waits for ``_shutdown_complete_event``, which only the worker's own run sets
    (temporalio/worker/_worker.py): a plugin failing before the worker runs would leave
    ``async with Worker(...)`` hanging on exit.
    """
    done = getattr(worker, "_shutdown_complete_event", None)
    if done is not None:
        done.set()


def client_connect_config(profile: str | None, config_file: str | None, env: Mapping[str, str]) -> dict[str, Any]:
    """The ``TEMPORAL_*`` variables over a profile of the Temporal config file, with its ``codec``
    table (``codec.endpoint``, ``codec.auth``, as the ``temporal`` CLI defines them).

    The SDK's public ``ClientConfigProfile`` drops the ``codec`` table; its bridge, which
    temporalio/envconfig.py imports as ``_bridge_envconfig``, returns it merged with
    ``TEMPORAL_CODEC_*``.

    Raises:
        Exception: whatever the SDK raises for a missing or unreadable profile (its ConfigError,
            OSError, a TOML error).
    """
    from temporalio import envconfig

    return dict(envconfig._bridge_envconfig.load_client_connect_config(
        profile=profile, path=config_file, data=None, disable_file=False, disable_env=False,
        config_file_strict=False, env_vars=dict(env)))
