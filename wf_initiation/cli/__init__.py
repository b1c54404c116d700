"""`wfi`: the command line of wf-initiation. Reference with every flag and exit status: docs/cli.md
(`wfi help cli`).

One module per group of verbs, each with a ``register(subparsers)`` function that adds its
sub-parsers; the chosen sub-parser's ``handler(args) -> int`` runs. To add a group, write the module
and add its import path and command names to :data:`GROUPS` (one line). A command line that starts
with a command registers only that command's group (a process per command, as scripts and the
conformance kit run ``wfi``, imports only what that command uses). Exit codes: 0 ok, 1 failed, 2 usage error or
input refused before sending, 3 unsupported (validate, activate), 130 interrupted, 141 output pipe
closed. A problem the user can fix prints one line, never a traceback (``WFI_DEBUG=1`` shows the
traceback of an unexpected error).

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

from wf_initiation.errors import WfiError

GROUPS: dict[str, tuple[str, ...]] = {  # module -> the commands it registers (checked by a test)
    "wf_initiation.cli.validate": ("validate",),
    "wf_initiation.cli.schedule": ("schedule",),
    "wf_initiation.cli.server": ("up", "worker"),
    "wf_initiation.cli.activation": ("activate",),
    "wf_initiation.cli.deliver": ("deliver",),
    "wf_initiation.cli.state": ("state",),
    "wf_initiation.cli.operate": ("operate",),
    "wf_initiation.cli.deactivate": ("deactivate",),
    "wf_initiation.cli.serve": ("serve",),
    "wf_initiation.cli.conformance": ("conformance",),
    "wf_initiation.cli.help": ("help",),
    "wf_initiation.cli.wire": ("wire",),
}

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNSUPPORTED = 0, 1, 2, 3
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 130, 141  # 128 + SIGINT / SIGPIPE, as a shell reports them


class UserError(WfiError):
    """A problem the user can fix; printed as one line without a traceback, ending ``wfi`` with ``exit_code``."""

    type = "user_error"

    def __init__(self, message: str, exit_code: int = EXIT_FAILED):
        super().__init__(message)
        self.exit_code = exit_code


def version() -> str:
    """The installed wf-initiation's version (``wfi --version``)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("wf-initiation")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


class _Version(argparse._VersionAction):
    """argparse's version action, reading the version only when asked (importlib.metadata is slow to import)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        self.version = f"wfi (wf-initiation) {version()}"
        super().__call__(parser, *args, **kwargs)  # type: ignore[arg-type]


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``wfi`` argument parser, with every group of :data:`GROUPS` registered (only the group of
    ``command`` when given: the parser of a command line that starts with it)."""
    parser = argparse.ArgumentParser(
        prog="wfi", description="Start Temporal workflow runs from schedules, external events and polled sources.",
        epilog="`wfi COMMAND --help` describes a command; `wfi help cli` prints every flag and exit status, "
        "`wfi help` the other topics of the documentation.",
    )
    parser.add_argument("--version", action=_Version, help="Show the installed version and exit.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, commands in GROUPS.items():
        if command is None or command in commands:
            importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: the process's), run the command, return (or exit with) its status."""
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(_leading_command(argv)).parse_args(argv)
    code = _flush_stdout(_dispatch(args))
    if getattr(args, "exit_hard", False):
        exit_process(code)
    return code


def _leading_command(argv: list[str]) -> str | None:
    """The command ``argv`` starts with, when it is one (anything else parses with every group)."""
    first = argv[0] if argv else None
    return first if any(first in commands for commands in GROUPS.values()) else None


def _dispatch(args: argparse.Namespace) -> int:
    """Run the handler; every way it can end becomes an exit status and at most one line on stderr."""
    try:
        return int(args.handler(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except UserError as exc:
        _say(f"wfi {args.command}: {exc}")
        return exc.exit_code
    except BrokenPipeError:  # `wfi state | head -1`: the reader is gone; say nothing, as cat and grep do
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except Exception as exc:  # a bug of ours: one line unless asked for the traceback
        if os.environ.get("WFI_DEBUG"):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        _say(f"wfi {args.command}: internal error: {type(exc).__name__}: {first} "
             "(rerun with WFI_DEBUG=1 for the traceback and report it)")
        return EXIT_FAILED


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again (Python docs, SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _flush_stdout(code: int) -> int:
    """Flush now, so that a reader that went away is noticed here and not at interpreter exit."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        return code or EXIT_BROKEN_PIPE
    except (OSError, ValueError):
        pass
    return code


def exit_process(code: int) -> NoReturn:
    """Flush stdout/stderr and end the process now with ``code``, skipping interpreter finalisation.

    After the Temporal runtime was used the interpreter may abort at exit (sdk-python#300, exit
    134); this keeps the exit status the command's. A closed stdout turns a success into 141.
    Only for commands run as a process.
    """
    code = _flush_stdout(code)
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)
