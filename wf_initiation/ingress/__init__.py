"""HTTP webhook ingress: ``wfi serve``, or mount :func:`app` in your own ASGI server.

    from wf_initiation.ingress import app
    application = app("deployment.yaml")          # uvicorn module:application

Each request to a served trigger entry is authenticated, turned into the payload the entry's
manifest expects and delivered with the ``deliver`` update; the HTTP status carries the durable
disposition (202 accepted/queued/batched, 200 duplicate, 409 conflict, 422 invalid, ...). Keys of
the deployment's ``ingress:`` section and how to point GitHub, Stripe and Standard-Webhooks senders
at it: ``docs/webhooks.md``.

Loaded lazily (:mod:`wf_initiation._lazy`): importing the package does not pull in the web stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wf_initiation._lazy import lazy_exports

__all__ = ["IngressConfig", "IngressConfigError", "app", "build"]

if TYPE_CHECKING:
    from ._factory import app, build
    from ._hooks import IngressConfigError
    from .config import IngressConfig

__getattr__, __dir__ = lazy_exports(__name__, {
    "IngressConfig": ".config",
    "IngressConfigError": "._hooks",
    "app": "._factory",
    "build": "._factory",
})
