"""The conformance case modules, in report order. Each module lists its cases in ``CASES``."""

MODULES: tuple[str, ...] = (
    "conformance.cases.capabilities",
    "conformance.cases.scheduled",
    "conformance.cases.external",
    "conformance.cases.polling",
    "conformance.cases.composition",
    "conformance.cases.batching",
)
