"""`wfi operate ACTION`: apply an operator action to an activation (recorded in its operator log).

One sub-command per action, each with exactly that action's flags, derived from the action models in
`wf_initiation.wire` (`wfi operate set_cursor --help`). `--action-id` makes an action once-only, also
across continue-as-new (without it the command makes one up, so a retry by the client is still
applied once). Prints `ACTION: ok|refused: message`. Exit status: 0 applied; 1 refused by the
activation (e.g. an unknown run key), no activation, no worker, Temporal unreachable; 2 unknown
action or bad flag.
"""

from __future__ import annotations

import argparse
import sys
import types
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from wf_initiation.cli import EXIT_FAILED, EXIT_OK
from wf_initiation.cli._common import EXIT_USAGE, add_request_flags, emit, load, request
from wf_initiation.wire import ACTIONS, OperatorRequest

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
        sub = actions.add_parser(_name(model), help=_doc(model), description=_doc(model))
        for name, info in model.model_fields.items():
            if name != "action":
                _add_flag(sub, name, info)
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


def _doc(model: type[BaseModel]) -> str:
    return (model.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")


def _add_flag(parser: argparse.ArgumentParser, name: str, info: FieldInfo) -> None:
    """``--name-with-dashes`` for a field: its type, its choices (a Literal), required when the field is."""
    base, choices = _base_type(info.annotation)
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

    async def apply(wfi: Any) -> Any:
        return await wfi.operate(args.workflow, operator_request)

    result = request(args, deployment, apply, workflow=args.workflow)
    emit(result.model_dump(mode="json"), f"{args.action}: {'ok' if result.ok else 'refused'}: {result.message}", args.json)
    return EXIT_OK if result.ok else EXIT_FAILED
