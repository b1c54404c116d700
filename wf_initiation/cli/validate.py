"""`wfi validate WORKFILE... [--claims FILE_OR_LIST] [--json]`.

Exit status: 0 every file valid (and supported, when ``--claims`` is given); 1 any file invalid;
3 some file unsupported and none invalid; 2 usage error (including an unreadable claims value, and
no Workfile among the files). A deployment file among them (so ``wfi validate examples/*.yaml``
works) is not a Workfile: it is reported as ``skipped`` and counts for nothing.

``--json`` always prints one JSON array with one object per file, in argument order:
``{"file", "status", "workflow", "required_capabilities", "diagnostics": [{"code", "message",
"entry", "path", "line", "capability"}]}``; ``status`` is valid, invalid, unsupported or skipped.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

from wf_initiation.cli._skipped import Skipped, validate_one
from wf_initiation.core import Catalog, ClaimsError, ValidationResult, read_claims

EXIT_VALID, EXIT_INVALID, EXIT_USAGE, EXIT_UNSUPPORTED = 0, 1, 2, 3


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``validate`` command to the ``wfi`` dispatcher."""
    parser = subparsers.add_parser(
        "validate",
        help="validate Workfiles (and classify support against claimed capabilities)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("workfiles", nargs="+", metavar="WORKFILE", type=pathlib.Path, help="Workfile(s) to validate")
    parser.add_argument(
        "--claims",
        metavar="FILE_OR_LIST",
        help="capabilities the target deployment claims: a claims file (as written by "
        "`wfi conformance run`, or one capability per line) or a comma-separated list",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON array with one object per file")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Validate every file, print the results, return the exit status."""
    from wf_initiation.cli import UserError

    try:
        claims = read_claims(args.claims) if args.claims is not None else None
    except ClaimsError as exc:
        raise UserError(str(exc), exit_code=EXIT_USAGE) from None
    catalog = Catalog.default()
    results = [validate_one(path, catalog, claims) for path in args.workfiles]
    if args.json:
        print(json.dumps([r.summary() for r in results], indent=2))
    else:
        sys.stdout.write("".join(render_text(r) for r in results))
    if all(isinstance(r, Skipped) for r in results):
        raise UserError("no Workfile among the files (deployment files are skipped)", exit_code=EXIT_USAGE)
    return exit_status([r for r in results if isinstance(r, ValidationResult)])


def render_text(result: ValidationResult | Skipped) -> str:
    """``file: status`` then one line per diagnostic, with its line number."""
    if isinstance(result, Skipped):
        return f"{result.file}: skipped ({result.reason})\n"
    head = f"{result.file}: {result.status}"
    if result.status != "invalid" and result.required_capabilities:
        head += f" (requires {', '.join(result.required_capabilities)})"
    lines = [head] + [f"  {d.render(result.file)}" for d in result.diagnostics]
    return "\n".join(lines) + "\n"


def exit_status(results: list[ValidationResult]) -> int:
    """1 if any invalid, else 3 if any unsupported, else 0."""
    statuses = {r.status for r in results}
    if "invalid" in statuses:
        return EXIT_INVALID
    return EXIT_UNSUPPORTED if "unsupported" in statuses else EXIT_VALID
