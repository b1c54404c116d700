"""The conformance case modules, in report order. Each module lists its cases in ``CASES``."""

MODULES: tuple[str, ...] = (
    "wf_initiation.conformance.cases.capabilities",
    "wf_initiation.conformance.cases.scheduled",
    "wf_initiation.conformance.cases.external",
    "wf_initiation.conformance.cases.sharded",
    "wf_initiation.conformance.cases.polling",
    "wf_initiation.conformance.cases.composition",
    "wf_initiation.conformance.cases.batching",
    "wf_initiation.conformance.cases.hostile",
)
