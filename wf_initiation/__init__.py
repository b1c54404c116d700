"""wf-initiation: start Temporal workflow runs from schedules, external events and polled sources.

The public face of the package::

    from wf_initiation import WfiPlugin, WfiClient, activation_spec, RunInput, Disposition, wait_for

Names are loaded on first use (PEP 562), so importing a submodule (the workflow sandbox imports
``wf_initiation.workflows``) does not pull in the client, the CLI or the worker wiring.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["DeliveryResult", "Disposition", "RunInput", "WfiClient", "WfiPlugin", "__version__", "activation_spec", "wait_for"]

_LAZY = {
    "WfiPlugin": "wf_initiation.plugin",
    "WfiClient": "wf_initiation.client",
    "activation_spec": "wf_initiation.client",
    "RunInput": "wf_initiation.core.runinput",
    "Disposition": "wf_initiation.core.engine",
    "DeliveryResult": "wf_initiation.core.engine",
    "wait_for": "wf_initiation.workflows.runapi",
}

if TYPE_CHECKING:
    from wf_initiation.client import WfiClient, activation_spec
    from wf_initiation.core.engine import DeliveryResult, Disposition
    from wf_initiation.core.runinput import RunInput
    from wf_initiation.plugin import WfiPlugin
    from wf_initiation.workflows.runapi import wait_for


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("wf-initiation")
        except PackageNotFoundError:  # running from a source tree that was never installed
            return "0+unknown"
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'wf_initiation' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
