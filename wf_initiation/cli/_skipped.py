"""Files given to `wfi validate` that are not Workfiles: a deployment file (`wfi validate examples/*.yaml`)
is recognised and reported as skipped instead of invalid."""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import Any

from wf_initiation.core import Catalog, ValidationResult, load_workfile
from wf_initiation.core._capabilities import Resolver
from wf_initiation.core._yaml import is_mapping, parse_yaml


@dataclass(frozen=True)
class Skipped:
    """A file given to validate that is not a Workfile (a deployment file)."""

    file: str
    status: str = "skipped"
    reason: str = "a deployment file, not a Workfile: give it to activate, up or worker with --deployment"

    def summary(self) -> dict[str, Any]:
        return {"file": self.file, "status": self.status, "workflow": None, "required_capabilities": [],
                "diagnostics": [{"code": "WF-NOT-A-WORKFILE", "message": self.reason, "entry": None, "path": None,
                                 "line": None, "capability": None}]}


def validate_one(path: pathlib.Path, catalog: Catalog, claims: Any, resolve: Resolver | None = None) -> ValidationResult | Skipped:
    result = load_workfile(path, catalog=catalog, claims=claims, resolve=resolve)
    if result.status == "invalid" and is_deployment_file(path):
        return Skipped(str(path))
    return result


def is_deployment_file(path: pathlib.Path) -> bool:
    """A YAML mapping with a deployment's ``workflows`` or ``temporal`` section and no Workfile ``on``."""
    try:
        doc, problems = parse_yaml(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return False
    return not problems and is_mapping(doc) and "on" not in doc and bool({"workflows", "temporal"} & set(doc))
