"""Building the ingress app from a deployment."""

from __future__ import annotations

import logging
import os
import pathlib
from collections.abc import Awaitable, Callable
from typing import Any

from wf_initiation.core.deployment import Deployment, load_deployment
from wf_initiation.errors import SecretUnavailable

from ._app import build_app
from ._hooks import IngressConfigError, build_hooks
from ._receiver import Ingress
from ._secrets import SecretResolver
from .config import IngressConfig

log = logging.getLogger("wf_initiation.ingress")


def build(
    deployment: Deployment | str | os.PathLike[str], *, client: Any = None, strict: bool = True,
    connect: Callable[[], Awaitable[Any]] | None = None,
) -> Ingress:
    """The ingress state (hooks, gates, metrics) for a deployment.

    Args:
        deployment: A :class:`Deployment` or the path of a deployment file.
        client: A connected ``temporalio.client.Client`` (with the pydantic data converter); default:
            connect to the deployment's ``temporal:`` target on first use.
        connect: How to connect when ``client`` is None (``wfi serve`` passes its --address/--namespace).
        strict: Raise :class:`IngressConfigError` on any problem (an endpoint naming an unknown
            entry, a secret reference that does not resolve, ...). Otherwise log each one and serve the rest.
    """
    if not isinstance(deployment, Deployment):
        deployment = load_deployment(pathlib.Path(deployment))
    config = deployment.ingress or IngressConfig()
    table = build_hooks(deployment, config)
    problems = list(table.problems)
    secrets = SecretResolver()
    for hook in table.by_name.values():
        for secret in hook.secrets:
            try:
                secrets.value(secret)
            except SecretUnavailable as exc:
                problems.append(f"{hook.label}: {exc}; until it resolves, requests to it are answered 503")
    if problems and strict:
        raise IngressConfigError("the ingress cannot serve this deployment (fix these, or serve the rest with "
                                 "wfi serve --lenient or strict=False): " + "; ".join(problems))
    for problem in problems:
        log.warning("%s", problem)
    return Ingress(deployment, config, table, client=client, connect=connect, secrets=secrets)


def app(deployment: Deployment | str | os.PathLike[str], *, client: Any = None, strict: bool = True) -> Any:
    """The ASGI application (Starlette) serving a deployment's webhook endpoints; see :func:`build`.

    Its ``state.ingress`` is the :class:`Ingress` (hooks, metrics)."""
    return build_app(build(deployment, client=client, strict=strict))
