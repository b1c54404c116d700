"""`wfi activate WORKFILE --deployment FILE`: start or rebind the activation of a Workfile.

Prints `activated` (the activation was not running: it is now), `unchanged` (it runs this very
binding already: nothing changed) or `rebound` (it ran another binding: this one takes over, the
previous activation ids listed). After an activation workflow that was terminated (or failed, timed
out), `activated` is followed by what holds: its complete state recovered from its history, so every
delivery it accepted is `duplicate` when redelivered (a cancelled one deactivated itself and is
activated again from its final state). Exit status: 0 done; 1 invalid Workfile or deployment, Temporal
unreachable, no worker; 3 unsupported (a capability the deployment does not claim, CAP-7).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

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


async def activate_one(wfi: Any, spec: Any) -> Any:
    """Activate ``spec``; the ``Activation`` says what happened (``activated``, ``unchanged``, ``rebound``).

    Whether the activation ran before is read just before the call: two first activations of the
    same Workfile at the same moment may both say ``activated`` (one activation exists either way).
    """
    return await wfi.activate(spec)


def render_activation(result: Any) -> str:
    """``activated NAME: ID``; a rebind adds the previous activation ids; a restart what holds."""
    line = f"{result.outcome} {result.workflow}: {result.activation_id}"
    if result.outcome == "rebound" and result.previous:
        line += f" (previous: {', '.join(result.previous)})"
    return line + (f"\n  {result.note}" if result.note else "")


def _activate(args: argparse.Namespace) -> int:
    from wf_initiation.specs import build_spec

    deployment = load(args.deployment)
    try:
        spec = build_spec(args.workfile, deployment)
    except DiagnosticError as exc:
        return _refused(exc.diagnostics, args)
    result = request(args, deployment, lambda wfi: activate_one(wfi, spec), workflow=spec.workflow)
    emit(result.model_dump(mode="json"), render_activation(result), args.json)
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
