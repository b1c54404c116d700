"""One error tree (wf_initiation.errors): every exception class of the package derives from WfiError,
each type is stable and unique, Temporal's errors map onto the tree, and WfiClient lets none of
Temporal's own errors out (the original kept as the cause)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest
from temporalio.client import RPCTimeoutOrCancelledError, WorkflowQueryFailedError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from wf_initiation import errors
from wf_initiation._from_temporal import from_temporal
from wf_initiation.errors import (
    ActivationEnded,
    ActivationNotFound,
    ActivationRebinding,
    ActivationRefused,
    CallTimeout,
    CodecError,
    CredentialsRefused,
    QueryFailed,
    StaleAnswer,
    TemporalError,
    TemporalUnavailable,
    WfiError,
)
from wf_initiation.wire import INVALID_ARGUMENT, REBINDING, STALE_ACTIVATION

PACKAGES = ("wf_initiation", "wf_initiation.workflows", "wf_initiation.activities", "wf_initiation.conformance")


def _modules() -> list[str]:
    names: set[str] = set()
    for root in PACKAGES:
        package = importlib.import_module(root)
        names.add(root)
        names |= {m.name for m in pkgutil.walk_packages(package.__path__, f"{root}.") if not m.name.endswith("__main__")}
    return sorted(names)


def test_every_exception_class_of_the_package_derives_from_wfi_error() -> None:
    found, outside = [], []
    for name in _modules():
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == name and issubclass(cls, BaseException):
                found.append(cls)
                if not issubclass(cls, WfiError):
                    outside.append(f"{name}.{cls.__qualname__}")
    assert len(found) > 30, "the walk found too few exception classes to mean anything"
    assert outside == [], f"exception classes outside the tree (derive them from a wf_initiation.errors class): {outside}"


def test_each_type_in_the_tree_is_stable_snake_case_and_its_own() -> None:
    public = [getattr(errors, n) for n in errors.__all__ if isinstance(getattr(errors, n), type)]
    types = [cls.type for cls in public]
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)*", t) for t in types), types
    assert len(set(types)) == len(types), "two classes share a type"
    assert set(public) <= set(errors.tree())


def test_one_secret_reference_type_and_one_unavailable_secret_error() -> None:
    from wf_initiation.core import connections
    from wf_initiation.ingress import _secrets

    assert connections.SecretUnavailable is errors.SecretUnavailable is _secrets.SecretUnavailable
    defined = [f"{name}.{cls.__qualname__}" for name in _modules() for _, cls in inspect.getmembers(importlib.import_module(name), inspect.isclass)
               if cls.__module__ == name and cls.__name__ in ("SecretRef", "SecretUnavailable")]
    assert sorted(defined) == ["wf_initiation.core.connections.SecretRef", "wf_initiation.errors.SecretUnavailable"]


def test_retryable_says_whether_the_same_call_may_succeed_later() -> None:
    assert [cls for cls in errors.tree() if cls.retryable and cls.__module__ == "wf_initiation.errors"] == [
        TemporalUnavailable, CallTimeout, ActivationRebinding, StaleAnswer]
    assert not CodecError.retryable  # a TemporalUnavailable that waiting does not fix


# ---------------------------------------------------------------------------- mapping Temporal's errors
def _rpc(status: RPCStatusCode, message: str) -> RPCError:
    return RPCError(message, status, b"")


@pytest.mark.parametrize(("raised", "expected", "retryable"), [
    (_rpc(RPCStatusCode.NOT_FOUND, "workflow not found for ID: wfi-activation:w"), ActivationNotFound, False),
    (_rpc(RPCStatusCode.NOT_FOUND, "workflow execution already completed"), ActivationEnded, False),
    (_rpc(RPCStatusCode.PERMISSION_DENIED, "Request unauthorized."), CredentialsRefused, False),
    (_rpc(RPCStatusCode.UNAUTHENTICATED, "missing API key"), CredentialsRefused, False),
    (_rpc(RPCStatusCode.RESOURCE_EXHAUSTED, "too many outstanding updates"), TemporalUnavailable, True),
    (_rpc(RPCStatusCode.UNAVAILABLE, "tcp connect error"), TemporalUnavailable, True),
    (_rpc(RPCStatusCode.UNKNOWN, "transport error"), TemporalUnavailable, True),
    (_rpc(RPCStatusCode.CANCELLED, "Timeout expired"), CallTimeout, True),
    (_rpc(RPCStatusCode.INVALID_ARGUMENT, "Blob data size exceeds limit."), TemporalError, False),
    (RPCTimeoutOrCancelledError("timed out"), CallTimeout, True),
    (WorkflowUpdateFailedError(ApplicationError("being replaced", type=REBINDING)), ActivationRebinding, True),
    (WorkflowUpdateFailedError(ApplicationError("no such entry", type=INVALID_ARGUMENT)), ActivationRefused, False),
    # The server's rejection of an update a completed workflow task did not take (seen in a split under load).
    (WorkflowUpdateFailedError(ApplicationError("Workflow Update is rejected because it wasn't processed by worker.",
                                                type="UnprocessedUpdate", non_retryable=True)), TemporalUnavailable, True),
    (WorkflowQueryFailedError("the handler failed"), QueryFailed, False),
    (KeyError("Unknown payload encoding binary/encrypted"), CodecError, False),
])
def test_temporals_errors_map_onto_the_tree(raised: BaseException, expected: type[WfiError], retryable: bool) -> None:
    mapped = from_temporal(raised, workflow="w")
    assert type(mapped) is expected and mapped.retryable is retryable, (mapped, raised)
    assert "w" in str(mapped) if isinstance(mapped, ActivationNotFound) else str(mapped)


def test_a_mapped_error_keeps_what_temporal_said() -> None:
    refused = from_temporal(WorkflowUpdateFailedError(ApplicationError("unknown entry 'x'", type=INVALID_ARGUMENT)))
    assert isinstance(refused, ActivationRefused) and refused.cause_type == INVALID_ARGUMENT
    assert str(refused) == "unknown entry 'x'"
    rpc = from_temporal(_rpc(RPCStatusCode.INVALID_ARGUMENT, "bad request"))
    assert isinstance(rpc, TemporalError) and (rpc.status, rpc.detail) == ("INVALID_ARGUMENT", "bad request")
    assert str(rpc) == "Temporal refused the call: bad request"


def test_what_is_not_temporals_is_not_mapped() -> None:
    assert from_temporal(ValueError("a defect")) is None
    assert from_temporal(KeyError("another")) is None
    own = CallTimeout("mine")
    assert from_temporal(own) is own
    stale = from_temporal(WorkflowQueryFailedError("stale"))
    assert type(stale) is QueryFailed and stale.failure_type is None  # no detail, no stale: see test_sdk_workarounds
    assert StaleAnswer.retryable and STALE_ACTIVATION == "StaleActivationError"
