"""Helpers for ingress tests: a deployment with Workfiles and an ``ingress:`` section, the ingress
served on a loopback port by uvicorn, and a real HTTP client (httpx)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import pathlib
import textwrap
from collections.abc import AsyncIterator
from typing import Any

import httpx

from wf_initiation.client import WfiClient, build_spec
from wf_initiation.core.deployment import Deployment, parse_deployment
from wf_initiation.ingress import build
from wf_initiation.ingress._app import Ingress, build_app
from wf_initiation.ingress._connections import limits_for
from wf_initiation.ingress._server import IngressServer


def deployment_with(
    tmp_path: pathlib.Path, workfiles: dict[str, str], *, task_queue: str, ingress: dict[str, Any] | None = None,
    settings: dict[str, dict[str, Any]] | None = None, connections: dict[str, Any] | None = None,
) -> Deployment:
    """Write each Workfile (name -> YAML) and return a deployment serving them on ``task_queue``."""
    workflows = {}
    for name, text in workfiles.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(textwrap.dedent(text))
        workflows[name] = {"workfile": path.name, "run": {"workflow_type": "wfi.EchoRun", "task_queue": task_queue},
                           **(settings or {}).get(name, {})}
    data = {"temporal": {"task_queue": task_queue}, "workflows": workflows, "connections": connections or {}}
    if ingress is not None:
        data["ingress"] = json.loads(json.dumps(ingress))
    return parse_deployment(data, base_dir=str(tmp_path))


async def activate_all(wfi: WfiClient, deployment: Deployment, names: list[str] | None = None) -> None:
    for name, section in deployment.workflows.items():
        if names is None or name in names:
            await wfi.activate(build_spec(deployment.resolve_path(section["workfile"]), deployment))


@dataclasses.dataclass
class Served:
    server: IngressServer
    ingress: Ingress
    http: httpx.AsyncClient

    @property
    def url(self) -> str:
        return self.server.url


@contextlib.asynccontextmanager
async def served(deployment: Deployment, client: Any, *, strict: bool = True) -> AsyncIterator[Served]:
    """The ingress of ``deployment`` on 127.0.0.1 (a free port) with an httpx client pointed at it."""
    ingress = build(deployment, client=client, strict=strict)
    server = await IngressServer.start(build_app(ingress), "127.0.0.1", 0, graceful_timeout=30,
                                       limits=limits_for(ingress.config), refusals=ingress.refusals,
                                       gauge=ingress.metrics.connections)
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            yield Served(server, ingress, http)
    finally:
        await server.stop()
