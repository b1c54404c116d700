"""``wfi serve``: the HTTP webhook ingress, and the hooks that let ``wfi up`` run it beside the worker.

    wfi serve --deployment deploy.yaml [--host 0.0.0.0] [--port 8780]

SIGINT/SIGTERM stop accepting connections and finish every request in flight before exiting.
Exit codes: 0 stopped, 1 the deployment or its ``ingress:`` section cannot be served (one line per
problem), or the port is in use. Keys and senders: ``docs/webhooks.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import sys
from typing import Any

GRACEFUL_MARGIN = 5.0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serve`` to ``wfi``."""
    p = subparsers.add_parser(
        "serve", help="serve the HTTP webhook ingress: POST /hooks/{workflow}/{entry} -> deliver",
        description="Receive webhooks over HTTP, authenticate them and deliver them to their activations; the "
        "HTTP status carries the durable disposition (`wfi help webhooks`).",
    )
    from wf_initiation.cli._common import add_connection_flags, bind_port

    add_connection_flags(p)
    p.add_argument("--host", help="Interface to bind (default: ingress.host of the deployment, else 127.0.0.1).")
    p.add_argument("--port", type=bind_port, help="Port (default: ingress.port of the deployment, else 8780; 0 = any free port).")
    p.add_argument("--lenient", action="store_true",
                   help="Serve what can be served and log each problem (unknown entry, unset secret) instead of refusing to start.")
    p.add_argument("--access-log", action="store_true", help="Log one line per request.")
    p.set_defaults(handler=_serve, exit_hard=True)


def _user_error(message: str) -> Exception:
    from wf_initiation.cli import UserError

    return UserError(message)


def _serve(args: argparse.Namespace) -> int:
    from wf_initiation import _temporal
    from wf_initiation.cli._common import connect_flags, load

    _temporal.configure_logging()
    deployment = load(args.deployment)
    flags = connect_flags(args)
    try:  # a codec that cannot be loaded is a problem of the command, not a reason to answer 503
        _temporal.client_options(deployment, flags)
    except _temporal.TemporalUnavailable as exc:
        raise _user_error(str(exc)) from None
    ingress = _build(deployment, strict=not args.lenient, connect=lambda: _temporal.connect(deployment, flags))
    return asyncio.run(_run(ingress, args))


def _build(deployment: Any, *, strict: bool, client: Any = None, connect: Any = None) -> Any:
    from wf_initiation.ingress import IngressConfigError, build

    try:
        return build(deployment, client=client, strict=strict, connect=connect)
    except IngressConfigError as exc:
        raise _user_error(str(exc)) from None


async def _run(ingress: Any, args: argparse.Namespace) -> int:
    from wf_initiation import _temporal

    stop = asyncio.Event()
    _temporal.stop_on_signals(stop)
    server = await _start(ingress, args.host, args.port, access_log=args.access_log)
    return await _serve_until(ingress, server, stop)


async def _serve_until(ingress: Any, server: Any, stop: asyncio.Event, *, process: str = "") -> int:
    """Announce, connect to Temporal, serve until ``stop`` (or the server ends), drain, return 0."""
    from wf_initiation import _temporal
    from wf_initiation.ingress._connections import quiet_accept_failures

    quiet_accept_failures(asyncio.get_running_loop(), ingress.refusals)
    _announce(ingress, server, process)
    try:
        client = await asyncio.wait_for(ingress.client(), 10)
        print(f"Temporal at {client.service_client.config.target_host}: connected", flush=True)
    except (TimeoutError, _temporal.TemporalUnavailable) as exc:
        print(f"warning: {exc or 'Temporal did not answer within 10s'}; deliveries are answered 503 until it does",
              file=sys.stderr, flush=True)
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait([waiter, asyncio.create_task(server.wait())], return_when=asyncio.FIRST_COMPLETED)
    server.begin_stop()
    print("ingress stopping: finishing the requests in flight", flush=True)
    await server.stop()
    waiter.cancel()
    print("ingress stopped", flush=True)
    return 0


async def _start(ingress: Any, host: str | None, port: int | None, *, access_log: bool = False, fail: bool = True) -> Any:
    from wf_initiation.ingress._app import build_app
    from wf_initiation.ingress._connections import limits_for
    from wf_initiation.ingress._server import IngressServer, PortInUse

    config = ingress.config
    try:
        return await IngressServer.start(
            build_app(ingress), host or config.host, config.port if port is None else port, access_log=access_log,
            graceful_timeout=config.queue_timeout.total_seconds() + config.delivery_timeout.total_seconds() + GRACEFUL_MARGIN,
            limits=limits_for(config), refusals=ingress.refusals, gauge=ingress.metrics.connections,
        )
    except PortInUse as exc:
        if not fail:
            raise
        raise _user_error(str(exc)) from None


def _announce(ingress: Any, server: Any, process: str = "") -> None:
    table = ingress.table
    print(f"webhook ingress on {server.url}: POST {server.url}/hooks/{{workflow}}/{{entry}}; "
          f"health {server.url}/healthz, readiness {server.url}/readyz (one workflow: /readyz/{{workflow}}), "
          f"metrics {server.url}/metrics; at most {server.max_connections} connections{process}", flush=True)
    for path, route in sorted(table.by_path.items()):
        scheme = route.auth.scheme if route.auth is not None else "no auth configured: refuses every request"
        print(f"  {'/'.join(sorted(route.methods))} {server.url}{path} -> {route.label} ({scheme})", flush=True)


# ---------------------------------------------------------------------------- `wfi up` hooks
def add_up_arguments(parser: argparse.ArgumentParser) -> None:
    """``wfi up`` flags: the ingress starts beside the worker unless ``--no-ingress``."""
    from wf_initiation.cli._common import bind_port

    parser.add_argument("--ingress-port", type=bind_port, metavar="PORT",
                        help="Port of the webhook ingress (default: ingress.port of the deployment, else 8780).")
    parser.add_argument("--no-ingress", dest="ingress", action="store_false",
                        help="Do not start the webhook ingress beside the worker.")


async def beside_worker(args: argparse.Namespace, deployment: Any, flags: Any, stop: asyncio.Event) -> asyncio.Event:
    """Start the ingress for ``wfi up``, in a process of its own; return the event the worker must stop on.

    Its own process, so that connections, however many, take the ingress's file descriptors and
    never the worker's (whose workflow sandbox opens module files). It is restarted if it dies,
    and ends with ``wfi up`` (SIGKILLed too: it stops when its stdin closes). On ``stop`` the
    ingress drains first (its requests in flight need the worker to get their dispositions), then
    the returned event is set. Without an ingress (``wfi worker``, ``--no-ingress``) it is ``stop``
    itself. Problems of the ``ingress:`` section are printed and the rest is served (``wfi serve``
    refuses to start on them instead).
    """
    if not getattr(args, "ingress", False):
        return stop
    child = IngressProcess(deployment, flags, getattr(args, "ingress_port", None))
    child.start()
    worker_stop = _WorkerStop()

    async def drain_then_stop_worker() -> None:
        await stop.wait()
        await child.stop()
        worker_stop.set()

    worker_stop.drain = asyncio.create_task(drain_then_stop_worker(), name="ingress drain")
    return worker_stop


class _WorkerStop(asyncio.Event):
    """Set once the ingress drained; holds the draining task (the loop keeps only weak references)."""

    drain: asyncio.Task[None] | None = None


# ---------------------------------------------------------------------------- the ingress process of `wfi up`
CHILD = "from wf_initiation.cli.serve import child_main; child_main()"
EXIT_PORT_IN_USE = 3
RESTART_DELAYS = (1.0, 2.0, 5.0, 10.0, 30.0)
RESTART_RESET = 60.0  # a child that served this long before it died is restarted after the first delay
STOP_MARGIN = 10.0
# Liveness: a child that is alive but answers no GET /healthz (hung: a stopped process, a blocked loop)
# is killed, then restarted as a dead one is. /healthz is answered by the loop alone (no Temporal call).
LIVENESS_EVERY = 5.0
LIVENESS_TIMEOUT = 5.0
LIVENESS_FAILURES = 4
_SERVING = re.compile(r"webhook ingress on (http://\S+): POST")


class IngressProcess:
    """The ingress of ``wfi up`` as a child process: started, restarted when it dies, stopped.

    The child gets the deployment and the connection settings pickled on its stdin (an API key
    never appears on a command line), prints its own lines on a pipe this relays to stdout, and
    stops when its stdin closes.
    """

    def __init__(self, deployment: Any, flags: Any, port: int | None):
        self.deployment, self.flags, self.port = deployment, flags, port
        self._stopping = asyncio.Event()
        self._proc: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the child, and restart it whenever it dies until :meth:`stop`."""
        self._task = asyncio.create_task(self._supervise(), name="ingress process")

    async def stop(self) -> None:
        """Close the child's stdin (it drains and exits), kill it if it outlives its drain."""
        self._stopping.set()
        proc = self._proc
        if proc is not None and proc.returncode is None:
            assert proc.stdin is not None
            proc.stdin.close()
            config = self.deployment.ingress
            limit = GRACEFUL_MARGIN + STOP_MARGIN + (
                config.queue_timeout.total_seconds() + config.delivery_timeout.total_seconds() if config else 40.0)
            try:
                await asyncio.wait_for(proc.wait(), limit)
            except TimeoutError:
                print(f"the webhook ingress did not stop within {limit:g}s: killed", file=sys.stderr, flush=True)
                proc.kill()
        if self._task is not None:
            await self._task

    async def _supervise(self) -> None:
        loop, failures = asyncio.get_running_loop(), 0
        while True:
            began = loop.time()
            code = await self._run_once()
            if self._stopping.is_set() or code == EXIT_PORT_IN_USE:
                return
            failures = 1 if loop.time() - began > RESTART_RESET else failures + 1
            delay = RESTART_DELAYS[min(failures, len(RESTART_DELAYS)) - 1]
            print(f"warning: the webhook ingress exited ({_exit_reason(code)}); restarting it in {delay:g}s",
                  file=sys.stderr, flush=True)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
                return

    async def _run_once(self) -> int | str:
        """Run the child until it exits: its exit status, or why it could not be started."""
        import pickle

        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", CHILD, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                start_new_session=True,  # Ctrl-C reaches `wfi up`, which stops the ingress first
            )
        except OSError as exc:
            return f"could not be started: {exc.strerror or exc}"
        self._proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        with contextlib.suppress(ConnectionError):  # it died at once: its exit status says how
            proc.stdin.write(pickle.dumps({"deployment": self.deployment, "flags": self.flags, "port": self.port}))
            await proc.stdin.drain()
        watch: asyncio.Task[None] | None = None
        while line := await proc.stdout.readline():
            text = line.decode(errors="replace")
            if watch is None and (serving := _SERVING.search(text)):
                watch = asyncio.create_task(self._watch_liveness(proc, serving.group(1)), name="ingress liveness")
            with contextlib.suppress(OSError, ValueError):  # our own stdout gone: the child serves on
                sys.stdout.write(text)
                sys.stdout.flush()
        code = await proc.wait()
        if watch is not None:
            watch.cancel()
        return code

    async def _watch_liveness(self, proc: asyncio.subprocess.Process, url: str) -> None:
        """Kill the child when it answers no ``GET /healthz`` :data:`LIVENESS_FAILURES` times in a row
        (never while it drains): :meth:`_supervise` then restarts it."""
        failures = 0
        while proc.returncode is None:
            await asyncio.sleep(LIVENESS_EVERY)
            if self._stopping.is_set() or proc.returncode is not None:
                return
            failures = 0 if await _healthy(url, LIVENESS_TIMEOUT) else failures + 1
            if failures >= LIVENESS_FAILURES:
                print(f"warning: the webhook ingress (process {proc.pid}) answered no GET {url}/healthz within "
                      f"{LIVENESS_TIMEOUT:g}s, {failures} times in a row: it hangs; killing it", file=sys.stderr, flush=True)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                return


async def _healthy(url: str, timeout: float) -> bool:
    """Whether the ingress at ``url`` answers ``GET /healthz`` with 200 within ``timeout`` seconds."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, parts.port or 80)
            try:
                writer.write(f"GET /healthz HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n".encode())
                await writer.drain()
                status = await reader.readline()
            finally:
                writer.close()
    except (OSError, TimeoutError):
        return False
    return status.split(b" ")[1:2] == [b"200"]


def _exit_reason(code: int | str) -> str:
    if isinstance(code, str):
        return code
    return f"killed by signal {-code}" if code < 0 else f"exit status {code}"


def child_main() -> None:
    """The ingress process of ``wfi up`` (:class:`IngressProcess`)."""
    import pickle

    from wf_initiation.cli import exit_process

    settings = pickle.load(sys.stdin.buffer)
    exit_process(asyncio.run(_child(settings)))


async def _child(settings: dict[str, Any]) -> int:
    import os
    import threading

    from wf_initiation import _temporal
    from wf_initiation.ingress._server import PortInUse

    _temporal.configure_logging()
    deployment, flags = settings["deployment"], settings["flags"]
    ingress = _build(deployment, strict=False, connect=lambda: _temporal.connect(deployment.temporal, flags))
    stop = asyncio.Event()
    _temporal.stop_on_signals(stop)
    loop = asyncio.get_running_loop()

    def watch_parent() -> None:  # `wfi up` ended (or was killed): its end of the pipe closed
        sys.stdin.buffer.read()
        with contextlib.suppress(RuntimeError):  # this process is ending already: its loop is closed
            loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=watch_parent, name="wfi up watch", daemon=True).start()
    try:
        server = await _start(ingress, None, settings["port"], fail=False)
    except PortInUse as exc:
        print(f"warning: webhook ingress not started: {exc} (or --ingress-port / --no-ingress)", file=sys.stderr,
              flush=True)
        return EXIT_PORT_IN_USE
    return await _serve_until(ingress, server, stop, process=f" (process {os.getpid()})")
