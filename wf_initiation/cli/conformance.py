"""`wfi conformance`: run the conformance kit against a live deployment, or list its cases."""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import signal
import sys
import tempfile
from typing import TYPE_CHECKING, Any

from wf_initiation.cli._common import add_connection_flags, connect_flags, seconds
from wf_initiation.core._diagnostics import DiagnosticError

if TYPE_CHECKING:
    from wf_initiation.conformance.kit import CaseInfo
    from wf_initiation.conformance.report import Report


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``conformance run`` and ``conformance list`` to the ``wfi`` parser."""
    parser = subparsers.add_parser(
        "conformance", help="check a deployment against the spec and write its claims",
        description="The black-box conformance kit (`wfi help conformance`): run its cases against a live deployment "
        "through the CLI and client only, or list them.")
    sub = parser.add_subparsers(dest="conformance_command", metavar="SUBCOMMAND", required=True)

    run = sub.add_parser(
        "run", help="run the cases against a deployment; write report.json, report.md, claims.json",
        description="Run the conformance cases against the deployment's Temporal and worker (which must be running) "
        "and write report.json, report.md and claims.json (accepted by `wfi validate --claims`). Exit status: 0 every "
        "case passed, 1 a case failed or the deployment file is invalid, 2 usage error.")
    add_connection_flags(run)
    run.add_argument("--out", default="conformance-report", metavar="DIR", help="Report directory (default: %(default)s).")
    run.add_argument("--case", action="append", default=[], metavar="ID", help="Run only this case (repeatable).")
    run.add_argument(
        "--capability", action="append", default=[], metavar="CAP",
        help="Run only this capability's cases, plus the core cases (repeatable). "
        "Default: the capabilities the deployment declares, plus core.",
    )
    run.add_argument("--timeout", type=seconds, default=120.0, metavar="SECONDS", help="Per-case time limit (default: %(default)g).")
    run.add_argument("--json", action="store_true", help="Print the report as JSON instead of a summary.")
    run.set_defaults(handler=_run, exit_hard=True)

    listing = sub.add_parser("list", help="list the cases with their capability and clauses",
                             description="List the conformance cases: id, capability, the spec clauses each proves, title.")
    listing.add_argument("--json", action="store_true", help="Print a JSON array.")
    listing.set_defaults(handler=_list)


def _cases() -> tuple[CaseInfo, ...]:
    from wf_initiation.conformance.cases import MODULES
    from wf_initiation.conformance.kit import collect

    return collect(MODULES)


def _list(args: argparse.Namespace) -> int:
    cases = _cases()
    if args.json:
        rows = [{"id": c.id, "capability": c.capability, "clauses": list(c.clauses), "title": c.title} for c in cases]
        print(json.dumps(rows, indent=2))
        return 0
    for c in cases:
        print(f"{c.id}\n    {c.capability}  {', '.join(c.clauses)}\n    {c.title}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from wf_initiation.cli import UserError
    from wf_initiation.conformance.kit import Interrupted, Target, run_cases, select
    from wf_initiation.conformance.report import progress_line, write_report

    out = sys.stderr if args.json else sys.stdout  # the progress; with --json stdout holds the report alone

    cases = _cases()
    with tempfile.TemporaryDirectory(prefix="wfi-conformance-") as workdir:
        try:
            target = Target.from_file(args.deployment, workdir, flags=connect_flags(args))
        except DiagnosticError as exc:
            for d in exc.diagnostics:
                print(d.render(args.deployment), file=sys.stderr)
            return 1
        capabilities = args.capability or ([] if args.case else [*target.deployment.capabilities])
        try:
            only = select(cases, ids=args.case, capabilities=capabilities)
        except ValueError as exc:
            raise UserError(str(exc), exit_code=2) from None
        print(f"running {len(only)} case(s) against {args.deployment} (each within {args.timeout:g}s)", file=out, flush=True)
        received: list[int] = []
        try:
            report = asyncio.run(_until_signalled(received, run_cases(
                target, cases, only=only, timeout=args.timeout,
                on_result=lambda result: print(progress_line(result), file=out, flush=True))))
        except Interrupted as exc:
            name = signal.Signals(received[0]).name if received else "a cancellation"
            print(f"wfi conformance run: stopped by {name}: {exc}", file=sys.stderr, flush=True)
            return 128 + (received[0] if received else signal.SIGINT)
        except (asyncio.CancelledError, KeyboardInterrupt):  # a second signal while cleaning up
            print(f"wfi conformance run: stopped again while cleaning up: workflows whose id starts with {target.tag} "
                  f"(or wfi-activation:{target.tag}) may still run: `temporal workflow terminate --query "
                  f"\"WorkflowId STARTS_WITH '{target.tag}'\"`", file=sys.stderr, flush=True)
            return 128 + (received[-1] if received else signal.SIGINT)
    paths = write_report(report, pathlib.Path(args.out).resolve())
    if args.json:
        print(report.model_dump_json(indent=2))
        print(_totals(report), file=out, flush=True)
    else:
        print(_summary(report, paths["report.md"]))
    return 0 if report.ok else 1


async def _until_signalled(received: list[int], run: Any) -> Any:
    """Await ``run``; SIGINT or SIGTERM cancels it (the kit then deactivates what the running case
    started and raises ``Interrupted``); each signal is appended to ``received``."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()

    def cancel(signum: int) -> None:
        received.append(signum)
        if len(received) == 1:
            print(f"{signal.Signals(signum).name}: deactivating what the running case started "
                  "(again to stop at once)", file=sys.stderr, flush=True)
        task.cancel()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, cancel, signum)
    return await run


def _totals(report: Report) -> str:
    """``41 case(s) in 5m12s: 40 passed, 1 failed; slowest: ...``."""
    from wf_initiation.conformance.report import seconds_text

    ran = [c for cap in report.capabilities for c in cap.cases if c.outcome != "skipped"]
    failed = sum(c.outcome != "passed" for c in ran)
    slowest = sorted(ran, key=lambda c: c.duration_s, reverse=True)[:3]
    line = f"{len(ran)} case(s) in {seconds_text(report.duration_s)}: {len(ran) - failed} passed, {failed} failed"
    return line + ("; slowest: " + ", ".join(f"{c.id} ({seconds_text(c.duration_s)})" for c in slowest) if slowest else "")


def _summary(report: Report, markdown_path: pathlib.Path) -> str:
    from wf_initiation.conformance.report import seconds_text

    lines = []
    for cap in report.capabilities:
        mark = "claimed" if cap.claimed else "not claimed"
        lines.append(f"{cap.capability}: {cap.passed} passed, {cap.failed} failed, {cap.skipped} not run ({mark})"
                     + (f" in {seconds_text(cap.duration_s)}" if cap.passed or cap.failed else ""))
    for failure in report.failures():
        first = failure.message.splitlines()[0] if failure.message else ""
        lines.append(f"  FAILED {failure.id} [{', '.join(failure.clauses)}]: {first}")
    lines.append(_totals(report))
    lines.append(f"claims: {', '.join(report.claims) or 'none'}")
    lines.append(f"report: {markdown_path}")
    return "\n".join(lines)
