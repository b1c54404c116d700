"""The ``ingress:`` section of a deployment file, as the ingress reads it.

Defined in :mod:`wf_initiation.core.ingress`, with the rest of the deployment model (the pure core
must not depend on the HTTP edge); re-exported here, where ingress users look for it.
"""

from __future__ import annotations

from wf_initiation.core.ingress import (
    DEFAULT_PORT,
    DEFERRED_RETRY_AFTER,
    AuthConfig,
    DeliveryIdSource,
    Endpoint,
    IngressConfig,
    Scheme,
)

__all__ = ["DEFAULT_PORT", "DEFERRED_RETRY_AFTER", "AuthConfig", "DeliveryIdSource", "Endpoint", "IngressConfig", "Scheme"]
