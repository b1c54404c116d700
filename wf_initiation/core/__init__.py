"""Pure (Temporal-free) core of wf-initiation: Workfile model, manifests, expressions, capabilities."""

from ._catalog import CAPABILITY_BY_KIND, Catalog, Manifest, ManifestError, parse_manifest
from ._diagnostics import Diagnostic, DiagnosticError
from ._durations import DurationError, format_duration, parse_duration
from ._expr import Evaluator, Expression, ExpressionFault, ExpressionSyntaxError, canonical_key
from ._model import BatchSpec, TriggerEntry, Workfile

__all__ = [
    "CAPABILITY_BY_KIND",
    "BatchSpec",
    "Catalog",
    "Diagnostic",
    "DiagnosticError",
    "DurationError",
    "Evaluator",
    "Expression",
    "ExpressionFault",
    "ExpressionSyntaxError",
    "Manifest",
    "ManifestError",
    "TriggerEntry",
    "Workfile",
    "canonical_key",
    "format_duration",
    "parse_duration",
    "parse_manifest",
]

from ._capabilities import ClaimsError, classify, read_claims, required_capabilities
from ._validate import ValidationResult, load_workfile, validate_document

__all__ += [
    "ClaimsError",
    "ValidationResult",
    "classify",
    "load_workfile",
    "read_claims",
    "required_capabilities",
    "validate_document",
]
