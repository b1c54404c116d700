"""The ingress as an ASGI application: Starlette's routing, requests and responses around the
framework-free receiver of :mod:`._receiver` (which says what one request goes through).

Only translation lives here: Starlette's routes to the hooks (``_hooks``), a Starlette request
becomes an :class:`HttpRequest` (headers, query string, the body's stream), an :class:`HttpResponse`
a Starlette response; the health, readiness and metrics endpoints; every request counted and timed
by its route label (Starlette's word, and the metric's); 404/405/500 as JSON.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route as StarletteRoute

from ._connections import BodyDeadline, limits_for
from ._hooks import RESERVED, Hook
from ._http import Disconnected, HttpRequest, HttpResponse, error
from ._metrics import CONTENT_TYPE, IngressMetrics
from ._receiver import DELIVERY_FAILURES, STATUS, Ingress, disposition_response  # noqa: F401  (the tables: read here by tests)

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


def build_app(ingress: Ingress) -> Starlette:
    """The Starlette application serving ``ingress``'s hooks, health, readiness and metrics."""
    routes = [
        StarletteRoute("/healthz", _healthz, methods=["GET"]),
        StarletteRoute("/readyz", _readyz(ingress), methods=["GET"]),
        StarletteRoute("/readyz/{workflow}", _readyz_workflow(ingress), methods=["GET"]),
        StarletteRoute("/metrics", _metrics(ingress), methods=["GET"]),
    ]
    # Every method reaches the receiver, which answers 405 naming the entry's methods: a Starlette route
    # that refused a method would let the request fall through to a /hooks/{workflow} pattern (404).
    for path, hook in ingress.table.by_path.items():
        routes.append(StarletteRoute(path, _declared(ingress, hook, path), methods=METHODS))
    generic = _generic(ingress)
    routes += [
        StarletteRoute("/hooks/{workflow}/{entry}", generic, methods=METHODS),
        StarletteRoute("/hooks/{workflow}", generic, methods=METHODS),
    ]
    app = Starlette(routes=routes, exception_handlers={404: _not_found, 405: _not_found, Exception: _server_error})
    app.router.redirect_slashes = False  # its redirect's Location is built from the sender's Host header
    app.state.ingress = ingress
    app.add_middleware(_Observe, metrics=ingress.metrics)
    app.add_middleware(BodyDeadline, limits=limits_for(ingress.config))
    return app


Endpoint = Callable[[Request], Awaitable[Response]]


def _generic(ingress: Ingress) -> Endpoint:
    """``/hooks/{workflow}/{entry}`` and ``/hooks/{workflow}``."""
    async def generic(request: Request) -> Response:
        request.state.route_label = "/hooks/{workflow}/{entry}" if "entry" in request.path_params else "/hooks/{workflow}"
        hook = ingress.table.find(request.path_params["workflow"], request.path_params.get("entry"))
        if hook is None or not ingress.config.generic_routes:
            return _response(error(404, "unknown_route", f"no external trigger entry is served at {path_of(request)}"))
        return _response(await ingress.receive(hook, _plain(request)))
    return generic


def _declared(ingress: Ingress, hook: Hook, path: str) -> Endpoint:
    """A path an entry or an ``ingress.endpoints`` item declares."""
    async def endpoint(request: Request) -> Response:
        request.state.route_label = path
        return _response(await ingress.receive(hook, _plain(request)))
    return endpoint


def _plain(request: Request) -> HttpRequest:
    scope = request.scope
    return HttpRequest(method=request.method, path=path_of(request),
                       headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]],
                       body=_body(request), query=scope["query_string"].decode("iso8859-1"),
                       peer=request.client.host if request.client else "?")


async def _body(request: Request) -> AsyncIterator[bytes]:
    try:
        async for chunk in request.stream():
            yield chunk
    except ClientDisconnect:
        raise Disconnected from None


def _response(answer: HttpResponse) -> Response:
    return Response(answer.body, status_code=answer.status_code, headers=answer.headers or None,
                    media_type="application/json")


async def _healthz(request: Request) -> Response:
    request.state.route_label = "/healthz"
    return JSONResponse({"status": "ok"})


def _readyz(ingress: Ingress) -> Endpoint:
    async def readyz(request: Request) -> Response:
        request.state.route_label = "/readyz"
        status, body = await ingress.readiness.overall()
        return JSONResponse(body, status_code=status)
    return readyz


def _readyz_workflow(ingress: Ingress) -> Endpoint:
    """``/readyz/{workflow}``: 200 while that workflow's activation runs, else 503; 404 if not served."""
    async def readyz_workflow(request: Request) -> Response:
        request.state.route_label = "/readyz/{workflow}"
        workflow = request.path_params["workflow"]
        if workflow not in ingress.served_workflows():
            return _response(error(404, "unknown_workflow", f"this ingress serves no workflow {workflow[:100]!r}"))
        status, body = await ingress.readiness.of_workflow(workflow)
        return JSONResponse(body, status_code=status)
    return readyz_workflow


def _metrics(ingress: Ingress) -> Endpoint:
    async def metrics(request: Request) -> Response:
        request.state.route_label = "/metrics"
        return Response(ingress.metrics.exposition(), media_type=CONTENT_TYPE)
    return metrics


def path_of(request: Request) -> str:
    """The request's path as parsed by the server, cut for logs and messages (``request.url`` would
    parse the sender's Host header, and fail on one that is not a host)."""
    path = str(request.scope.get("path", ""))
    return path if len(path) <= 200 else path[:200] + "..."


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
        return _response(error(405, "method_not_allowed", f"{request.method} is not accepted at {path_of(request)}"))
    if status != 404:
        return _response(error(status, "http_error", str(detail)))
    path, bare = path_of(request), path_of(request).rstrip("/")
    # No redirect to the path without the slash (Starlette's would name the sender's Host): named instead.
    hint = f"; {bare} is (without the trailing slash)" if bare != path and _served(request, bare) else ""
    return _response(error(404, "unknown_route", f"nothing is served at {path}{hint}"))


def _served(request: Request, path: str) -> bool:
    ingress: Ingress = request.app.state.ingress
    table, parts = ingress.table, path.split("/")
    generic = len(parts) in (3, 4) and parts[1] == "hooks" and ingress.config.generic_routes
    return path in table.by_path or path in RESERVED or (generic and table.find(parts[2], parts[3] if len(parts) == 4 else None) is not None)


async def _server_error(request: Request, exc: Exception) -> Response:
    # Starlette logs the traceback and re-raises; the sender gets JSON and may retry (nothing was
    # acknowledged: a delivery is answered 2xx only with its durable disposition).
    return _response(error(500, "internal_error", "the ingress failed on this request; retrying is safe"))
