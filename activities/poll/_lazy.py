"""Lazy re-exports for the poll packages, so importing a package (the catalog reads each connector's
``manifest.yaml`` through it) imports neither Temporal nor the connector's dependencies."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``package.<module>`` on first use of one of its names.

    Args:
        package: The package's ``__name__``.
        exports: Exported name -> module (relative to the package) that defines it.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
