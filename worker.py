"""Thin entry point: `python worker.py` runs the wf-initiation worker (the same as `wfi worker`; see `wfi worker --help`)."""

import sys

from wf_initiation.cli import main

if __name__ == "__main__":
    sys.exit(main(["worker", *sys.argv[1:]]))
