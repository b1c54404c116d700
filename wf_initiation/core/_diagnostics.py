"""Diagnostics: every problem the validator, catalog or activation finds, as data."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from wf_initiation.errors import DiagnosticError  # noqa: F401  (defined with the other errors; imported from here too)

Severity = Literal["error", "warning"]


class Diagnostic(BaseModel):
    """One problem in a Workfile, a manifest or a deployment.

    ``code`` is stable across releases (tests and tools match on it); ``message`` is for people
    and names the fix.
    """

    model_config = ConfigDict(frozen=True)

    code: str = Field(description="Stable machine-readable code, e.g. 'TRIG-AS-REQUIRED'.")
    message: str = Field(description="Human message that names the fix.")
    entry: str | None = Field(default=None, description="Trigger entry (its 'as' name, or connector name) concerned.")
    path: str | None = Field(default=None, description="YAML path, e.g. 'on[1].as'.")
    line: int | None = Field(default=None, description="1-based line number in the file.")
    capability: str | None = Field(default=None, description="Capability concerned, for 'unsupported' diagnostics.")
    severity: Severity = "error"

    def render(self, file: str | None = None) -> str:
        where = ":".join(str(p) for p in (file, self.line) if p is not None)
        prefix = f"{where}: " if where else ""
        entry = f" [entry {self.entry}]" if self.entry else ""
        return f"{prefix}{self.severity} {self.code}{entry}: {self.message}"


