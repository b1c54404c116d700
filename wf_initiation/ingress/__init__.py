"""HTTP webhook ingress: ``wfi serve``, or mount :func:`app` in your own ASGI server.

    from wf_initiation.ingress import app
    application = app("deployment.yaml")          # uvicorn module:application

Each request to a served trigger entry is authenticated, turned into the payload the entry's
manifest expects and delivered with the ``deliver`` update; the HTTP status carries the durable
disposition (202 accepted/queued/batched, 200 duplicate, 409 conflict, 422 invalid, ...). Keys of
the deployment's ``ingress:`` section and how to point GitHub, Stripe and Standard-Webhooks senders
at it: ``docs/webhooks.md``.

Loaded lazily: the deployment model imports :mod:`wf_initiation.ingress.config` (pydantic only),
which must not pull in the web stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["IngressConfig", "IngressConfigError", "app", "build"]

_LAZY = {
    "IngressConfig": "wf_initiation.ingress.config",
    "IngressConfigError": "wf_initiation.ingress._routes",
    "app": "wf_initiation.ingress._factory",
    "build": "wf_initiation.ingress._factory",
}

if TYPE_CHECKING:
    from ._factory import app, build
    from ._routes import IngressConfigError
    from .config import IngressConfig


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'wf_initiation.ingress' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
