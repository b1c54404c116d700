"""Whether the ingress can serve: Temporal answers, the codec works, and which served workflows have a
running activation (``/readyz``, ``/readyz/{workflow}``); no web framework here."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from wf_initiation._codec import codec_problem
from wf_initiation._recovery import describer, shards_not_running
from wf_initiation.errors import ActivationNotFound, WfiError

if TYPE_CHECKING:
    from ._receiver import Ingress

READY_CACHE_SECONDS = 2.0


class Readiness:
    """The ingress's readiness, asked of Temporal at most once every ``READY_CACHE_SECONDS``."""

    def __init__(self, ingress: Ingress) -> None:
        self._ingress = ingress
        self._ready: tuple[float, int, dict[str, Any]] | None = None

    async def overall(self) -> tuple[int, dict[str, Any]]:
        """(status, body): ready while Temporal answers and at least one served workflow has a running
        activation (a load balancer keeps the ingress while it can serve any workflow); the body lists each."""
        now = time.monotonic()
        if self._ready is None or now - self._ready[0] > READY_CACHE_SECONDS:
            status, body = await self._readiness()
            self._ready = (now, status, body)
        return self._ready[1], self._ready[2]

    async def of_workflow(self, workflow: str) -> tuple[int, dict[str, Any]]:
        """(status, body) of one served workflow: 200 while its activation runs, else 503."""
        _, body = await self.overall()
        state = body.get("activations", {}).get(workflow, "unknown: " + str(body.get("temporal")))
        ready = body["temporal"] == "ok" and state == "running"
        return (200 if ready else 503), {"ready": ready, "workflow": workflow, "temporal": body["temporal"],
                                         "activation": state}

    async def _readiness(self) -> tuple[int, dict[str, Any]]:
        try:
            client = await asyncio.wait_for(self._ingress.client(), 5)
            healthy = await asyncio.wait_for(client.service_client.check_health(), 5)
        except Exception as exc:  # any failure to reach Temporal means not ready; the reason is reported
            return 503, {"ready": False, "temporal": f"unreachable: {str(exc)[:200]}"}
        if not healthy:
            return 503, {"ready": False, "temporal": "not serving"}
        codec = await codec_problem(client.data_converter)
        if codec is not None:  # every delivery would fail on it
            return 503, {"ready": False, "temporal": "ok", "codec": codec}
        workflows = self._ingress.served_workflows()
        states = dict(zip(workflows, await asyncio.gather(*(self._activation(client, w) for w in workflows))))
        serving = [w for w, state in states.items() if state == "running"]
        ready = bool(serving)
        body = {"ready": ready, "temporal": "ok", "serving": serving, "activations": states}
        stopped = dict(zip(serving, await asyncio.gather(*(self._stopped_shards(client, w) for w in serving))))
        if any(stopped.values()):  # their ids are answered 503 until `wfi activate` starts them again
            body["shards_not_running"] = {w: shards for w, shards in stopped.items() if shards}
        return (200 if ready else 503), body

    async def _stopped_shards(self, client: Any, workflow: str) -> list[dict[str, Any]]:
        try:
            shards = await asyncio.wait_for(self._ingress.wfi(client).shards(workflow), 5)
            return await shards_not_running(describer(client, workflow), shards)
        except Exception:  # noqa: BLE001 - readiness reports what it can read; an unread shard count lists nothing
            return []

    async def _activation(self, client: Any, workflow: str) -> str:
        try:
            status = await asyncio.wait_for(self._ingress.wfi(client).activation_status(workflow), 5)
        except ActivationNotFound:
            return "missing"
        except WfiError as exc:
            return f"unknown: {str(exc)[:100]}"
        except TimeoutError:
            return "unknown: describe timed out"
        return status if status == "running" else f"missing ({status})"
