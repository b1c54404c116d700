"""Real material the tests read and nobody on the project wrote, from published packages: fetched by
``python3 dev.py test`` into ``.wfi/corpora`` (dev.py's ``_CORPUS_SOURCES``), never stored in the
repository. A test asks for its corpus here and skips, naming how to get it, when it is absent.

- GitHub's webhook payload examples: octokit's ``@octokit/webhooks-examples`` npm package (MIT),
  ``api.github.com/index.json``: every event with its published example payloads. A clone of
  octokit/webhooks works as well: ``WFI_GITHUB_PAYLOAD_EXAMPLES`` naming its
  ``payload-examples/api.github.com`` folder.
- feedparser's own test documents: the ``tests/`` folder of its source distribution (BSD-2-Clause).
"""

from __future__ import annotations

import json
import os
import pathlib

import pytest

from tests.support.paths import ROOT

CORPORA = ROOT / ".wfi" / "corpora"
_HOW = "run `python3 dev.py test` once with the package registries reachable (it fetches the corpora)"


def github_payload_examples() -> list[tuple[str, bytes]]:
    """(event name, payload bytes) of every published example; skips the test when there are none."""
    folder = os.environ.get("WFI_GITHUB_PAYLOAD_EXAMPLES")
    if folder:
        files = [f for f in sorted(pathlib.Path(folder).rglob("*.json")) if f.name != "index.json"]
        return [(f.relative_to(folder).parts[0], f.read_bytes()) for f in files]
    index = CORPORA / "octokit-webhooks-examples-7.6.1" / "package" / "api.github.com" / "index.json"
    if not index.exists():
        pytest.skip(f"GitHub's payload examples are not in {index.parent}: {_HOW}")
    return [(event["name"], json.dumps(example).encode()) for event in json.loads(index.read_text())
            for example in event.get("examples", [])]


def feedparser_tests() -> pathlib.Path:
    """feedparser's ``tests`` folder (``wellformed/``, ``illformed/``, ``encoding/``, ...); skips when absent."""
    folder = CORPORA / "feedparser-6.0.12" / "feedparser-6.0.12" / "tests"
    if not folder.is_dir():
        pytest.skip(f"feedparser's test documents are not in {folder}: {_HOW}")
    return folder
