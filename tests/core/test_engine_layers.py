"""The engine's modules form layers that only call down (issue 14 item 1): a module imports only
modules of lower layers (type-only imports included), never one of its own layer or above, never
inside a function; and nothing in the engine imports Temporal. Layers as in docs/architecture.md."""

from __future__ import annotations

import ast
import pathlib

import pytest

from tests.support.paths import ROOT

ENGINE = ROOT / "wf_initiation" / "core" / "engine"
PACKAGE = "wf_initiation.core.engine"
# Bottom to top; a module may import only modules listed in earlier groups.
LAYERS: list[set[str]] = [
    {"_types"},                                   # state, commands, decisions: data
    {"_keys", "_overlap", "_throttle", "_codec", "_inputs", "_dispatch", "_kept"},  # pure functions of data; the calls commands become; events kept for re-drive
    {"_ledger"},                                  # dedup entries, retention, counts, errors
    {"_lifecycle"},                               # kept commands, lifecycle events
    {"_split"},                                   # a shard's part in a split: a parent's drain, a child's end
    {"_lanes"},                                   # queue keys across a split: holds, handovers (kept signals)
    {"_runs"},                                    # admission, overlap, queues, concurrency
    {"_batch", "_offer", "_intake"},              # steps of the pipeline
    {"_pipeline"},                                # validate -> dedup -> subscriptions -> guard -> keys -> into -> batch/admit
    {"_schedule", "_poll", "_subscriptions", "_redrive"},  # sources on top of the pipeline; re-drive of kept events
    {"_jobs", "operator"},                        # schedule jobs; operator actions
    {"_deactivate", "_growth"},                   # deactivation and re-activation; an activation growing itself
    {"_machine"},                                 # the machine: every source's time-driven work
    {"_view"},                                    # the operator's page
    {"summary"},                                  # operator views
    {"_facade"},                                  # the public face: Decisions
    {"recovery"},                                 # a recovered state rejoining a split's lane handover
    {"__init__"},
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _module(node: ast.ImportFrom | ast.Import) -> list[str]:
    """Engine modules an import statement names (relative or absolute)."""
    if isinstance(node, ast.Import):
        return [a.name[len(PACKAGE) + 1:].split(".")[0] for a in node.names if a.name.startswith(PACKAGE + ".")]
    if node.level == 1 and node.module is None:
        return [a.name for a in node.names]  # from . import _batch, operator
    if node.level == 1:
        return [node.module.split(".")[0]]  # from ._types import X
    if node.module and node.module.startswith(PACKAGE + "."):
        return [node.module[len(PACKAGE) + 1:].split(".")[0]]
    return []


def _imports(path: pathlib.Path) -> tuple[list[str], list[str], list[str]]:
    """(engine modules imported, imports inside functions, third-party roots imported)."""
    tree = ast.parse(path.read_text())
    engine, nested, roots = [], [], []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            nested += [f"{node.name}: line {n.lineno}" for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))]
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            engine += _module(node)
            if isinstance(node, ast.Import):
                roots += [a.name.split(".")[0] for a in node.names]
            elif node.level == 0 and node.module:
                roots.append(node.module.split(".")[0])
    return engine, nested, roots


MODULES = sorted(p.stem for p in ENGINE.glob("*.py"))


def test_every_engine_module_has_a_layer() -> None:
    assert set(MODULES) == set(RANK), "a module was added or removed: place it in LAYERS (and docs/architecture.md)"


@pytest.mark.parametrize("name", MODULES)
def test_a_module_imports_only_lower_layers_and_only_at_module_level(name: str) -> None:
    engine, nested, roots = _imports(ENGINE / f"{name}.py")
    upward = [m for m in engine if RANK.get(m, len(LAYERS)) >= RANK[name]]
    assert upward == [], f"{name} (layer {RANK[name]}) imports {upward}: same layer or above"
    assert nested == [], f"{name} imports inside functions: {nested}"
    assert "temporalio" not in roots, f"{name} imports Temporal: the engine is pure"


def test_the_check_fails_on_an_upward_a_cyclic_and_a_nested_import(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "_ledger.py"
    bad.write_text("from ._runs import Runs\nfrom . import _ledger\n\ndef f():\n    from . import _types\n")
    engine, nested, _ = _imports(bad)
    assert [m for m in engine if RANK[m] >= RANK["_ledger"]] == ["_runs", "_ledger"]
    assert nested == ["f: line 5"]
