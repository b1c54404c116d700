"""The conformance report: per capability, the clauses exercised and the cases passed and failed,
and the claims a deployment has earned.

Claims rule: a real capability is claimed when it has at least one case, every one of its cases ran
and passed, and every ``core`` case ran and passed (the cross-cutting cases, such as capability
inference, are part of what claiming any capability asserts, CAP-9). ``core`` itself is never
claimed. A capability with no cases is not claimed.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Outcome = Literal["passed", "failed", "error", "skipped"]
CLAIMABLE = ("wf.scheduled-initiation", "wf.external-event-initiation", "wf.polling-initiation")
CORE = "core"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CaseResult(_Frozen):
    """The outcome of one case."""

    id: str
    capability: str
    clauses: list[str]
    title: str
    outcome: Outcome = Field(description="passed | failed (a check did not hold) | error (the case crashed) | skipped.")
    message: str = Field(default="", description="Why it failed, errored or was skipped: one readable line.")
    detail: str = Field(default="", description="More about a failure, e.g. the output of the command that failed.")
    cleanup: str = Field(default="", description="What the runner ended after the case (docs/conformance.md), "
                         "or a problem doing so.")
    duration_s: float = 0.0


class CapabilityReport(_Frozen):
    """Everything the run found out about one capability (or the ``core`` pseudo-capability)."""

    capability: str
    claimed: bool
    clauses_exercised: list[str] = Field(description="Clauses cited by cases that ran.")
    clauses_passed: list[str] = Field(description="Exercised clauses whose every case passed.")
    clauses_failed: list[str] = Field(description="Clauses cited by a case that failed or errored.")
    passed: int
    failed: int
    skipped: int
    duration_s: float = Field(default=0.0, description="Seconds its cases took, cleanups included.")
    cases: list[CaseResult]


class Report(_Frozen):
    """A whole conformance run."""

    deployment: str
    generated_at: datetime
    capabilities: list[CapabilityReport]
    claims: list[str] = Field(description="Capabilities whose every case (and every core case) passed.")
    ok: bool = Field(description="Every case that ran passed.")
    duration_s: float = Field(default=0.0, description="Seconds every case took, cleanups included.")

    def failures(self) -> list[CaseResult]:
        return [c for cap in self.capabilities for c in cap.cases if c.outcome in ("failed", "error")]


def build_report(results: Sequence[CaseResult], *, deployment: str, generated_at: datetime) -> Report:
    """Group case results by capability and decide the claims."""
    names = [*CLAIMABLE, CORE, *sorted({r.capability for r in results} - {*CLAIMABLE, CORE})]
    groups = {name: [r for r in results if r.capability == name] for name in names}
    core_ok = all(r.outcome == "passed" for r in groups[CORE])
    caps = [_capability(name, rs, core_ok) for name, rs in groups.items() if rs or name in CLAIMABLE]
    return Report(
        deployment=deployment,
        generated_at=generated_at,
        capabilities=caps,
        claims=[c.capability for c in caps if c.claimed],
        ok=all(r.outcome in ("passed", "skipped") for r in results),
        duration_s=round(sum(r.duration_s for r in results), 3),
    )


def _capability(name: str, results: list[CaseResult], core_ok: bool) -> CapabilityReport:
    ran = [r for r in results if r.outcome != "skipped"]
    bad = [r for r in ran if r.outcome != "passed"]
    exercised = _clauses(ran)
    failed = _clauses(bad)
    return CapabilityReport(
        capability=name,
        claimed=name in CLAIMABLE and bool(results) and not bad and len(ran) == len(results) and core_ok,
        clauses_exercised=exercised,
        clauses_passed=[c for c in exercised if c not in failed],
        clauses_failed=failed,
        passed=len(ran) - len(bad),
        failed=len(bad),
        skipped=len(results) - len(ran),
        duration_s=round(sum(r.duration_s for r in results), 3),
        cases=list(results),
    )


def _clauses(results: Sequence[CaseResult]) -> list[str]:
    return sorted({c for r in results for c in r.clauses}, key=_clause_order)


def _clause_order(clause: str) -> tuple[str, int]:
    prefix, _, number = clause.rpartition("-")
    return (prefix, int(number)) if number.isdigit() else (clause, 0)


def claims_document(report: Report) -> dict[str, object]:
    """The claims file: ``{"capabilities": [...], ...}``, as ``wfi validate --claims`` reads it."""
    return {
        "capabilities": list(report.claims),
        "generated_at": report.generated_at.isoformat(),
        "deployment": report.deployment,
    }


def render_markdown(report: Report) -> str:
    """A readable report: a summary table, then each capability's clauses and failures."""
    lines = [
        "# Conformance report",
        "",
        f"- deployment: `{report.deployment}`",
        f"- generated at: {report.generated_at.isoformat()}",
        f"- claims: {', '.join(f'`{c}`' for c in report.claims) or 'none'}",
        f"- time: {seconds_text(report.duration_s)}",
        "",
        "| capability | claimed | passed | failed | skipped | time | clauses exercised |",
        "|---|---|---|---|---|---|---|",
    ]
    for cap in report.capabilities:
        lines.append(
            f"| `{cap.capability}` | {'yes' if cap.claimed else 'no'} | {cap.passed} | {cap.failed} | "
            f"{cap.skipped} | {seconds_text(cap.duration_s)} | {', '.join(cap.clauses_exercised) or '-'} |"
        )
    for cap in report.capabilities:
        lines.extend(_capability_section(cap))
    return "\n".join(lines) + "\n"


def _capability_section(cap: CapabilityReport) -> list[str]:
    lines = ["", f"## `{cap.capability}`", ""]
    if cap.clauses_failed:
        lines.append(f"Clauses failed: {', '.join(cap.clauses_failed)}")
        lines.append("")
    for r in cap.cases:
        took = f" ({seconds_text(r.duration_s)})" if r.outcome != "skipped" else ""
        lines.append(f"- **{r.outcome}** `{r.id}` ({', '.join(r.clauses)}): {r.title}{took}")
        if r.message and r.outcome != "passed":
            lines.append(f"  - {r.message}")
        if r.detail and r.outcome != "passed":
            lines.extend(["", "  ```", *(f"  {line}" for line in r.detail.splitlines()), "  ```", ""])
        if r.cleanup:
            lines.append(f"  - cleanup: {r.cleanup}")
    return lines


def seconds_text(seconds: float) -> str:
    """``4.2s``, ``3m07s``: a duration as a person reads it."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes}m{rest:02d}s"


def progress_line(result: CaseResult) -> str:
    """One line for a case that just ran: its outcome, its time, its id and, when it did not pass, why."""
    mark = {"passed": "passed", "failed": "FAILED", "error": "ERROR"}.get(result.outcome, result.outcome)
    why = f": {result.message}" if result.outcome in ("failed", "error") and result.message else ""
    return f"  {mark:<6} {seconds_text(result.duration_s):>7}  {result.id}{why}"


def write_report(report: Report, out_dir: pathlib.Path) -> dict[str, pathlib.Path]:
    """Write ``report.json``, ``report.md`` and ``claims.json`` into ``out_dir``; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {name: out_dir / name for name in ("report.json", "report.md", "claims.json")}
    paths["report.json"].write_text(report.model_dump_json(indent=2) + "\n")
    paths["report.md"].write_text(render_markdown(report))
    paths["claims.json"].write_text(json.dumps(claims_document(report), indent=2) + "\n")
    return paths
