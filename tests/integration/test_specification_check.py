"""`python3 tools/spec_links.py --check` (what `dev.py spec --check` runs), as a process: the links of
docs/specification.md are current and every rule is proved (split from tests/core/test_specification.py)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import ROOT


def test_the_links_are_current_and_every_rule_has_a_proof() -> None:
    check = subprocess.run([sys.executable, "tools/spec_links.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
