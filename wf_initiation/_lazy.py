"""Public names loaded on first use (PEP 562), for the packages whose import must stay light.

Importing ``wf_initiation`` must not pull in the client, the CLI or the worker wiring (the workflow
sandbox imports ``wf_initiation.workflows``); importing ``wf_initiation.ingress`` must not pull in
the web stack; importing a poll connector's package (the catalog reads its ``manifest.yaml``
through it) must import neither Temporal nor the connector's dependencies. Each of those packages
names its exports and the module defining each, and gets its ``__getattr__`` and ``__dir__`` here.
Standard library only.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's module ``__getattr__`` and ``__dir__`` that import each exported name on first use.

    Usage, in the package's ``__init__``: ``__getattr__, __dir__ = lazy_exports(__name__, {...})``.
    A name, once loaded, is kept in the package's namespace, so later reads are plain attribute reads.

    Args:
        package: The package's ``__name__``.
        exports: Exported name -> the module defining it, relative to the package (``.activity``) or
            absolute (``wf_initiation.client``).

    Returns:
        ``(__getattr__, __dir__)`` for the package's module namespace.
    """
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
