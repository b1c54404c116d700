"""The core validator: a Workfile's text in, a :class:`ValidationResult` out.

It checks trigger syntax and the resolved manifest contract without regard to target support
(CAP-5), reports every problem of a file at once, and never raises on bad input: every problem
is a :class:`~wf_initiation.core.Diagnostic` with a stable code, a message naming the fix, the trigger
entry, the YAML path and the line. Support is classified only when the caller passes the
deployment's claimed capabilities (CAP-7).

The rules live in one module per family: the document (`_document`), one entry (`_entry`),
expressions (`_expressions`), `batch` (`_batch`), configuration (`_config`) and the rules across
entries (`_into`); `_load` reads a file and classifies the result.
"""

from ._document import validate_document
from ._expressions import check_expression
from ._load import ValidationResult, load_workfile

__all__ = ["ValidationResult", "check_expression", "load_workfile", "validate_document"]
