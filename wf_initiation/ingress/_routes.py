"""The ingress's hooks under the names they had before (``Route``, ``RouteTable``, ``build_routes``),
for code written against them; the hooks are :mod:`._hooks`. "Route" now means only where a
delivery of a sharded activation goes (``core.routing``; docs/architecture.md, "Vocabulary")."""

from __future__ import annotations

from ._hooks import EVENT_HEADERS, RESERVED, IngressConfigError
from ._hooks import Hook as Route
from ._hooks import HookTable as RouteTable
from ._hooks import build_hooks as build_routes

__all__ = ["EVENT_HEADERS", "RESERVED", "IngressConfigError", "Route", "RouteTable", "build_routes"]
