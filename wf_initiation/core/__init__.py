"""Pure (Temporal-free) core of wf-initiation: Workfile model, manifests, expressions, capabilities.

Names are loaded on first use (:mod:`wf_initiation._lazy`): a module that needs one part of the
core (``wfi deliver`` reads a deployment file through ``core.deployment``) does not pay for the
manifest catalog, the expression engine (Jinja2) and the validator (jsonschema) it never uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wf_initiation._lazy import lazy_exports

__all__ = [
    "BatchSpec",
    "canonical_key",
    "CAPABILITY_BY_KIND",
    "Catalog",
    "ClaimsError",
    "classify",
    "Diagnostic",
    "DiagnosticError",
    "DurationError",
    "Evaluator",
    "Expression",
    "ExpressionFault",
    "ExpressionSyntaxError",
    "format_duration",
    "load_workfile",
    "Manifest",
    "ManifestError",
    "parse_duration",
    "parse_manifest",
    "read_claims",
    "required_capabilities",
    "TriggerEntry",
    "validate_document",
    "ValidationResult",
    "Workfile",
]

if TYPE_CHECKING:
    from ._capabilities import ClaimsError, classify, read_claims, required_capabilities
    from ._catalog import CAPABILITY_BY_KIND, Catalog, Manifest, ManifestError, parse_manifest
    from ._diagnostics import Diagnostic, DiagnosticError
    from ._durations import DurationError, format_duration, parse_duration
    from ._expr import Evaluator, Expression, ExpressionFault, ExpressionSyntaxError, canonical_key
    from ._model import BatchSpec, TriggerEntry, Workfile
    from ._validate import ValidationResult, load_workfile, validate_document

__getattr__, __dir__ = lazy_exports(__name__, {
    "BatchSpec": "._model",
    "canonical_key": "._expr",
    "CAPABILITY_BY_KIND": "._catalog",
    "Catalog": "._catalog",
    "ClaimsError": "._capabilities",
    "classify": "._capabilities",
    "Diagnostic": "._diagnostics",
    "DiagnosticError": "._diagnostics",
    "DurationError": "._durations",
    "Evaluator": "._expr",
    "Expression": "._expr",
    "ExpressionFault": "._expr",
    "ExpressionSyntaxError": "._expr",
    "format_duration": "._durations",
    "load_workfile": "._validate",
    "Manifest": "._catalog",
    "ManifestError": "._catalog",
    "parse_duration": "._durations",
    "parse_manifest": "._catalog",
    "read_claims": "._capabilities",
    "required_capabilities": "._capabilities",
    "TriggerEntry": "._model",
    "validate_document": "._validate",
    "ValidationResult": "._validate",
    "Workfile": "._model",
})
