"""Where things are, for tests at any depth under tests/ (a test module's own ``__file__`` says
nothing about the repository's root once tests live in tests/core, tests/integration, tests/crash)."""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]  # the repository: pyproject.toml, docs/, examples/
TESTS = ROOT / "tests"
HISTORIES = TESTS / "histories"  # recorded activation histories that must keep replaying
