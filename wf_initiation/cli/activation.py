"""`wfi activate WORKFILE --deployment FILE`: start or rebind the activation of a Workfile.

Prints `activated` (the activation was not running: it is now), `unchanged` (it runs this very
binding already: nothing changed) or `rebound` (it ran another binding: this one takes over, the
previous activation ids listed). Exit status: 0 done; 1 invalid Workfile or deployment, Temporal
unreachable, no worker; 3 unsupported (a capability the deployment does not claim, CAP-7).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from wf_initiation._temporal import is_namespace_not_found
from wf_initiation.cli import EXIT_FAILED, EXIT_OK, EXIT_UNSUPPORTED
from wf_initiation.cli._common import add_request_flags, emit, load, request
from wf_initiation.core._diagnostics import Diagnostic, DiagnosticError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `activate`."""
    p = subparsers.add_parser(
        "activate", help="activate a Workfile (idempotent; a changed binding rebinds)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    p.add_argument("workfile", metavar="WORKFILE", help="The Workfile to activate.")
    add_request_flags(p)
    p.set_defaults(handler=_activate, exit_hard=True)


async def activate_one(wfi: Any, spec: Any) -> tuple[str, Any]:
    """Activate `spec`; return what happened (`activated`, `unchanged`, `rebound`) and the result.

    Whether the activation ran before is read just before the call: two first activations of the
    same Workfile at the same moment may both say `activated` (one activation exists either way).
    """
    running = await _running(wfi, spec.workflow)
    result = await wfi.activate(spec)
    if result.outcome == "rebound":
        return "rebound", result
    return ("unchanged" if running else "activated"), result


async def _running(wfi: Any, workflow: str) -> bool:
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError, RPCStatusCode

    try:
        description = await wfi.handle(workflow).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND and not is_namespace_not_found(exc):
            return False
        raise
    return description.status == WorkflowExecutionStatus.RUNNING


def render_activation(workflow: str, word: str, result: Any) -> str:
    """`activated NAME: ID`; a rebind adds the previous activation ids."""
    line = f"{word} {workflow}: {result.activation_id}"
    if word == "rebound" and result.previous:
        line += f" (previous: {', '.join(result.previous)})"
    return line


def _activate(args: argparse.Namespace) -> int:
    from wf_initiation.client import build_spec

    deployment = load(args.deployment)
    try:
        spec = build_spec(args.workfile, deployment)
    except DiagnosticError as exc:
        return _refused(exc.diagnostics, args)
    word, result = request(args, deployment, lambda wfi: activate_one(wfi, spec), workflow=spec.workflow)
    data = {"workflow": spec.workflow, "activation_id": result.activation_id, "outcome": word,
            "previous": list(result.previous)}
    emit(data, render_activation(spec.workflow, word, result), args.json)
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
