"""The installed console command, as a process: usage errors exit 2 without a traceback (split from
tests/core/test_validate_cli.py)."""

from __future__ import annotations

import subprocess
import sys


def test_the_console_command_exits_2_on_usage_errors_without_a_traceback() -> None:
    entry = "import sys; from wf_initiation.cli import main; sys.exit(main())"
    done = subprocess.run([sys.executable, "-c", entry, "validate"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "WORKFILE" in done.stderr
