"""Reading a Workfile and classifying the result: the validator's entry points."""

from __future__ import annotations

import pathlib
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .._bounds import MAX_FILE_BYTES
from .._capabilities import Resolver, classify, required_capabilities
from .._catalog import Catalog
from .._diagnostics import Diagnostic
from .._model import Workfile
from .._yaml import is_mapping, parse_yaml
from ._document import validate_document

Status = Literal["valid", "invalid", "unsupported"]


class ValidationResult(BaseModel):
    """Outcome of validating one Workfile (and, when claims were given, classifying its support)."""

    model_config = ConfigDict(frozen=True)

    file: str | None = Field(description="File name the diagnostics refer to, if any.")
    status: Status = Field(description="valid | invalid | unsupported (unsupported only when claims were given).")
    workflow: str | None = Field(description="The Workfile's `name` (its workflow identity), when readable.")
    workfile: Workfile | None = Field(description="The parsed model; None when invalid.")
    required_capabilities: list[str] = Field(description="Sorted union of inferred capabilities; [] when invalid.")
    diagnostics: list[Diagnostic] = Field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The JSON form printed by ``wfi validate --json``."""
        keys = ("code", "message", "entry", "path", "line", "capability")
        return {
            "file": self.file,
            "status": self.status,
            "workflow": self.workflow,
            "required_capabilities": list(self.required_capabilities),
            "diagnostics": [d.model_dump(include=set(keys)) for d in self.diagnostics],
        }


def load_workfile(
    source: str | pathlib.Path,
    *,
    catalog: Catalog | None = None,
    claims: Iterable[str] | None = None,
    file: str | None = None,
    resolve: Resolver | None = None,
) -> ValidationResult:
    """Parse and validate a Workfile, and classify its support when ``claims`` is given.

    Args:
        source: A path to read, or the YAML text itself.
        catalog: Connector catalog; :meth:`Catalog.default` when omitted.
        claims: Capabilities the target deployment claims. None means "do not classify":
            the status is then only ``valid`` or ``invalid``.
        file: Name to report diagnostics against (defaults to the path).
        resolve: Each entry's implementation under a deployment (``core.activation.manifest_resolver``),
            for the capabilities it requires; without it, the catalog's manifests.

    Returns:
        The result; bad input of any kind yields diagnostics, never an exception.
    """
    if isinstance(source, pathlib.Path):
        file = file if file is not None else str(source)
        text, problem = _read(source)
        if problem is not None:
            return _invalid(file, None, [problem])
    else:
        text = source
        if len(text) > MAX_FILE_BYTES:
            return _invalid(file, None, [_too_large(file or "the Workfile")])
    catalog = catalog if catalog is not None else Catalog.default()
    doc, diagnostics = parse_yaml(text)
    if diagnostics:
        return _invalid(file, None, diagnostics)
    workfile, diagnostics = validate_document(doc, catalog)
    if workfile is None:
        return _invalid(file, _workflow_name(doc), diagnostics)
    return _classified(file, workfile, catalog, claims, resolve)


def _classified(file: str | None, wf: Workfile, catalog: Catalog, claims: Iterable[str] | None,
                resolve: Resolver | None) -> ValidationResult:
    caps = sorted(required_capabilities(wf, catalog, resolve))
    unsupported = classify(wf, catalog, claims, resolve=resolve) if claims is not None else []
    status: Status = "unsupported" if unsupported else "valid"
    return ValidationResult(
        file=file, status=status, workflow=wf.name, workfile=wf, required_capabilities=caps, diagnostics=unsupported
    )


def _invalid(file: str | None, workflow: str | None, diagnostics: list[Diagnostic]) -> ValidationResult:
    return ValidationResult(
        file=file, status="invalid", workflow=workflow, workfile=None, required_capabilities=[], diagnostics=diagnostics
    )


def _read(path: pathlib.Path) -> tuple[str, Diagnostic | None]:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return "", _too_large(str(path))
        return path.read_text(encoding="utf-8"), None
    except UnicodeDecodeError as exc:
        return "", Diagnostic(
            code="WF-FILE-UNREADABLE", message=f"{path} is not UTF-8 text ({exc.reason}): save it as UTF-8"
        )
    except OSError as exc:
        return "", Diagnostic(code="WF-FILE-UNREADABLE", message=f"cannot read {path}: {exc.strerror or exc}")


def _too_large(what: str) -> Diagnostic:
    return Diagnostic(
        code="WF-FILE-TOO-LARGE", message=f"{what} is larger than {MAX_FILE_BYTES:,} bytes: a Workfile is configuration, keep it small"
    )


def _workflow_name(doc: Any) -> str | None:
    name = doc.get("name") if is_mapping(doc) else None
    return str(name) if isinstance(name, str) else None
