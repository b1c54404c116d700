"""Connecting to Temporal: the command line's connection flags, the environment and the config
file's profile, the TLS and codec settings, the client, and the one-line messages for a server
that cannot be reached or lacks the namespace.

Connection settings, each first found wins: the ``temporal`` CLI's order (flag > environment >
config file), with the deployment file as the project's default below them:

1. the command line: ``--address``, ``--namespace``, ``--api-key``, ``--tls``, ``--tls-cert-path``,
   ``--tls-key-path``, ``--tls-ca-path``, ``--tls-server-name``;
2. the environment: ``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``,
   ``TEMPORAL_TLS*`` (read by the SDK's ``temporalio.envconfig``);
3. the profile of the Temporal config file (``--config-file``, else ``TEMPORAL_CONFIG_FILE``, else
   the SDK's default location), named by ``--profile``, else ``TEMPORAL_PROFILE``, else the
   deployment's ``temporal.profile``, else ``default`` (which may be absent);
4. the deployment's ``temporal.address`` / ``temporal.namespace``;
5. ``localhost:7233``, namespace ``default``, no TLS.

TLS is on when a profile or flag turns it on, or an API key is given (as the ``temporal`` CLI does).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wf_initiation._sdk import client_connect_config, connect_error_reason
from wf_initiation.core.deployment import TemporalTarget
from wf_initiation.errors import TemporalUnavailable

DEFAULT_ADDRESS = "localhost:7233"
_ADDRESS = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):(\d{1,5})$")


@dataclass(frozen=True)
class ConnectFlags:
    """What the command line says about reaching Temporal; set values win over everything else."""

    address: str | None = None
    namespace: str | None = None
    api_key: str | None = None
    tls: bool = False
    tls_cert_path: str | None = None
    tls_key_path: str | None = None
    tls_ca_path: str | None = None
    tls_server_name: str | None = None
    profile: str | None = None
    config_file: str | None = None
    data_converter: str | None = None
    codec_endpoint: str | None = None
    codec_auth: str | None = None
    environment: bool = True
    """Read the ``TEMPORAL_*`` variables and the config file's profile (off for the embedded server of ``wfi up``)."""

    @property
    def tls_files(self) -> dict[str, str]:
        named = {"client_cert": self.tls_cert_path, "client_private_key": self.tls_key_path,
                 "server_root_ca_cert": self.tls_ca_path}
        return {field: path for field, path in named.items() if path}


def flag_environment(flags: ConnectFlags) -> dict[str, str]:
    """The ``TEMPORAL_*`` variables that say what ``flags`` say, for a child ``wfi`` process: there
    they win over its profile and deployment file as the flags do here (paths made absolute)."""
    paths = {"TEMPORAL_TLS_CLIENT_CERT_PATH": flags.tls_cert_path, "TEMPORAL_TLS_CLIENT_KEY_PATH": flags.tls_key_path,
             "TEMPORAL_TLS_SERVER_CA_CERT_PATH": flags.tls_ca_path, "TEMPORAL_CONFIG_FILE": flags.config_file}
    values = {"TEMPORAL_ADDRESS": flags.address, "TEMPORAL_NAMESPACE": flags.namespace, "TEMPORAL_API_KEY": flags.api_key,
              "TEMPORAL_TLS_SERVER_NAME": flags.tls_server_name, "TEMPORAL_PROFILE": flags.profile,
              "TEMPORAL_TLS": "true" if flags.tls else None, "TEMPORAL_CODEC_ENDPOINT": flags.codec_endpoint,
              "TEMPORAL_CODEC_AUTH": flags.codec_auth,
              **{name: str(pathlib.Path(path).resolve()) if path else None for name, path in paths.items()}}
    return {name: value for name, value in values.items() if value}


_FLAG_OF = {"client_cert": "--tls-cert-path", "client_private_key": "--tls-key-path",
            "server_root_ca_cert": "--tls-ca-path"}


def connect_options(
    target: TemporalTarget, flags: ConnectFlags = ConnectFlags(), *, environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``Client.connect`` (without the data converter), in the order above.

    Raises:
        TemporalUnavailable: a profile that does not exist or cannot be read, an unreadable TLS
            file, or an address that is not ``host:port``; the message names the fix.
    """
    return _connect_options(target, flags, _environment_config(target, flags, environ))


def _connect_options(target: TemporalTarget, flags: ConnectFlags, raw: dict[str, Any]) -> dict[str, Any]:
    options = _profile_options(raw)
    options["target_host"] = flags.address or options.get("target_host") or target.address or DEFAULT_ADDRESS
    options["namespace"] = flags.namespace or options.get("namespace") or target.namespace
    if flags.api_key:
        options["api_key"] = flags.api_key
    tls = _tls(options.get("tls"), flags)
    if tls is not None:
        options["tls"] = tls
    elif options.get("api_key"):
        options["tls"] = True
    check_address(options["target_host"])
    return options


def _environment_config(target: TemporalTarget, flags: ConnectFlags, environ: Mapping[str, str] | None) -> dict[str, Any]:
    """The ``TEMPORAL_*`` variables over the chosen profile, as the SDK's envconfig reads them (with
    the profile's ``codec`` table, which the SDK's typed profile leaves out); empty when the
    command is told not to read the environment."""
    if not flags.environment:
        return {}
    env = dict(os.environ if environ is None else environ)
    named = flags.profile or env.get("TEMPORAL_PROFILE") or target.profile
    try:
        return client_connect_config(named, flags.config_file, env)
    except Exception as exc:  # the SDK raises its ConfigError, OSError or a TOML error
        where = flags.config_file or env.get("TEMPORAL_CONFIG_FILE") or "the default Temporal config file"
        raise TemporalUnavailable(
            f"cannot load Temporal profile {named or 'default'!r} from {where}: {one_line(exc)}; "
            "create it with `temporal config set --profile NAME --prop address --value HOST:PORT` "
            "or pass --address"
        ) from None


def _profile_options(raw: dict[str, Any]) -> dict[str, Any]:
    from temporalio.envconfig import ClientConfigProfile

    return dict(ClientConfigProfile.from_dict(raw).to_client_connect_config())  # type: ignore[arg-type]


def check_address(address: str) -> None:
    """``host:port`` (``[v6]:port`` too); anything else would be dialled somewhere unexpected (port 80)."""
    found = _ADDRESS.match(address)
    if not found or not 0 < int(found.group(2)) < 65536:
        raise TemporalUnavailable(
            f"the Temporal address {address!r} is not host:port; write e.g. localhost:7233 or "
            "my-ns.a1b2c.tmprl.cloud:7233 (--address, temporal.address or TEMPORAL_ADDRESS)")


def _tls(base: Any, flags: ConnectFlags) -> Any:
    """The profile's TLS setting with the flags applied; None when neither says anything."""
    from temporalio.service import TLSConfig

    files: dict[str, Any] = {field: _read_tls_file(path, _FLAG_OF[field]) for field, path in flags.tls_files.items()}
    if not files and not flags.tls_server_name:
        return True if flags.tls and base in (None, False) else base
    config = base if isinstance(base, TLSConfig) else TLSConfig()
    if flags.tls_server_name:
        files["domain"] = flags.tls_server_name
    return dataclasses.replace(config, **files)


def _read_tls_file(path: str, flag: str) -> bytes:
    try:
        return pathlib.Path(path).read_bytes()
    except OSError as exc:
        raise TemporalUnavailable(f"cannot read {flag} {path}: {exc.strerror}") from None


def codec_setting(target: TemporalTarget, flags: ConnectFlags = ConnectFlags(), *, base_dir: str | None = None,
                  environ: Mapping[str, str] | None = None, raw: dict[str, Any] | None = None) -> Any:
    """Where the client's payload codec comes from (a ``_codec.CodecSetting``), or None for none; in
    the connection's order: ``--data-converter`` / ``--codec-endpoint``, ``TEMPORAL_CODEC_ENDPOINT``,
    the profile's ``codec.endpoint``, the deployment's ``temporal.data_converter`` /
    ``temporal.codec_endpoint``. The codec server's credentials: ``--codec-auth``,
    ``TEMPORAL_CODEC_AUTH``, the profile's ``codec.auth``.

    Raises:
        TemporalUnavailable: both flags are given, or a value is malformed; the message names the fix.
    """
    from wf_initiation._codec import CodecError, CodecSetting, endpoint_problem, reference_problem

    codec = (_environment_config(target, flags, environ) if raw is None else raw).get("codec") or {}
    auth = flags.codec_auth or codec.get("auth") or None
    if flags.data_converter and flags.codec_endpoint:
        raise CodecError("give --data-converter or --codec-endpoint, not both: one codec encodes every payload")
    candidates = [
        ("--data-converter", flags.data_converter, None, os.getcwd()),
        ("--codec-endpoint", None, flags.codec_endpoint, None),
        ("TEMPORAL_CODEC_ENDPOINT or the profile's codec.endpoint", None, codec.get("endpoint"), None),
        ("the deployment's temporal.data_converter", target.data_converter, None, base_dir),
        ("the deployment's temporal.codec_endpoint", None, target.codec_endpoint, None),
    ]
    for source, reference, endpoint, directory in candidates:
        if reference or endpoint:
            problem = reference_problem(reference) if reference else endpoint_problem(endpoint or "")
            if problem:
                raise CodecError(f"{source}: {problem}")
            return CodecSetting(source=source, reference=reference, endpoint=endpoint, auth=auth, base_dir=directory)
    return None


def client_options(target: Any, flags: ConnectFlags = ConnectFlags()) -> dict[str, Any]:
    """Keyword arguments for ``Client.connect``, the data converter included (its module imported):
    what :func:`connect` uses, for a command that checks its settings before it starts serving.

    Raises:
        TemporalUnavailable: as :func:`connect`, before any connection is attempted.
    """
    from wf_initiation._codec import data_converter

    temporal, base_dir = (target, None) if isinstance(target, TemporalTarget) else (target.temporal, target.base_dir)
    raw = _environment_config(temporal, flags, None)
    options = _connect_options(temporal, flags, raw)
    setting = codec_setting(temporal, flags, base_dir=base_dir, raw=raw)
    return {**options, "data_converter": data_converter(setting, options["namespace"])}


async def connect(target: Any, flags: ConnectFlags = ConnectFlags()) -> Any:
    """A ``temporalio.client.Client`` with the pydantic data converter and the team's codec.

    Args:
        target: A ``Deployment`` (its ``temporal`` section, and its directory for a
            ``temporal.data_converter`` module), or a ``TemporalTarget``.
        flags: What the command line says.

    Raises:
        TemporalUnavailable: the settings are unusable or the server did not answer; the message
            names the address and the fix (a ``_codec.CodecError`` for the codec).
    """
    from temporalio.client import Client

    options = client_options(target, flags)
    try:
        return await Client.connect(**options)
    except (RuntimeError, ValueError) as exc:
        raise TemporalUnavailable(unreachable_message(options["target_host"], exc)) from None


def unreachable_message(address: str, exc: BaseException) -> str:
    """One line naming the address, the cause (e.g. "Connection refused") and the fixes."""
    reason = connect_error_reason(exc) or _shorten(str(exc).removeprefix("Failed client connect: "))
    return (
        f"cannot reach Temporal at {address} ({reason}); start one with `wfi up` (embedded dev server), "
        "or point at a running cluster with --address, the deployment's temporal.address, or TEMPORAL_ADDRESS"
    )


def _shorten(text: str, limit: int = 200) -> str:
    """The first line, cut at a word boundary when longer than ``limit``."""
    line = one_line(text)
    if len(line) <= limit:
        return line
    return line[:limit].rsplit(" ", 1)[0].rstrip(",;:( ") + " ..."


def one_line(exc: BaseException | str) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def namespace_missing_message(namespace: str, address: str) -> str:
    return (f"namespace {namespace!r} does not exist on the Temporal at {address}; create it with "
            f"`temporal operator namespace create --namespace {namespace}`, or choose another with --namespace "
            "or the deployment's temporal.namespace")


async def check_namespace(client: Any) -> None:
    """Fail with one line when the client's namespace does not exist (any other refusal: go on, the
    first real call will say what is wrong; e.g. an API key may not allow describing the namespace).

    Raises:
        TemporalUnavailable: naming the namespace and how to create or choose one.
    """
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.service import RPCError, RPCStatusCode

    try:
        await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=client.namespace))
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise TemporalUnavailable(
                namespace_missing_message(client.namespace, client.service_client.config.target_host)) from None
