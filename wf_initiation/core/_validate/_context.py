"""Shared state of one validator run: the context, the entry drafts, names and small helpers."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from .._catalog import Catalog, Manifest
from .._diagnostics import Diagnostic
from .._expr import Evaluator
from .._model import BatchSpec
from .._yaml import Loc, is_sequence, to_plain

FORMAT_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
WORKFLOW_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
RESERVED_NAMES = ("inputs", "trigger")
ENTRY_KEYS = ("as", "when", "queue_by", "batch", "into")
BATCH_KEYS = ("size", "max_wait", "partition_by")
# Keys by which a Workfile might try to declare initiation capabilities itself (CAP-2).
DECLARED_CAPABILITY_KEYS = ("requires", "capabilities", "required_capabilities")


@dataclass
class Ctx:
    """Everything entry checks need: the catalog, the root scope, and the diagnostics so far."""

    catalog: Catalog
    evaluator: Evaluator = field(default_factory=Evaluator)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    inputs: dict[str, Any] = field(default_factory=dict)
    step_ids: list[str] = field(default_factory=list)
    multi: bool = False

    def add(self, code: str, message: str, loc: Loc | None = None, entry: str | None = None) -> None:
        self.diagnostics.append(
            Diagnostic(
                code=code,
                message=message,
                entry=entry,
                path=loc.path if loc else None,
                line=loc.line if loc else None,
            )
        )


@dataclass
class Draft:
    """One entry of `on:` as far as it could be read, with the locations cross-entry checks need."""

    index: int
    loc: Loc
    label: str
    connector: str | None = None
    manifest: Manifest | None = None
    config: dict[str, Any] = field(default_factory=dict)
    connection: str | None = None
    as_name: str | None = None
    as_loc: Loc | None = None
    binding: str | None = None
    when: str | None = None
    queue_by: str | None = None
    batch: BatchSpec | None = None
    into: Any = None
    into_loc: Loc | None = None


def type_name(value: Any) -> str:
    if is_sequence(value):
        return "list"
    return {str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(to_plain(value)), type(value).__name__
    )


def show(value: Any) -> str:
    text = repr(to_plain(value)) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


def is_expression_text(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value
