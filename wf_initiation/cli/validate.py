"""`wfi validate WORKFILE... [--claims FILE_OR_LIST] [--deployment FILE] [--json]`.

With `--deployment`, each Workfile is also checked exactly as `wfi activate` would activate it
with that deployment (its settings, inputs, overlay and connections, the evaluated configuration,
the claimed capabilities unless `--claims` is given): what `validate` accepts, `activate`
accepts. A deployment file that cannot be loaded makes every file invalid.

Exit status: 0 every file valid (and supported, when `--claims` is given); 1 any file invalid;
3 some file unsupported and none invalid; 2 usage error (including an unreadable claims value, and
no Workfile among the files). A deployment file among them (so `wfi validate examples/*.yaml`
works) is not a Workfile: it is reported as `skipped` and counts for nothing.

`--json` always prints one JSON array with one object per file, in argument order:
`{"file", "status", "workflow", "required_capabilities", "diagnostics": [{"code", "message",
"entry", "path", "line", "capability"}]}`; `status` is valid, invalid, unsupported or skipped.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

from wf_initiation.cli._skipped import Skipped, validate_one
from wf_initiation.core import Catalog, ClaimsError, Diagnostic, DiagnosticError, ValidationResult, read_claims
from wf_initiation.core.activation import activation_problems, manifest_resolver
from wf_initiation.core.deployment import Deployment, load_deployment

EXIT_VALID, EXIT_INVALID, EXIT_USAGE, EXIT_UNSUPPORTED = 0, 1, 2, 3


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``validate`` command to the ``wfi`` dispatcher."""
    parser = subparsers.add_parser(
        "validate",
        help="validate Workfiles (and classify support against claimed capabilities)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("workfiles", nargs="+", metavar="WORKFILE", type=pathlib.Path, help="The Workfiles to validate.")
    parser.add_argument(
        "--claims",
        type=_claims,
        metavar="FILE_OR_LIST",
        help="Capabilities the target deployment claims: a claims file (as written by "
        "`wfi conformance run`, or one capability per line) or a comma-separated list.",
    )
    parser.add_argument(
        "--deployment",
        metavar="FILE",
        help="Also check each Workfile as `wfi activate --deployment FILE` would activate it.",
    )
    parser.add_argument("--json", action="store_true", help="Print a JSON array with one object per file.")
    parser.set_defaults(handler=run)


def _claims(value: str) -> list[str]:
    """An argparse type: the capabilities a ``--claims`` list or file names."""
    try:
        return read_claims(value)
    except ClaimsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    """Validate every file, print the results, return the exit status."""
    from wf_initiation.cli import UserError

    claims = args.claims
    catalog = Catalog.default()
    deployment, problems = _deployment(args.deployment)
    if deployment is not None and claims is None:
        claims = deployment.capabilities
    resolve = manifest_resolver(deployment, catalog) if deployment is not None else None
    results = [validate_one(path, catalog, claims, resolve) for path in args.workfiles]
    if args.deployment is not None:
        results = [against_deployment(r, deployment, problems, catalog) for r in results]
    if args.json:
        print(json.dumps([r.summary() for r in results], indent=2))
    else:
        sys.stdout.write("".join(render_text(r) for r in results))
    if all(isinstance(r, Skipped) for r in results):
        raise UserError("no Workfile among the files (deployment files are skipped)", exit_code=EXIT_USAGE)
    return exit_status([r for r in results if isinstance(r, ValidationResult)])


def _deployment(path: str | None) -> tuple[Deployment | None, list[Diagnostic]]:
    if path is None:
        return None, []
    try:
        return load_deployment(path), []
    except DiagnosticError as exc:
        return None, [d.model_copy(update={"message": f"{path}: {d.message}"}) for d in exc.diagnostics]


def against_deployment(
    result: ValidationResult | Skipped, deployment: Deployment | None, problems: list[Diagnostic], catalog: Catalog
) -> ValidationResult | Skipped:
    """``result`` made invalid by what ``wfi activate`` would refuse with this deployment."""
    if isinstance(result, Skipped) or result.workfile is None or result.status == "unsupported":
        return result
    found = problems if deployment is None else activation_problems(result.workfile, deployment, catalog)
    if not found:
        return result
    return result.model_copy(update={"status": "invalid", "diagnostics": [*result.diagnostics, *found]})


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
