"""The ingress ASGI application (Starlette): HTTP requests in, ``deliver`` updates out, the durable
disposition back as the HTTP status.

One request: route -> method -> body read up to the limit (413) -> authentication on the raw bytes
(401) -> delivery id (400) -> payload -> a slot of its workflow (429 / 503) -> ``WfiClient.deliver``
(the disposition once durable, EXT-8) -> status by disposition. Nothing is acknowledged with a 2xx
before the activation retained it; every 5xx is safe to retry: the update id is derived from the
payload, so a retry that finds the first attempt applied gets its disposition (or ``duplicate``).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route as StarletteRoute

from wf_initiation import _temporal
from wf_initiation._codec import codec_problem
from wf_initiation._recovery import describer, shards_not_running
from wf_initiation.client import WfiClient
from wf_initiation.core.deployment import Deployment
from wf_initiation.core.engine import DeliveryResult, Disposition
from wf_initiation.core.limits import MAX_BULK
from wf_initiation.errors import (
    ActivationError,
    ActivationNotFound,
    CallTimeout,
    CodecError,
    DeliveryRefused,
    DeliveryTooLarge,
    SecretUnavailable,
    TemporalError,
    TemporalUnavailable,
    WfiError,
    most_specific,
)

from . import _auth, _payload
from ._connections import BodyDeadline, BodyTooSlow, RefusalLog, limits_for
from ._metrics import CONTENT_TYPE, IngressMetrics
from ._routes import RESERVED, Route, RouteTable
from ._secrets import SecretResolver
from .config import IngressConfig
from .limits import MAX_JSON_DEPTH

log = logging.getLogger("wf_initiation.ingress")

# Every disposition has its status here; one missing is a KeyError (a 500, never a 2xx), and
# tests/core/test_ingress_status.py fails on it. A 2xx tells GitHub, Stripe and Standard Webhooks senders
# that the event was delivered: they never send it again. So only what the activation kept (or had
# kept before: ``duplicate``) is a 2xx; what it did not keep is a 4xx (fix and resend) or a 503
# (send it again later).
STATUS: dict[Disposition, int] = {
    # Kept: the delivery id is consumed and a retry is answered ``duplicate``.
    Disposition.ACCEPTED: 202, Disposition.QUEUED: 202, Disposition.BATCHED: 202, Disposition.DELIVERED: 202,
    Disposition.UNMATCHED: 202, Disposition.SUPPRESSED: 202, Disposition.SKIPPED: 202,
    Disposition.GUARD_FAULT: 202, Disposition.KEY_FAULT: 202, Disposition.PROJECTION_FAULT: 202,
    Disposition.REFUSED: 409,  # recorded (the cycle guard, COMP-6); the sender's chain is at fault
    # Dispositions of a retained record, never the answer to a new delivery (``retained`` of a
    # duplicate): were one returned, the event was kept all the same.
    Disposition.QUARANTINED: 202, Disposition.DROPPED: 202, Disposition.START_FAULT: 202,
    Disposition.DUPLICATE: 200,  # kept before, with the same payload
    # Not kept: the delivery id is not consumed.
    Disposition.CONFLICT: 409,  # the first payload stands (EXT-4)
    Disposition.INVALID: 422,  # the payload fails the entry's manifest: fix it
    Disposition.DEACTIVATED: 503,  # deliver it again once the workflow is activated again
    Disposition.DEFERRED: 503,  # the activation is under pressure: deliver it again later (Retry-After)
    # Taken by the id's shard, not yet by its queue key's: WfiClient sends it on, so only a lane that
    # stayed unreachable leaves it; a retry is routed again.
    Disposition.ROUTED: 503,
}
REASONS = {
    Disposition.SUPPRESSED: "the trigger's `when` guard was false",
    Disposition.SKIPPED: "overlap: skip, and a run of this workflow is in flight",
    Disposition.UNMATCHED: "no active subscription matched",
    Disposition.REFUSED: "the cycle guard refused it (causation depth beyond max_causation_depth)",
    Disposition.DEFERRED: "the activation holds as much as it may for runs not started yet: nothing was kept; "
    "deliver it again after Retry-After",
}



@dataclasses.dataclass(frozen=True)
class Failed:
    """How the ingress answers a delivery that failed with one type of error.

    ``message`` and ``log`` are formats over ``workflow``, ``timeout``, ``task_queue`` and ``error``;
    a 4xx answers with the error's own message (the sender must fix the request); a ``log`` line is
    written once a minute per route and code (``RefusalLog``)."""

    status: int
    code: str
    message: str = ""
    log: str | None = None


# Every error WfiClient.deliver raises has its answer here, the nearest ancestor's when it has no
# row of its own (tests/core/test_ingress_errors.py checks each). Only 503s ask for a retry: nothing was
# kept, and the update id makes a retry that finds the first attempt applied safe.
DELIVERY_FAILURES: dict[type[WfiError], Failed] = {
    WfiError: Failed(503, "delivery_failed", "the delivery failed; retry later", "{error}"),
    DeliveryRefused: Failed(400, "payload_refused"),
    DeliveryTooLarge: Failed(413, "payload_too_large"),
    TemporalError: Failed(503, "temporal_error", "Temporal refused the delivery; retry later", "Temporal refused it: {error.detail}"),
    TemporalUnavailable: Failed(503, "temporal_unavailable", "Temporal cannot be reached; retry later", "{error}"),
    CodecError: Failed(503, "codec_unavailable", "the payload codec (encryption) of this activation cannot be used by "
                      "the ingress now; retry later", "payload codec: {error}"),
    CallTimeout: Failed(503, "timeout", "no durable disposition within {timeout:g}s; retrying is safe",
                        "no disposition within {timeout:g}s (is a worker running on task queue {task_queue!r}?)"),
    ActivationNotFound: Failed(503, "no_activation", "workflow {workflow!r} has no running activation; retry later"),
    ActivationError: Failed(503, "update_failed", "the activation could not take the delivery; retry later",
                            "the activation failed the update: {error}"),
}
RECEIVED_AT_MEMORY = 10_000
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
READY_CACHE_SECONDS = 2.0


class Pressure(WfiError):
    """No delivery slot for the workflow now (429 too many waiting, 503 busy): send it again later."""

    type = "busy"
    retryable = True

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code = status, code


class Gate:
    """At most ``slots`` deliveries in flight to one activation; at most ``max_waiting`` waiting."""

    def __init__(self, slots: int, max_waiting: int):
        self._sem = asyncio.Semaphore(slots)
        self.max_waiting = max_waiting
        self.waiting = 0

    async def enter(self, timeout: float, waiting_gauge: Any = None) -> None:
        if not self._sem.locked():  # a free slot: taken at once (acquire does not suspend)
            await self._sem.acquire()
            return
        if self.waiting >= self.max_waiting:
            raise Pressure(429, "too_many_waiting", f"{self.waiting} deliveries to this workflow are already waiting")
        self.waiting += 1
        if waiting_gauge is not None:
            waiting_gauge.inc()
        try:
            await asyncio.wait_for(self._sem.acquire(), timeout)
        except TimeoutError:
            raise Pressure(503, "busy", f"no delivery slot for this workflow within {timeout:g}s") from None
        finally:
            self.waiting -= 1
            if waiting_gauge is not None:
                waiting_gauge.dec()

    def leave(self) -> None:
        self._sem.release()


def error(status: int, code: str, message: str, retry_after: int | None = None, *,
          headers: dict[str, str] | None = None) -> JSONResponse:
    headers = {**(headers or {}), **({"Retry-After": str(retry_after)} if retry_after is not None else {})}
    return JSONResponse({"error": code, "message": message}, status_code=status, headers=headers or None)


class Ingress:
    """The state of one ingress app: routes, its Temporal client, gates, metrics."""

    def __init__(
        self, deployment: Deployment, config: IngressConfig, table: RouteTable, *, client: Any = None,
        connect: Callable[[], Awaitable[Any]] | None = None, secrets: SecretResolver | None = None,
    ):
        self.deployment, self.config, self.table = deployment, config, table
        self.secrets = secrets or SecretResolver()
        self.metrics = IngressMetrics()
        self.refusals = RefusalLog(log, self.metrics.connections_refused)
        # Senders choose how often they fail to authenticate: logged once a minute per route and reason.
        self.auth_refusals = RefusalLog(log, what="requests refused", metric="wfi_ingress_auth_failures_total")
        self.delivery_failures = RefusalLog(log, what="deliveries answered 503",
                                            metric='wfi_ingress_requests_total{status="503"}')
        self._client = client
        self._connect = connect
        self._wfi_client: WfiClient | None = None
        self._connect_lock = asyncio.Lock()
        self._gates: dict[str, Gate] = {}
        self._received: collections.OrderedDict[tuple[str, str, str], str] = collections.OrderedDict()
        self._ready: tuple[float, int, dict[str, Any]] | None = None

    # ------------------------------------------------------------------ Temporal
    async def client(self) -> Any:
        """The Temporal client, connected on first use (so the app starts while Temporal is down)."""
        if self._client is None:
            async with self._connect_lock:
                if self._client is None:
                    connect = self._connect or (lambda: _temporal.connect(self.deployment))
                    self._client = await connect()
        return self._client

    def _wfi(self, client: Any) -> WfiClient:
        if self._wfi_client is None or self._wfi_client.client is not client:
            self._wfi_client = WfiClient(client, task_queue=self.deployment.temporal.task_queue,
                                         update_timeout=self.config.delivery_timeout,
                                         group_deliveries=self.config.group_deliveries,
                                         group_window=self.config.group_window, groups_in_flight=self.config.groups_in_flight)
        return self._wfi_client

    # ------------------------------------------------------------------ delivery routes
    async def hook(self, request: Request) -> Response:
        """``/hooks/{workflow}/{entry}`` and ``/hooks/{workflow}``."""
        request.state.route_label = "/hooks/{workflow}/{entry}" if "entry" in request.path_params else "/hooks/{workflow}"
        route = self.table.find(request.path_params["workflow"], request.path_params.get("entry"))
        if route is None or not self.config.generic_routes:
            return error(404, "unknown_route", f"no external trigger entry is served at {path_of(request)}")
        return await self.handle(request, route)

    def declared(self, route: Route, path: str) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            request.state.route_label = path
            return await self.handle(request, route)
        return endpoint

    async def handle(self, request: Request, route: Route) -> Response:
        if request.method not in route.methods:
            return JSONResponse({"error": "method_not_allowed", "message": f"{route.label} accepts "
                                 f"{', '.join(sorted(route.methods))}"}, status_code=405,
                                headers={"Allow": ", ".join(sorted(route.methods))})
        try:
            raw = await self._read_body(request)
            body = _payload.decode_content(raw, ", ".join(request.headers.getlist("content-encoding")),
                                           self.config.max_body_bytes)
            headers = {k.lower(): v for k, v in request.headers.items()}
            refused = self._authenticate(route, headers, body, request, raw=raw)
            if refused is not None:
                return refused
            payload, update_id = self._payload(route, request, headers, body)
        except ClientDisconnect:  # the sender went away mid-body: nothing to answer, nothing delivered
            return error(400, "client_disconnected", "the request body was not received in full")
        except BodyTooSlow as exc:
            self.refusals.note("body_too_slow", str(exc))
            return error(408, "body_too_slow", f"{exc}: send the body at once", headers={"Connection": "close"})
        except _payload.BadRequest as exc:
            return error(exc.status, exc.code, str(exc), headers=exc.headers)
        return await self._deliver(route, payload, update_id)

    async def _read_body(self, request: Request) -> bytes:
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length")
        too_large = _payload.BadRequest(413, "body_too_large", f"the body is over the limit of {limit} bytes: "
                                        "send a reference (URL, object key) instead of the content")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_large
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large
            chunks.append(chunk)
        return b"".join(chunks)

    def _authenticate(self, route: Route, headers: dict[str, str], body: bytes, request: Request, *,
                      raw: bytes) -> Response | None:
        """Verify the sender; a compressed body's signature may be over either form of it."""
        peer = request.client.host if request.client else "?"
        where = f"{request.method} {path_of(request)} from {peer}"
        if route.auth is None:
            self.auth_refusals.note(f"{route.label}: no authentication configured",
                                    f"{where}; add an ingress.endpoints item with auth: (or ingress.default_auth)")
            self.metrics.auth_failures.labels(route.workflow, route.entry).inc()
            return error(401, "unauthenticated", "this endpoint has no authentication configured")
        try:
            secrets = [self.secrets.value(s) for s in route.secrets]
        except SecretUnavailable as exc:
            self.auth_refusals.note(f"{route.label}: secret unavailable", f"{exc}; answered 503")
            return error(503, "endpoint_unconfigured", "this endpoint's secret is not available to the ingress",
                         retry_after=self.config.retry_after)
        now = datetime.now(UTC)
        result = _auth.verify(route.auth.scheme, headers, body, now, secrets,
                              tolerance=route.auth.tolerance, token_header=route.auth.header)
        if not result.ok and raw is not body:
            over_raw = _auth.verify(route.auth.scheme, headers, raw, now, secrets,
                                    tolerance=route.auth.tolerance, token_header=route.auth.header)
            result = over_raw if over_raw.ok else result
        if result.ok:
            return None
        self.auth_refusals.note(f"{route.label}: {result.code}", f"{result.reason}; {where}")
        self.metrics.auth_failures.labels(route.workflow, route.entry).inc()
        return error(401, "unauthenticated", result.reason)

    def _payload(self, route: Route, request: Request, headers: dict[str, str], body: bytes) -> tuple[Any, str]:
        github = route.auth is not None and route.auth.scheme == "github"
        parsed = _payload.parse_body(body, headers.get("content-type"), self._body_depth(route), form_payload=github)
        if not route.envelope:
            if parsed is None:
                raise _payload.BadRequest(400, "empty_body", f"{route.connector} expects its payload as the JSON body")
            return parsed, self._update_id()
        delivery_id = self._delivery_id(route, headers, parsed)
        token_header = route.auth.header if route.auth is not None and route.auth.header else None
        payload = _payload.request_payload(
            delivery_id=delivery_id, method=request.method, path=route.canonical_path,
            headers=_payload.kept_headers(request.headers.items(), route.headers, [token_header] if token_header else []),
            query=_payload.fields(request.scope["query_string"].decode("iso8859-1"), "utf-8", what="query parameter"),
            body=_payload.without_paths(parsed, route.ignore_body),
        )
        if route.received_at:
            payload["received_at"] = self._received_at((route.workflow, route.entry, delivery_id))
        _payload.check_envelope(payload)
        return payload, self._update_id()

    def _update_id(self) -> str:
        """This request's update id; none when deliveries are grouped (a group's update has its own)."""
        return "" if self.config.group_deliveries else request_update_id()

    def _body_depth(self, route: Route) -> int:
        """An http.request payload holds the body one level down, under ``body``: the payload's
        depth limit leaves the body one level less."""
        return min(self.config.max_json_depth, MAX_JSON_DEPTH - 1) if route.envelope else self.config.max_json_depth

    def _delivery_id(self, route: Route, headers: dict[str, str], parsed: Any) -> str:
        source = route.delivery_id
        assert source is not None  # every envelope route has one (_routes)
        if source.header is not None:
            found = _payload.header_delivery_id(headers, source.header)
            where = f"the {source.header} header"
        else:
            found = _payload.body_delivery_id(parsed, source.body or "")
            where = f"the body field {source.body!r}"
        if found is None:
            hint = " (IETF Idempotency-Key draft: a unique key per event, the same on every retry)" \
                if source.header and source.header.lower() == _payload.IDEMPOTENCY_KEY else ""
            raise _payload.BadRequest(400, "missing_delivery_id", f"no delivery id: send it in {where}{hint}")
        return found

    def _received_at(self, key: tuple[str, str, str]) -> str:
        """When this process first saw the delivery id (remembered for the last 10,000 ids)."""
        seen = self._received.get(key)
        if seen is None:
            seen = datetime.now(UTC).isoformat()
            self._received[key] = seen
            if len(self._received) > RECEIVED_AT_MEMORY:
                self._received.popitem(last=False)
        return seen

    async def _deliver(self, route: Route, payload: Any, update_id: str) -> Response:
        gate = self._gates.get(route.workflow)
        if gate is None:
            gate = self._gates[route.workflow] = Gate(self._slots(), self.config.max_waiting)
        try:
            await gate.enter(self.config.queue_timeout.total_seconds(), self.metrics.waiting.labels(route.workflow))
        except Pressure as exc:
            return error(exc.status, exc.code, str(exc), retry_after=self.config.retry_after)
        self.metrics.in_flight.inc()
        try:
            result = await self._call(route, payload, update_id)
        finally:
            self.metrics.in_flight.dec()
            gate.leave()
        if isinstance(result, Response):
            return result
        self.metrics.deliveries.labels(route.workflow, route.entry, result.disposition.value).inc()
        return disposition_response(route, result, self.config.retry_after, self.config.deferred_retry_after)

    def _slots(self) -> int:
        """Deliveries in flight per workflow: one an update, or, grouped, up to 500 an update."""
        config = self.config
        return max(config.updates_per_workflow, config.groups_in_flight * MAX_BULK) if config.group_deliveries \
            else config.updates_per_workflow

    async def _call(self, route: Route, payload: Any, update_id: str) -> DeliveryResult | Response:
        timeout = self.config.delivery_timeout.total_seconds()
        try:
            wfi = self._wfi(await self.client())
            async with asyncio.timeout(timeout):  # WfiClient ends its call on cancellation
                grouped = self.config.group_deliveries  # a group's update id binds its members' content
                return await wfi.deliver(route.workflow, payload, entry=route.entry, update_id=None if grouped else update_id)
        except TimeoutError:
            return self._failed(route, CallTimeout(f"no disposition within {timeout:g}s"))
        except WfiError as exc:
            return self._failed(route, exc)

    def _failed(self, route: Route, failure: WfiError) -> Response:
        """The answer to a delivery that failed, by the table ``DELIVERY_FAILURES``."""
        row = DELIVERY_FAILURES[most_specific(type(failure), DELIVERY_FAILURES) or WfiError]
        facts = {"workflow": route.workflow, "timeout": self.config.delivery_timeout.total_seconds(),
                 "task_queue": self.deployment.temporal.task_queue, "error": failure}
        if row.log is not None:
            self.delivery_failures.note(f"{route.label}: {row.code}", row.log.format(**facts))
        if row.status < 500:  # what the sender sent cannot be delivered: the same on every retry
            return error(row.status, row.code, str(failure))
        return error(row.status, row.code, row.message.format(**facts), retry_after=self.config.retry_after)

    # ------------------------------------------------------------------ operations
    async def healthz(self, request: Request) -> Response:
        request.state.route_label = "/healthz"
        return JSONResponse({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        """Ready while Temporal answers and at least one served workflow has a running activation:
        a load balancer keeps the ingress while it can serve any workflow. The body lists each."""
        request.state.route_label = "/readyz"
        status, body = await self._readiness_snapshot()
        return JSONResponse(body, status_code=status)

    async def readyz_workflow(self, request: Request) -> Response:
        """``/readyz/{workflow}``: 200 while that workflow's activation runs, else 503; 404 if not served."""
        request.state.route_label = "/readyz/{workflow}"
        workflow = request.path_params["workflow"]
        if workflow not in self.served_workflows():
            return error(404, "unknown_workflow", f"this ingress serves no workflow {workflow[:100]!r}")
        _, body = await self._readiness_snapshot()
        state = body.get("activations", {}).get(workflow, "unknown: " + str(body.get("temporal")))
        ready = body["temporal"] == "ok" and state == "running"
        return JSONResponse({"ready": ready, "workflow": workflow, "temporal": body["temporal"], "activation": state},
                            status_code=200 if ready else 503)

    def served_workflows(self) -> list[str]:
        return sorted({r.workflow for r in self.table.by_name.values()})

    async def _readiness_snapshot(self) -> tuple[int, dict[str, Any]]:
        now = time.monotonic()
        if self._ready is None or now - self._ready[0] > READY_CACHE_SECONDS:
            status, body = await self._readiness()
            self._ready = (now, status, body)
        return self._ready[1], self._ready[2]

    async def _readiness(self) -> tuple[int, dict[str, Any]]:
        try:
            client = await asyncio.wait_for(self.client(), 5)
            healthy = await asyncio.wait_for(client.service_client.check_health(), 5)
        except Exception as exc:  # any failure to reach Temporal means not ready; the reason is reported
            return 503, {"ready": False, "temporal": f"unreachable: {str(exc)[:200]}"}
        if not healthy:
            return 503, {"ready": False, "temporal": "not serving"}
        codec = await codec_problem(client.data_converter)
        if codec is not None:  # every delivery would fail on it
            return 503, {"ready": False, "temporal": "ok", "codec": codec}
        workflows = self.served_workflows()
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
            shards = await asyncio.wait_for(self._wfi(client).shards(workflow), 5)
            return await shards_not_running(describer(client, workflow), shards)
        except Exception:  # noqa: BLE001 - readiness reports what it can read; an unread shard count lists nothing
            return []

    async def _activation(self, client: Any, workflow: str) -> str:
        try:
            status = await asyncio.wait_for(self._wfi(client).activation_status(workflow), 5)
        except ActivationNotFound:
            return "missing"
        except WfiError as exc:
            return f"unknown: {str(exc)[:100]}"
        except TimeoutError:
            return "unknown: describe timed out"
        return status if status == "running" else f"missing ({status})"

    async def metrics_endpoint(self, request: Request) -> Response:
        request.state.route_label = "/metrics"
        return Response(self.metrics.exposition(), media_type=CONTENT_TYPE)


def path_of(request: Request) -> str:
    """The request's path as parsed by the server, cut for logs and messages (``request.url`` would
    parse the sender's Host header, and fail on one that is not a host)."""
    path = str(request.scope.get("path", ""))
    return path if len(path) <= 200 else path[:200] + "..."


def request_update_id() -> str:
    """One update id per HTTP request (WfiClient reuses it for its own retries of the call). A
    sender's retry is a new update, so the activation answers it ``duplicate`` with the retained
    disposition (or ``conflict``), rather than the server replaying the first update's result."""
    return f"http-{uuid.uuid4().hex}"


def disposition_response(route: Route, result: DeliveryResult, retry_after: int, deferred_retry_after: int) -> JSONResponse:
    body: dict[str, Any] = {
        "disposition": result.disposition.value, "workflow": route.workflow, "entry": result.entry or route.entry,
        "delivery_id": result.delivery_id, "run_key": result.run_key, "activation_id": result.activation_id,
    }
    if result.retained is not None:
        body["retained"] = result.retained.value
    reason = result.message or REASONS.get(result.disposition)
    if reason:
        body["reason"] = reason
    status = STATUS[result.disposition]
    wait = deferred_retry_after if result.disposition == Disposition.DEFERRED else retry_after
    headers = {"Retry-After": str(wait)} if status == 503 else None
    return JSONResponse(body, status_code=status, headers=headers)


class _Observe:
    """ASGI middleware: every HTTP request counted by route label and status, and timed."""

    def __init__(self, app: Any, metrics: IngressMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began, status = time.perf_counter(), 500
        state = scope.setdefault("state", {})

        async def observed(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, observed)
        finally:
            self.metrics.observe(state.get("route_label", "unmatched"), scope.get("method", "?"), status,
                                 time.perf_counter() - began)


async def _not_found(request: Request, exc: Exception) -> Response:
    # Registered for 404 and 405 only, which Starlette raises as HTTPException.
    status, detail = (exc.status_code, exc.detail) if isinstance(exc, HTTPException) else (404, "")
    if status == 405:
        return error(405, "method_not_allowed", f"{request.method} is not accepted at {path_of(request)}")
    if status != 404:
        return error(status, "http_error", str(detail))
    path, bare = path_of(request), path_of(request).rstrip("/")
    # No redirect to the path without the slash (Starlette's would name the sender's Host): named instead.
    hint = f"; {bare} is (without the trailing slash)" if bare != path and _served(request, bare) else ""
    return error(404, "unknown_route", f"nothing is served at {path}{hint}")


def _served(request: Request, path: str) -> bool:
    table, parts = request.app.state.ingress.table, path.split("/")
    generic = len(parts) in (3, 4) and parts[1] == "hooks" and request.app.state.ingress.config.generic_routes
    return path in table.by_path or path in RESERVED or (generic and table.find(parts[2], parts[3] if len(parts) == 4 else None) is not None)


async def _server_error(request: Request, exc: Exception) -> Response:
    # Starlette logs the traceback and re-raises; the sender gets JSON and may retry (nothing was
    # acknowledged: a delivery is answered 2xx only with its durable disposition).
    return error(500, "internal_error", "the ingress failed on this request; retrying is safe")


def build_app(ingress: Ingress) -> Starlette:
    routes = [
        StarletteRoute("/healthz", ingress.healthz, methods=["GET"]),
        StarletteRoute("/readyz", ingress.readyz, methods=["GET"]),
        StarletteRoute("/readyz/{workflow}", ingress.readyz_workflow, methods=["GET"]),
        StarletteRoute("/metrics", ingress.metrics_endpoint, methods=["GET"]),
    ]
    # Every method reaches the handler, which answers 405 naming the entry's methods: a route that
    # refused a method would let the request fall through to a /hooks/{workflow} pattern (404).
    for path, route in ingress.table.by_path.items():
        routes.append(StarletteRoute(path, ingress.declared(route, path), methods=METHODS))
    routes += [
        StarletteRoute("/hooks/{workflow}/{entry}", ingress.hook, methods=METHODS),
        StarletteRoute("/hooks/{workflow}", ingress.hook, methods=METHODS),
    ]
    app = Starlette(routes=routes, exception_handlers={404: _not_found, 405: _not_found, Exception: _server_error})
    app.router.redirect_slashes = False  # its redirect's Location is built from the sender's Host header
    app.state.ingress = ingress
    app.add_middleware(_Observe, metrics=ingress.metrics)
    app.add_middleware(BodyDeadline, limits=limits_for(ingress.config))
    return app
