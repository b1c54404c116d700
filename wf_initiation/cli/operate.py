"""`wfi operate ACTION`: apply an operator action to an activation (recorded in its operator log).

One sub-command per action, each with exactly that action's flags, derived from the action models in
`wf_initiation.wire` (`wfi operate set_cursor --help`). `--action-id` makes an action once-only, also
across continue-as-new (without it the command makes one up, so a retry by the client is still
applied once). Prints `ACTION: ok|refused: message`. A `backfill` or `decide_overflow` larger than one
workflow task admits is worked off as a job: the command then shows its progress until it is done
(or `--timeout`). A `redrive` lists the events it selects on every shard (or `--shard`), reads the
deferred signals' payloads back from the activation's history and sends them in pages of at most 100
events, printing each event's outcome. Exit status: 0 applied (a `redrive`: every selected event got
a disposition); 1 refused by the activation (e.g. an unknown run key) or its job refused, a re-driven
event not offered or still invalid or deferred, no activation, no worker, Temporal unreachable; 2
unknown action or bad flag.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import types
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from wf_initiation.cli import EXIT_FAILED, EXIT_OK
from wf_initiation.cli._common import EXIT_USAGE, add_request_flags, load, progress, request
from wf_initiation.wire import ACTIONS, OperatorRequest, Redrive

_COMMON = ("--workflow",)  # besides the request flags: accepted before or after the action


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `operate` and one sub-command per action of the union."""
    p = subparsers.add_parser(
        "operate", help="apply an operator action to an activation",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    _add_common(p)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True,
                               help=", ".join(_name(m) for m in ACTIONS) + " (ACTION --help: its flags)")
    for model in ACTIONS:
        sub = actions.add_parser(_name(model), help=_summary(model), description=_doc(model))
        for name, info in model.model_fields.items():
            if name != "action" and not _client_filled(info):
                _add_flag(sub, name, info)
        if model is Redrive:
            sub.add_argument("--shard", type=int, metavar="K", help="Only this shard's events (numbers are per shard; "
                             "default: every shard's).")
        _add_common(sub, after_action=True)
    p.set_defaults(handler=_operate, exit_hard=True)


def _add_common(parser: argparse.ArgumentParser, *, after_action: bool = False) -> None:
    """The connection/request flags and --workflow. On an action's sub-command they are optional and
    default to nothing, so that a flag given before the action is not overwritten (argparse copies a
    sub-command's defaults over the parent's values)."""
    before = len(parser._actions)  # noqa: SLF001 - argparse offers no public way to change these
    add_request_flags(parser)
    parser.add_argument("--workflow", metavar="NAME", help="Workflow identity (the Workfile's name).")
    for action in parser._actions[before:]:  # noqa: SLF001
        action.required = False  # checked in _operate: the flag may come on either side of the action
        if after_action:
            if action.help and "%(" in action.help:  # render the default while it is still there
                action.help = action.help % {**vars(action), "prog": parser.prog}
            action.default = argparse.SUPPRESS


def _name(model: type[BaseModel]) -> str:
    return model.model_fields["action"].default


def _summary(model: type[BaseModel]) -> str:
    """The action's first sentence in the style of a command list: lower case, no closing period."""
    doc = _doc(model).split(". ")[0].rstrip(".")
    return doc[:1].lower() + doc[1:]


def _doc(model: type[BaseModel]) -> str:
    return (model.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")


def _client_filled(info: FieldInfo) -> bool:
    """A field the client fills in itself (a re-drive's payloads, read back from history): no flag."""
    return isinstance(info.json_schema_extra, dict) and bool(info.json_schema_extra.get("client"))


def _add_flag(parser: argparse.ArgumentParser, name: str, info: FieldInfo) -> None:
    """``--name-with-dashes`` for a field: its type, its choices (a Literal), required when the field is."""
    base, choices = _base_type(info.annotation)
    if base is bool:
        parser.add_argument("--" + name.replace("_", "-"), dest=name, action="store_true", default=None,
                            help=info.description)
        return
    kwargs: dict[str, Any] = {"dest": name, "help": info.description, "required": info.is_required(),
                              "metavar": name.upper()}
    if choices:
        kwargs["choices"] = choices
        kwargs["metavar"] = "|".join(choices)
    if base is int:
        kwargs["type"] = int
    parser.add_argument("--" + name.replace("_", "-"), **kwargs)


def _base_type(annotation: Any) -> tuple[Any, list[str]]:
    """The flag's Python type and choices: ``str | None`` -> (str, []); ``Literal["a", "b"]`` -> (str, [a, b])."""
    if get_origin(annotation) in (Union, types.UnionType):
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    if get_origin(annotation) is Literal:
        return str, [str(a) for a in get_args(annotation)]
    return annotation, []


def _operate(args: argparse.Namespace) -> int:
    missing = [flag for flag in ("--deployment", *_COMMON) if getattr(args, flag[2:].replace("-", "_"), None) is None]
    if missing:
        print(f"wfi operate: error: the following arguments are required: {', '.join(missing)}", file=sys.stderr)
        return EXIT_USAGE
    model = next(m for m in ACTIONS if _name(m) == args.action)
    fields = {name: getattr(args, name, None) for name in model.model_fields if name != "action"}
    try:
        operator_request = OperatorRequest.model_validate({"action": args.action, **{k: v for k, v in fields.items() if v is not None}})
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(p) for p in problem["loc"][1:]) or args.action
        print(f"wfi operate {args.action}: error: {where}: {problem['msg']}", file=sys.stderr)
        return EXIT_USAGE
    deployment = load(args.deployment)
    started = time.monotonic()

    async def apply(wfi: Any) -> tuple[Any, dict[str, Any] | None]:
        follow = args.action in JOB_ACTIONS
        before = await _job_ids(wfi, args.workflow) if follow else set()
        if args.action == "redrive":
            result = await wfi.redrive(args.workflow, operator_request.root, shard=getattr(args, "shard", None))
        else:
            result = await wfi.operate(args.workflow, operator_request)
        if not args.json:
            print(_line(args.action, result), flush=True)
            for event in result.redriven or []:
                print(_event_line(event), flush=True)
        if not follow or not result.ok:
            return result, None
        left = args.timeout - (time.monotonic() - started) - 1.0  # the whole command stays within --timeout
        return result, await _follow(wfi, args, before, left)

    result, job = request(args, deployment, apply, workflow=args.workflow)
    if args.json:
        print(json.dumps({**result.model_dump(mode="json"), **({"job": job} if job is not None else {})}, indent=2))
    refused = not result.ok or (job is not None and job["status"] == "refused")
    left = any(e.outcome in STILL_KEPT for e in result.redriven or [])
    return EXIT_FAILED if refused or left else EXIT_OK


def _line(action: str, result: Any) -> str:
    return f"{action}: {'ok' if result.ok else 'refused'}: {result.message}"


# A re-driven event with one of these outcomes was not offered, or is still kept: there is more to do.
STILL_KEPT = frozenset({"not_offered", "invalid", "deferred"})


def _event_line(event: Any) -> str:
    """``  #3 invalid hook/m-1: accepted  run=...`` and, when there is one, why."""
    ident = f"{event.entry}/{event.delivery_id}" if event.delivery_id else f"{event.entry} (no delivery id)"
    line = f"  #{event.number} {event.kind} {ident}: {event.outcome.replace('_', ' ')}"
    if event.run_key:
        line += f"  run={event.run_key}"
    return line + (f": {event.message}" if event.message else "")


# Actions whose large ranges the activation works off over several workflow tasks, as a job.
JOB_ACTIONS = ("backfill", "decide_overflow")
FOLLOW_EVERY = 2.0  # seconds between two reads of a job's progress (the full state: up to ~1 MB)


async def _job_ids(wfi: Any, workflow: str) -> set[str]:
    return {job["job_id"] for job in _jobs(await wfi.state(workflow))}


def _jobs(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [job for schedule in state.get("schedules", {}).values() for job in schedule.get("jobs", [])]


async def _follow(wfi: Any, args: argparse.Namespace, before: set[str], seconds: float) -> dict[str, Any] | None:
    """Show the progress of the job the action created (None when it created none: all admitted at
    once) until it is done, refused, or ``seconds`` have passed."""
    deadline, shown = time.monotonic() + seconds, ""
    while True:
        jobs = [job for job in _jobs(await wfi.state(args.workflow)) if job["job_id"] not in before]
        if not jobs:
            return None
        job = jobs[0]
        line = _job_line(job)
        if line != shown:
            progress(args, line)
            shown = line
        if job["status"] in ("done", "refused"):
            return job
        if time.monotonic() + FOLLOW_EVERY > deadline:
            progress(args, f"  still {job['status']} after {args.timeout:g}s (--timeout); it goes on: follow it with "
                           f"`wfi state --workflow {args.workflow} --deployment {args.deployment}` (schedules.{job['entry']}.jobs)")
            return job
        await asyncio.sleep(FOLLOW_EVERY)


def _job_line(job: dict[str, Any]) -> str:
    """``  backfill-12: admitting: 300 of 3,000 (10%): 300 admitted, 0 already had a run, 0 otherwise``."""
    if job["status"] == "counting":
        return f"  {job['job_id']}: counting the occurrences of {job['entry']} from {job['first']} to {job['last']}"
    settled = job["admitted"] + job["duplicates"] + job["other"]
    share = f" ({100 * settled // job['total']}%)" if job["total"] else ""
    line = (f"  {job['job_id']}: {job['status']}: {settled:,} of {job['total']:,}{share}: {job['admitted']:,} admitted, "
            f"{job['duplicates']:,} already had a run or a disposition, {job['other']:,} otherwise")
    return line + (f"; {job['message']}" if job.get("message") and job["status"] in ("done", "refused") else "")
