"""``wfi serve``: the HTTP webhook ingress, and the hooks that let ``wfi up`` run it beside the worker.

    wfi serve --deployment deploy.yaml [--host 0.0.0.0] [--port 8780]

SIGINT/SIGTERM stop accepting connections and finish every request in flight before exiting.
Exit codes: 0 stopped, 1 the deployment or its ``ingress:`` section cannot be served (one line per
problem), or the port is in use. Keys and senders: ``docs/webhooks.md``.
"""

from __future__ import annotations

import argparse
import asyncio
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
    _announce(ingress, server)
    try:
        client = await asyncio.wait_for(ingress.client(), 10)
        print(f"Temporal at {client.service_client.config.target_host}: connected", flush=True)
    except (asyncio.TimeoutError, _temporal.TemporalUnavailable) as exc:
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
    from wf_initiation.ingress._server import IngressServer, PortInUse

    config = ingress.config
    try:
        return await IngressServer.start(
            build_app(ingress), host or config.host, config.port if port is None else port, access_log=access_log,
            graceful_timeout=config.queue_timeout.total_seconds() + config.delivery_timeout.total_seconds() + GRACEFUL_MARGIN,
        )
    except PortInUse as exc:
        if not fail:
            raise
        raise _user_error(str(exc)) from None


def _announce(ingress: Any, server: Any) -> None:
    table = ingress.table
    print(f"webhook ingress on {server.url}: POST {server.url}/hooks/{{workflow}}/{{entry}}; "
          f"health {server.url}/healthz, readiness {server.url}/readyz, metrics {server.url}/metrics", flush=True)
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


async def beside_worker(args: argparse.Namespace, deployment: Any, client: Any, stop: asyncio.Event) -> asyncio.Event:
    """Start the ingress for ``wfi up``; return the event the worker must stop on.

    On ``stop`` the ingress drains first (its requests in flight need the worker to get their
    dispositions), then the returned event is set. Without an ingress (``wfi worker``,
    ``--no-ingress``) it is ``stop`` itself. Problems of the ``ingress:`` section are printed and
    the rest is served (``wfi serve`` refuses to start on them instead).
    """
    from wf_initiation.ingress._server import PortInUse

    if not getattr(args, "ingress", False):
        return stop
    ingress = _build(deployment, strict=False, client=client)
    try:
        server = await _start(ingress, None, getattr(args, "ingress_port", None), fail=False)
    except PortInUse as exc:  # the worker is the main job of `wfi up`: it runs anyway
        print(f"warning: webhook ingress not started: {exc} (or --ingress-port / --no-ingress)", file=sys.stderr, flush=True)
        return stop
    _announce(ingress, server)
    worker_stop = _WorkerStop()

    async def drain_then_stop_worker() -> None:
        await stop.wait()
        server.begin_stop()
        print("ingress stopping: finishing the requests in flight", flush=True)
        await server.stop()
        worker_stop.set()

    worker_stop.drain = asyncio.create_task(drain_then_stop_worker(), name="ingress drain")
    return worker_stop


class _WorkerStop(asyncio.Event):
    """Set once the ingress drained; holds the draining task (the loop keeps only weak references)."""

    drain: asyncio.Task[None] | None = None
