"""What the verbs that talk to Temporal share: the connection flags (named as the ``temporal`` CLI's),
loading the deployment, and running one request against an activation within ``--timeout``.

Every such verb is marked ``exit_hard``: :func:`wf_initiation.cli.main` ends the process with
``os._exit`` after it (the SDK's exit-time abort, sdk-python#300, must not replace the exit status),
so call them as subprocesses, not in-process.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import pathlib
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from wf_initiation import _temporal
from wf_initiation.cli import EXIT_FAILED, EXIT_USAGE, UserError
from wf_initiation.core._diagnostics import Diagnostic, DiagnosticError
from wf_initiation.core.deployment import Deployment, load_deployment
from wf_initiation.errors import (
    ActivationEnded,
    ActivationNotFound,
    ActivationRefused,
    CallTimeout,
    CredentialsRefused,
    DeliveryRefused,
    NamespaceNotFound,
    QueryFailed,
    TemporalUnavailable,
    WfiError,
    most_specific,
)

T = TypeVar("T")

DEFAULT_TIMEOUT = 60.0


# ---------------------------------------------------------------------------- flags
def add_connection_flags(parser: argparse.ArgumentParser, *, deployment_required: bool = True,
                         deployment_default: str | None = None) -> None:
    """``--deployment`` and the ``temporal`` CLI's connection flags (docs/cli.md, "Connecting")."""
    default = f" (default: {deployment_default})" if deployment_default else ""
    parser.add_argument("--deployment", required=deployment_required, metavar="FILE",
                        help=f"The deployment file: Temporal target, task queue, Workfiles and policies{default}.")
    group = parser.add_argument_group(
        "Temporal connection",
        "Named as the `temporal` CLI's flags, with its order: a flag wins over the TEMPORAL_* environment variables, "
        "which win over the config file's profile, which wins over the deployment's `temporal` section.",
    )
    group.add_argument("--address", metavar="HOST:PORT", help="Temporal frontend, e.g. localhost:7233 or my-ns.a1b2c.tmprl.cloud:7233.")
    group.add_argument("-n", "--namespace", metavar="NAME", help="Temporal namespace.")
    group.add_argument("--api-key", metavar="KEY", help="API key (Temporal Cloud); turns TLS on. Prefer TEMPORAL_API_KEY "
                       "or a profile: a flag is visible to other users of this machine.")
    group.add_argument("--tls", action="store_true", default=False, help="Connect with TLS (on by itself with an API key or a TLS file).")
    group.add_argument("--tls-cert-path", metavar="FILE", help="Client certificate (mTLS), PEM.")
    group.add_argument("--tls-key-path", metavar="FILE", help="Client private key (mTLS), PEM.")
    group.add_argument("--tls-ca-path", metavar="FILE", help="CA certificate to verify the server with, PEM.")
    group.add_argument("--tls-server-name", metavar="NAME", help="Server name to verify (and send as SNI) instead of the host's.")
    group.add_argument("--profile", metavar="NAME", help="Profile of the Temporal config file (TOML); default: "
                       "TEMPORAL_PROFILE, else the deployment's temporal.profile, else `default`.")
    group.add_argument("--config-file", metavar="FILE", help="The profiles' TOML file (default: TEMPORAL_CONFIG_FILE, "
                       "else the SDK's default location).")
    codec = parser.add_argument_group(
        "Payload codec (encryption)",
        "The team's codec, used for everything this command sends and reads. Default: TEMPORAL_CODEC_ENDPOINT, "
        "else the profile's codec.endpoint, else the deployment's temporal.data_converter or temporal.codec_endpoint.",
    )
    codec.add_argument("--data-converter", metavar="MODULE:ATTR", type=_reference,
                       help="A temporalio DataConverter or PayloadCodec (or a class or function making one), e.g. "
                       "myteam.codec:data_converter.")
    codec.add_argument("--codec-endpoint", metavar="URL", type=_endpoint,
                       help="A codec server (POST /encode, /decode), as the temporal CLI's --codec-endpoint.")
    codec.add_argument("--codec-auth", metavar="VALUE", help="Authorization header for the codec server (default: "
                       "TEMPORAL_CODEC_AUTH, else the profile's codec.auth).")


def _reference(text: str) -> str:
    from wf_initiation._codec import reference_problem

    problem = reference_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def _endpoint(text: str) -> str:
    from wf_initiation._codec import endpoint_problem

    problem = endpoint_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def add_request_flags(parser: argparse.ArgumentParser) -> None:
    """Connection flags plus ``--timeout`` (the whole command) and ``--json``."""
    add_connection_flags(parser)
    parser.add_argument("--timeout", type=seconds, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help="Give up after this long, connecting included (default: %(default)g).")
    parser.add_argument("--json", action="store_true", help="Print JSON instead of a human summary.")


def seconds(text: str) -> float:
    """An argparse type: a positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds, e.g. 30") from None
    if not 0 < value < 10**9:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return value


def port(text: str) -> int:
    """An argparse type: a TCP port to dial or bind, 1-65535."""
    return _port_from(text, lowest=1)


def bind_port(text: str) -> int:
    """An argparse type: a TCP port to bind, 0-65535 (0: any free port)."""
    return _port_from(text, lowest=0)


def _port_from(text: str, *, lowest: int) -> int:
    if not text.isdigit() or not lowest <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number ({lowest}-65535)")
    return int(text)


def connect_flags(args: argparse.Namespace) -> _temporal.ConnectFlags:
    return _temporal.ConnectFlags(
        address=args.address, namespace=args.namespace, api_key=args.api_key, tls=args.tls,
        tls_cert_path=args.tls_cert_path, tls_key_path=args.tls_key_path, tls_ca_path=args.tls_ca_path,
        tls_server_name=args.tls_server_name, profile=args.profile, config_file=args.config_file,
        data_converter=args.data_converter, codec_endpoint=args.codec_endpoint, codec_auth=args.codec_auth,
    )


# ---------------------------------------------------------------------------- deployment
def print_diagnostics(diagnostics: list[Diagnostic], file: str) -> None:
    for d in diagnostics:
        print(d.render(file), file=sys.stderr)


def load(path: str) -> Deployment:
    """The deployment file, or a UserError after its diagnostics (one line each). An example
    deployment (a ``sources/`` folder beside it) is read as this copy's own (``_example_sources.localize``)."""
    from wf_initiation.cli._example_sources import localize

    try:
        return localize(pathlib.Path(path), load_deployment(path))
    except DiagnosticError as exc:
        print_diagnostics(exc.diagnostics, path)
        raise UserError(f"the deployment file {path} is not valid (see above)") from None


# ---------------------------------------------------------------------------- one request
async def connect(args: argparse.Namespace, deployment: Deployment) -> Any:
    """A connected ``temporalio.client.Client``; a UserError naming the fix when that fails."""
    try:
        return await _temporal.connect(deployment, connect_flags(args))
    except TemporalUnavailable as exc:
        raise UserError(str(exc)) from None


def request(args: argparse.Namespace, deployment: Deployment, operation: Callable[[Any], Awaitable[T]],
            *, workflow: str | None = None) -> T:
    """Connect, then ``await operation(wfi_client)``, all within ``args.timeout`` seconds.

    The deadline covers the whole command, not one call: ``WfiClient`` retries a call that timed out
    or was cancelled (the SDK reports a cancelled update as an RPC timeout), so cancelling it would
    not end it. On timeout the command ends without waiting for the call to notice (the process
    exits at once after this, see ``exit_hard``).

    Raises:
        UserError: the timeout, an unreachable Temporal, a missing namespace or activation, or a
            refusal by the activation, each as one line naming the fix.
    """
    phase = ["connect"]

    async def whole() -> T:
        client = await connect(args, deployment)
        phase[0] = "call"
        from wf_initiation.client import WfiClient

        return await operation(WfiClient(client, task_queue=deployment.temporal.task_queue))

    loop = asyncio.new_event_loop()
    task = loop.create_task(whole())
    loop.run_until_complete(asyncio.wait([task], timeout=args.timeout))
    if not task.done():  # the loop is left as it is: the process ends now (exit_hard)
        raise UserError(_timeout_message(args, deployment, workflow, phase[0]))
    exc = task.exception()
    if exc is not None:
        raise _explain(exc, args, deployment, workflow) from None
    return task.result()


async def within(awaitable: Awaitable[T], seconds: float) -> T:
    """``await awaitable`` for at most ``seconds``; TimeoutError after that without waiting for it to
    notice the cancellation (a WfiClient call retries a cancelled RPC, see :func:`request`)."""
    task = asyncio.ensure_future(awaitable)
    await asyncio.wait([task], timeout=seconds)
    if not task.done():
        task.cancel()
        raise TimeoutError(f"no answer within {seconds:g}s")
    return task.result()


def _timeout_message(args: argparse.Namespace, deployment: Deployment, workflow: str | None, phase: str) -> str:
    if phase == "connect":
        options = _temporal.connect_options(deployment.temporal, connect_flags(args))
        return f"no answer from Temporal at {options['target_host']} within {args.timeout:g}s (--timeout)"
    about = f" from the activation of {workflow!r}" if workflow else ""
    return (f"no answer{about} within {args.timeout:g}s (--timeout): is a worker serving task queue "
            f"{deployment.temporal.task_queue!r} (`wfi worker --deployment {args.deployment}` or `wfi up`)?")


def _explain(exc: BaseException, args: argparse.Namespace, deployment: Deployment, workflow: str | None) -> BaseException:
    """The UserError for an exception of a request (Temporal's mapped onto wf_initiation.errors
    first, as WfiClient maps them); anything else is returned as it is."""
    from wf_initiation._from_temporal import from_temporal

    if isinstance(exc, UserError | KeyboardInterrupt):
        return exc
    error = from_temporal(exc, workflow=workflow)
    if error is None:
        return exc
    row = most_specific(type(error), EXPLAIN)
    assert row is not None  # WfiError has a row
    code, say = EXPLAIN[row]
    return UserError(say(error, _Asked(args, deployment, workflow)), code)


@dataclasses.dataclass(frozen=True)
class _Asked:
    """What the command was asked: its flags, deployment and workflow, for the fix a line names."""

    args: argparse.Namespace
    deployment: Deployment
    workflow: str | None

    def activate_hint(self) -> str:
        return f"`wfi activate WORKFILE --deployment {self.args.deployment}`"


def _namespace_missing(error: Any, asked: _Asked) -> str:
    options = _temporal.connect_options(asked.deployment.temporal, connect_flags(asked.args))
    return _temporal.namespace_missing_message(options["namespace"], options["target_host"])


def _ended(error: Any, asked: _Asked) -> str:
    return (f"the activation of workflow {asked.workflow!r} has ended; activate it again with {asked.activate_hint()}"
            if asked.workflow else str(error))


def _not_running(error: Any, asked: _Asked) -> str:
    return (f"no activation of workflow {asked.workflow!r} is running; start one with {asked.activate_hint()}"
            if asked.workflow else str(error))


def _credentials(error: Any, asked: _Asked) -> str:
    return (f"Temporal refused the credentials ({error.detail}); check --api-key / TEMPORAL_API_KEY, "
            "the TLS certificate flags or the profile")


# Exit status and one line per error type of wf_initiation.errors: a type without a row takes its
# nearest ancestor's (tests/integration/test_cli_errors.py checks the rows).
EXPLAIN: dict[type[WfiError], tuple[int, Callable[[Any, _Asked], str]]] = {
    WfiError: (EXIT_FAILED, lambda error, asked: str(error)),  # each names its fix in its message
    DeliveryRefused: (EXIT_USAGE, lambda error, asked: str(error)),  # the client's own refusals (size, content, ids)
    NamespaceNotFound: (EXIT_FAILED, _namespace_missing),
    ActivationNotFound: (EXIT_FAILED, _not_running),
    ActivationEnded: (EXIT_FAILED, _ended),
    CredentialsRefused: (EXIT_FAILED, _credentials),
    CallTimeout: (EXIT_FAILED, lambda error, asked: _timeout_message(asked.args, asked.deployment, asked.workflow, "call")),
    ActivationRefused: (EXIT_FAILED, lambda error, asked: f"the activation refused the request: {error}"),
    QueryFailed: (EXIT_FAILED, lambda error, asked: f"the activation could not answer: {error}"),
}


# ---------------------------------------------------------------------------- output
def emit(data: Any, human: str, as_json: bool) -> None:
    print(json.dumps(data, indent=2, default=str) if as_json else human)


def progress(args: argparse.Namespace, line: str) -> None:
    """A line of progress of long work, at once: on stdout, or on stderr with ``--json`` (whose stdout
    holds the JSON document alone)."""
    print(line, file=sys.stderr if getattr(args, "json", False) else sys.stdout, flush=True)


__all__ = ["DEFAULT_TIMEOUT", "EXIT_FAILED", "EXIT_USAGE", "add_connection_flags", "add_request_flags", "connect",
           "emit", "load", "print_diagnostics", "progress", "request", "seconds", "within", "port", "bind_port"]
