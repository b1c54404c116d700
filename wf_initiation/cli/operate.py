"""`wfi operate ACTION`: apply an operator action to an activation (recorded in its operator log).

`--action-id` makes an action once-only, also across continue-as-new (without it the command
makes one up, so a retry by the client is still applied once). Prints `ACTION: ok|refused:
message`. Exit status: 0 applied; 1 refused by the activation (e.g. an unknown run key), no
activation, no worker, Temporal unreachable; 2 unknown action or bad flag.
"""

from __future__ import annotations

import argparse
from typing import Any, get_args

from wf_initiation.cli import EXIT_FAILED, EXIT_OK
from wf_initiation.cli._common import add_request_flags, emit, load, request
from wf_initiation.wire import OperatorRequest

ACTIONS: tuple[str, ...] = get_args(OperatorRequest.model_fields["action"].annotation)
FLAGS = (
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
FIELDS = ("action", "action_id", "entry", "cursor", "note", "choice", "count", "range_id", "run_key", "start", "end")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `operate`."""
    p = subparsers.add_parser(
        "operate", help="apply an operator action to an activation",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    add_request_flags(p)
    p.add_argument("--workflow", required=True, metavar="NAME", help="Workflow identity (the Workfile's name).")
    p.add_argument("action", choices=ACTIONS, metavar="ACTION", help=f"One of: {', '.join(ACTIONS)}.")
    for flag, field, text in FLAGS:
        p.add_argument(flag, dest=field, help=text)
    p.add_argument("--count", type=int, help="decide_overflow with admit_first: how many occurrences to admit.")
    p.set_defaults(handler=_operate, exit_hard=True)


def _operate(args: argparse.Namespace) -> int:
    deployment = load(args.deployment)
    operator_request = OperatorRequest(**{f: getattr(args, f) for f in FIELDS})

    async def apply(wfi: Any) -> Any:
        return await wfi.operate(args.workflow, operator_request)

    result = request(args, deployment, apply, workflow=args.workflow)
    emit(result.model_dump(mode="json"), f"{args.action}: {'ok' if result.ok else 'refused'}: {result.message}", args.json)
    return EXIT_OK if result.ok else EXIT_FAILED
