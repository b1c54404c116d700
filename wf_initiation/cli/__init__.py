"""`wfi`: the command line of wf-initiation.

Each command group lives in its own module with a ``register(subparsers)`` function; the chosen
sub-parser's ``handler(args) -> int`` runs. Exit codes: 0 ok, 1 invalid input / failure,
2 usage error, 3 unsupported (validate). User errors print a message, never a traceback.

A sub-parser that talks to Temporal sets ``exit_hard=True``: after its handler, :func:`main` ends
the process with :func:`exit_process`, because a process that used the Temporal runtime can abort
at interpreter exit (sdk-python#300, exit 134) and the exit status must be the command's.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import NoReturn

_GROUPS = (
    "wf_initiation.cli.validate",
    "wf_initiation.cli.schedule",
    "wf_initiation.cli._common",
    "wf_initiation.cli.conformance",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors exit 2 with a hint, like argparse
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="wfi", description="Start Temporal workflow runs from schedules, events and polled sources.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in _GROUPS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return 2
    code = _dispatch(args)
    if getattr(args, "exit_hard", False):
        exit_process(code)
    return code


def _dispatch(args: argparse.Namespace) -> int:
    try:
        return int(args.handler(args))
    except KeyboardInterrupt:
        return 130
    except UserError as exc:
        print(f"wfi {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code


def exit_process(code: int) -> NoReturn:
    """Flush stdout/stderr and end the process now with ``code``, skipping interpreter finalisation.

    After the Temporal runtime was used the interpreter may abort at exit (sdk-python#300, exit
    134); this keeps the exit status the command's. Only for commands run as a process.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe must not change the exit status
            pass
    os._exit(code)


class UserError(Exception):
    """A problem the user can fix; printed without a traceback."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


if __name__ == "__main__":
    sys.exit(main())
