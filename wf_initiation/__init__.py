"""wf-initiation: start Temporal workflow runs from schedules, external events and polled sources.

The public face of the package::

    from wf_initiation import WfiPlugin, WfiClient, activation_spec, RunInput, Disposition, wait_for
    from wf_initiation import run_script   # a client script's ending (see its docstring)
    from wf_initiation.errors import WfiError   # every error the package raises (help(wf_initiation.errors))

Names are loaded on first use (:mod:`wf_initiation._lazy`), so importing a submodule (the workflow
sandbox imports ``wf_initiation.workflows``) does not pull in the client, the CLI or the worker wiring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wf_initiation._lazy import lazy_exports

__all__ = ["DeliveryResult", "Disposition", "RunInput", "WfiClient", "WfiError", "WfiPlugin", "__version__", "activation_spec",
           "run_script", "wait_for"]

if TYPE_CHECKING:
    from wf_initiation._script import run_script
    from wf_initiation._version import __version__
    from wf_initiation.client import WfiClient
    from wf_initiation.core.engine import DeliveryResult, Disposition
    from wf_initiation.core.runinput import RunInput
    from wf_initiation.errors import WfiError
    from wf_initiation.plugin import WfiPlugin
    from wf_initiation.specs import activation_spec
    from wf_initiation.workflows.runapi import wait_for

__getattr__, __dir__ = lazy_exports(__name__, {
    "__version__": "._version",
    "WfiPlugin": ".plugin",
    "WfiClient": ".client",
    "WfiError": ".errors",
    "activation_spec": ".specs",
    "RunInput": ".core.runinput",
    "Disposition": ".core.engine",
    "DeliveryResult": ".core.engine",
    "wait_for": ".workflows.runapi",
    "run_script": "._script",
})
