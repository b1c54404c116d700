"""`wfi` command line (placeholder until subcommands land)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("wfi: no commands yet", file=sys.stderr)
    return 2
