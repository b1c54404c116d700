"""The conformance kit: black-box cases that check a live deployment against the spec's clauses.

``wfi conformance run --deployment FILE`` runs them and writes a report per capability and a
claims file; ``tests/`` runs the same cases against this project's own deployment.
"""

from .kit import (
    CAPABILITIES,
    CORE,
    EXTERNAL,
    POLLING,
    SCHEDULED,
    CaseFailed,
    CaseInfo,
    CliResult,
    Target,
    WorkfilePair,
    case,
    check,
    collect,
    eventually,
    run_cases,
    select,
)
from .report import CapabilityReport, CaseResult, Report, build_report, claims_document, write_report

__all__ = [
    "CAPABILITIES",
    "CORE",
    "EXTERNAL",
    "POLLING",
    "SCHEDULED",
    "CapabilityReport",
    "CaseFailed",
    "CaseInfo",
    "CaseResult",
    "CliResult",
    "Report",
    "Target",
    "WorkfilePair",
    "build_report",
    "case",
    "check",
    "claims_document",
    "collect",
    "eventually",
    "run_cases",
    "select",
    "write_report",
]
