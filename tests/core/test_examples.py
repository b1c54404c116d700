"""Every Workfile in examples/ validates, the trigger-syntax snippets of the specification are all
there, and `wfi up --activate` with the example deployment starts a run of every one of them."""

from __future__ import annotations

import pathlib

import pytest

from tests.support.paths import ROOT
from wf_initiation.core import CAPABILITY_BY_KIND, Catalog, load_workfile

EXAMPLES_DIR = ROOT / "examples"
EXAMPLES = sorted(p for p in EXAMPLES_DIR.glob("*.yaml") if p.name != "deployment.yaml")  # the rest are Workfiles
ALL_CLAIMS = sorted(CAPABILITY_BY_KIND.values())


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.default(third_party=False)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_validates_and_is_supported_by_a_full_deployment(path: pathlib.Path, catalog: Catalog) -> None:
    result = load_workfile(path, catalog=catalog, claims=ALL_CLAIMS)
    assert result.status == "valid", [d.render(result.file) for d in result.diagnostics]
    assert result.workflow == path.stem


def test_the_examples_cover_every_trigger_syntax_snippet_and_every_capability(catalog: Catalog) -> None:
    results = {p.stem: load_workfile(p, catalog=catalog) for p in EXAMPLES}
    wfs = {name: r.workfile for name, r in results.items() if r.workfile is not None}
    assert len(wfs) == len(EXAMPLES)
    triage = wfs["support-triage"].entries[0]
    assert (triage.connector, triage.as_name, bool(triage.when), bool(triage.queue_by)) == (
        "mail.received",
        "message",
        True,
        True,
    )
    batch = wfs["support-batch"].entries[0]
    assert batch.batch is not None and batch.batch.partition_by and batch.as_name is None
    assert [e.connector for e in wfs["content-calendar"].entries] == ["rss.item_published", "sheet.row_added"]
    assert all(e.into for e in wfs["content-into"].entries)
    assert {c for r in results.values() for c in r.required_capabilities} == set(ALL_CLAIMS)


def test_the_examples_readme_lists_every_example() -> None:
    readme = (EXAMPLES_DIR / "README.md").read_text()
    assert [p.name for p in EXAMPLES if p.name not in readme] == []


# ---------------------------------------------------------------------------- the examples, running
