"""Temporal's errors as wf-initiation's (:mod:`wf_initiation.errors`): the one place that maps them.

``WfiClient`` maps every error of a call with :func:`from_temporal`, retries those that are
``retryable`` with the same update id, and raises the rest as wf-initiation's, the original kept
as ``__cause__``; ``wfi`` and the ingress map what reaches them through the same function, then
turn the result into an exit status or an HTTP status by a table over the tree. Like httpx's
``map_httpcore_exceptions``, at the edge where the other library's errors arrive.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import RPCTimeoutOrCancelledError, WorkflowQueryFailedError, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from wf_initiation._codec import unknown_encoding_message
from wf_initiation._sdk import (
    is_call_timeout,
    is_namespace_not_found,
    is_transport_error,
    is_unknown_encoding,
    query_failure_type,
    workflow_already_completed,
    workflow_not_ready,
)
from wf_initiation._temporal import namespace_missing_message
from wf_initiation.errors import (
    ActivationEnded,
    ActivationNotFound,
    ActivationRebinding,
    ActivationRefused,
    CallTimeout,
    CodecError,
    CredentialsRefused,
    NamespaceNotFound,
    QueryFailed,
    StaleAnswer,
    TemporalError,
    TemporalUnavailable,
    WfiError,
)
from wf_initiation.wire import REBINDING, STALE_ACTIVATION, workflow_id_for

# The update limit (RESOURCE_EXHAUSTED) and a restarting or overloaded server pass: the same call,
# sent again with the same id, is applied once.
_TRANSIENT = {RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED,
              RPCStatusCode.ABORTED}


def from_temporal(exc: BaseException, *, workflow: str | None = None, client: Any = None) -> WfiError | None:
    """wf-initiation's error for an error of a call to Temporal about an activation.

    Args:
        exc: What the call raised.
        workflow: The workflow identity the call was about (named in the message).
        client: The ``temporalio.client.Client`` of the call (names the namespace and address of a
            missing namespace).

    Returns:
        ``exc`` itself when it is already a :class:`WfiError`; the mapped error; None for anything
        that is not Temporal's (a defect: let it propagate as it is).
    """
    if isinstance(exc, WfiError):
        return exc
    if isinstance(exc, RPCTimeoutOrCancelledError):
        return CallTimeout(f"no answer from Temporal within the call's deadline ({exc})")
    if isinstance(exc, WorkflowUpdateFailedError):
        cause_type = getattr(exc.cause, "type", None) or None
        message = getattr(exc.cause, "message", None) or str(exc.cause or exc)
        if cause_type == UNPROCESSED_UPDATE:
            # The server rejected an update that a completed workflow task did not take (it reached
            # the worker with a task that was already ending): nothing was recorded; send it again.
            return TemporalUnavailable(f"the activation's workflow task ended without taking the update; sending it "
                                       f"again ({message})", detail=message)
        refused = ActivationRebinding if cause_type == REBINDING else ActivationRefused
        return refused(message, workflow=workflow, cause_type=cause_type)
    if isinstance(exc, WorkflowQueryFailedError):
        failure_type = query_failure_type(exc)
        failed = StaleAnswer if failure_type == STALE_ACTIVATION else QueryFailed
        return failed(str(exc), workflow=workflow, failure_type=failure_type)
    if is_unknown_encoding(exc):  # an answer written through a codec this client lacks
        return CodecError(unknown_encoding_message(exc, "the activation's answer"))
    if isinstance(exc, RPCError):
        return _from_rpc(exc, workflow, client)
    return None


UNPROCESSED_UPDATE = "UnprocessedUpdate"
"""The server's failure type for an update a completed workflow task did not take (temporalio/temporal,
service/history/workflow/update: ``unprocessedUpdateFailure``)."""


def _from_rpc(exc: RPCError, workflow: str | None, client: Any) -> WfiError:
    status, detail = exc.status.name if exc.status is not None else None, exc.message
    refused = f"Temporal refused the call: {detail}"
    if is_namespace_not_found(exc):
        message = refused if client is None else namespace_missing_message(
            client.namespace, client.service_client.config.target_host)
        return NamespaceNotFound(message, status=status, detail=detail)
    if workflow_already_completed(exc) and workflow is not None:
        return ActivationEnded(f"the activation of workflow {workflow!r} has ended; activate it again", workflow=workflow)
    if exc.status == RPCStatusCode.NOT_FOUND and workflow is not None:
        return ActivationNotFound(f"no activation of workflow {workflow!r} is running; activate it first", workflow=workflow)
    if exc.status in (RPCStatusCode.UNAUTHENTICATED, RPCStatusCode.PERMISSION_DENIED):
        return CredentialsRefused(f"Temporal refused the credentials ({detail})", status=status, detail=detail)
    if is_call_timeout(exc):
        return CallTimeout(refused, status=status, detail=detail)
    if workflow_not_ready(exc) and workflow is not None:
        # An update that met a failed or rejected workflow task (e.g. at a continue-as-new) passes;
        # one that keeps failing is a worker's fault, which the operator must see.
        return TemporalUnavailable(
            f"{refused}. If this persists, the activation's workflow task is failing: `temporal workflow describe "
            f"--workflow-id {workflow_id_for(workflow)}` shows the failure under the pending workflow task (a bug or a "
            "nondeterminism error in the worker's build; a worker with the fix resumes it with nothing lost)",
            status=status, detail=detail)
    if exc.status in _TRANSIENT or is_transport_error(exc) or workflow_not_ready(exc):
        return TemporalUnavailable(refused, status=status, detail=detail)
    return TemporalError(refused, status=status, detail=detail)


def retryable(exc: BaseException) -> bool:
    """Whether sending the call that raised ``exc`` again, unchanged, may succeed."""
    mapped = from_temporal(exc)
    return mapped is not None and mapped.retryable
