"""The wire contract: every name and type another process sees.

Workflow types, update/signal/query names, activity names and the activation workflow id format
(:mod:`.names`); error types (:mod:`.errors`); the argument and result models of the activation's
handlers (:mod:`._activation`, the operator request as a discriminated union) and of the activities
(:mod:`.activities`); the search attributes (:mod:`.search_attributes`).

Workflows, activities, the client, the CLI, the ingress, the conformance kit and the benchmarks
import these from here; this package imports none of them (only the pure ``core``). Each string of
the contract is written once (``tests/core/test_wire.py`` checks the source tree). Histories carry
these names and shapes: renaming one breaks recorded histories and running deployments.
"""

from __future__ import annotations

from ._activation import *  # noqa: F403
from ._activation import __all__ as _activation_all
from ._operator import *  # noqa: F403
from ._operator import __all__ as _operator_all
from .activities import *  # noqa: F403
from .activities import __all__ as _activities_all
from .errors import *  # noqa: F403
from .errors import __all__ as _errors_all
from .names import *  # noqa: F403
from .names import __all__ as _names_all

# Re-exported through __all__ below (built from the submodules' lists, which ruff cannot follow).
from .search_attributes import ALL as SEARCH_ATTRIBUTES  # noqa: F401
from .search_attributes import WFI_ACTIVATION, WFI_STATE, WFI_TRIGGERS, WFI_WORKFLOW  # noqa: F401

__all__ = sorted([*_activation_all, *_operator_all, *_activities_all, *_errors_all, *_names_all, "SEARCH_ATTRIBUTES",
                  "WFI_ACTIVATION", "WFI_STATE", "WFI_TRIGGERS", "WFI_WORKFLOW"])
