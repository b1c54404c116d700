"""The ingress's receiver, with no web framework: a plain request in, a plain response out.

One request to a served entry (:meth:`Ingress.receive`): method (405) -> body read up to the limit
(413) and its content-coding undone -> authentication on the raw bytes (401) -> delivery id (400)
-> payload -> a slot of its workflow (429 / 503) -> ``WfiClient.deliver`` (the disposition once
durable, EXT-8) -> status by disposition. Nothing is acknowledged with a 2xx before the activation
retained it; every 5xx is safe to retry: the update id is derived from the payload, so a retry that
finds the first attempt applied gets its disposition (or ``duplicate``).

``_app`` adapts it to Starlette (routing, the request's body stream, the response); a test or another
framework drives it with :class:`HttpRequest` and reads :class:`HttpResponse` (inngest-py's
``CommHandler`` under its per-framework adapters).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from wf_initiation import _temporal
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
from ._gates import Gate, Pressure
from ._hooks import Hook, HookTable
from ._http import Disconnected, HttpRequest, HttpResponse, error, json_response
from ._metrics import IngressMetrics
from ._readiness import Readiness
from ._refusals import BodyTooSlow, RefusalLog
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
    # Taken by the id's shard, not yet by its lane (its queue key's shard): WfiClient sends it on, so
    # only a lane that stayed unreachable leaves it; a retry is routed again.
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
    written once a minute per hook and code (``RefusalLog``)."""

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


class Ingress:
    """The state of one ingress: its hooks, its Temporal client, gates, metrics; the receiver."""

    def __init__(
        self, deployment: Deployment, config: IngressConfig, table: HookTable, *, client: Any = None,
        connect: Callable[[], Awaitable[Any]] | None = None, secrets: SecretResolver | None = None,
    ):
        self.deployment, self.config, self.table = deployment, config, table
        self.secrets = secrets or SecretResolver()
        self.metrics = IngressMetrics()
        self.refusals = RefusalLog(log, self.metrics.connections_refused)
        # Senders choose how often they fail to authenticate: logged once a minute per hook and reason.
        self.auth_refusals = RefusalLog(log, what="requests refused", metric="wfi_ingress_auth_failures_total")
        self.delivery_failures = RefusalLog(log, what="deliveries answered 503",
                                            metric='wfi_ingress_requests_total{status="503"}')
        self._client = client
        self._connect = connect
        self._wfi_client: WfiClient | None = None
        self._connect_lock = asyncio.Lock()
        self._gates: dict[str, Gate] = {}
        self._received: collections.OrderedDict[tuple[str, str, str], str] = collections.OrderedDict()
        self.readiness = Readiness(self)

    # ------------------------------------------------------------------ Temporal
    async def client(self) -> Any:
        """The Temporal client, connected on first use (so the app starts while Temporal is down)."""
        if self._client is None:
            async with self._connect_lock:
                if self._client is None:
                    connect = self._connect or (lambda: _temporal.connect(self.deployment))
                    self._client = await connect()
        return self._client

    def wfi(self, client: Any) -> WfiClient:
        """The ``WfiClient`` over ``client`` with the ingress's delivery settings (made once)."""
        if self._wfi_client is None or self._wfi_client.client is not client:
            self._wfi_client = WfiClient(client, task_queue=self.deployment.temporal.task_queue,
                                         update_timeout=self.config.delivery_timeout,
                                         group_deliveries=self.config.group_deliveries,
                                         group_window=self.config.group_window, groups_in_flight=self.config.groups_in_flight)
        return self._wfi_client

    def served_workflows(self) -> list[str]:
        return sorted({r.workflow for r in self.table.by_name.values()})

    # ------------------------------------------------------------------ the receiver
    async def receive(self, hook: Hook, request: HttpRequest) -> HttpResponse:
        """Answer one request to ``hook``'s entry (see the module docstring)."""
        if request.method not in hook.methods:
            allowed = ", ".join(sorted(hook.methods))
            return error(405, "method_not_allowed", f"{hook.label} accepts {allowed}", headers={"allow": allowed})
        try:
            raw = await self._read_body(request)
            encodings = ", ".join(v for k, v in request.headers if k == "content-encoding")
            body = _payload.decode_content(raw, encodings, self.config.max_body_bytes)
            headers = {k.lower(): v for k, v in request.headers}
            refused = self._authenticate(hook, headers, body, request, raw=raw)
            if refused is not None:
                return refused
            payload, update_id = self._payload(hook, request, headers, body)
        except Disconnected:  # the sender went away mid-body: nothing to answer, nothing delivered
            return error(400, "client_disconnected", "the request body was not received in full")
        except BodyTooSlow as exc:
            self.refusals.note("body_too_slow", str(exc))
            return error(408, "body_too_slow", f"{exc}: send the body at once", headers={"connection": "close"})
        except _payload.BadRequest as exc:
            return error(exc.status, exc.code, str(exc), headers=exc.headers)
        return await self._deliver(hook, payload, update_id)

    async def _read_body(self, request: HttpRequest) -> bytes:
        limit = self.config.max_body_bytes
        declared = next((v for k, v in request.headers if k == "content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise body_too_large(limit)  # refused unread: the connection closes after the answer
        got, size = [], 0
        async for chunk in request.body:
            size += len(chunk)
            if size > limit:
                raise body_too_large(limit)
            got.append(chunk)
        return b"".join(got)

    def _authenticate(self, hook: Hook, headers: dict[str, str], body: bytes, request: HttpRequest, *,
                      raw: bytes) -> HttpResponse | None:
        """Verify the sender; a compressed body's signature may be over either form of it."""
        where = f"{request.method} {request.path} from {request.peer}"
        if hook.auth is None:
            self.auth_refusals.note(f"{hook.label}: no authentication configured",
                                    f"{where}; add an ingress.endpoints item with auth: (or ingress.default_auth)")
            self.metrics.auth_failures.labels(hook.workflow, hook.entry).inc()
            return error(401, "unauthenticated", "this endpoint has no authentication configured")
        try:
            secrets = [self.secrets.value(s) for s in hook.secrets]
        except SecretUnavailable as exc:
            self.auth_refusals.note(f"{hook.label}: secret unavailable", f"{exc}; answered 503")
            return error(503, "endpoint_unconfigured", "this endpoint's secret is not available to the ingress",
                         retry_after=self.config.retry_after)
        now = datetime.now(UTC)
        result = _auth.verify(hook.auth.scheme, headers, body, now, secrets,
                              tolerance=hook.auth.tolerance, token_header=hook.auth.header)
        if not result.ok and raw is not body:
            over_raw = _auth.verify(hook.auth.scheme, headers, raw, now, secrets,
                                    tolerance=hook.auth.tolerance, token_header=hook.auth.header)
            result = over_raw if over_raw.ok else result
        if result.ok:
            return None
        self.auth_refusals.note(f"{hook.label}: {result.code}", f"{result.reason}; {where}")
        self.metrics.auth_failures.labels(hook.workflow, hook.entry).inc()
        return error(401, "unauthenticated", result.reason)

    def _payload(self, hook: Hook, request: HttpRequest, headers: dict[str, str], body: bytes) -> tuple[Any, str]:
        github = hook.auth is not None and hook.auth.scheme == "github"
        parsed = _payload.parse_body(body, headers.get("content-type"), self._body_depth(hook), form_payload=github)
        if not hook.envelope:
            if parsed is None:
                raise _payload.BadRequest(400, "empty_body", f"{hook.connector} expects its payload as the JSON body")
            return parsed, self._update_id()
        delivery_id = self._delivery_id(hook, headers, parsed)
        token_header = hook.auth.header if hook.auth is not None and hook.auth.header else None
        payload = _payload.request_payload(
            delivery_id=delivery_id, method=request.method, path=hook.canonical_path,
            headers=_payload.kept_headers(request.headers, hook.headers, [token_header] if token_header else []),
            query=_payload.fields(request.query, "utf-8", what="query parameter"),
            body=_payload.without_paths(parsed, hook.ignore_body),
        )
        if hook.received_at:
            payload["received_at"] = self._received_at((hook.workflow, hook.entry, delivery_id))
        _payload.check_envelope(payload)
        return payload, self._update_id()

    def _update_id(self) -> str:
        """This request's update id; none when deliveries are grouped (a group's update has its own)."""
        return "" if self.config.group_deliveries else request_update_id()

    def _body_depth(self, hook: Hook) -> int:
        """An http.request payload holds the body one level down, under ``body``: the payload's
        depth limit leaves the body one level less."""
        return min(self.config.max_json_depth, MAX_JSON_DEPTH - 1) if hook.envelope else self.config.max_json_depth

    def _delivery_id(self, hook: Hook, headers: dict[str, str], parsed: Any) -> str:
        source = hook.delivery_id
        assert source is not None  # every envelope hook has one (_hooks)
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

    async def _deliver(self, hook: Hook, payload: Any, update_id: str) -> HttpResponse:
        gate = self._gates.get(hook.workflow)
        if gate is None:
            gate = self._gates[hook.workflow] = Gate(self._slots(), self.config.max_waiting)
        try:
            await gate.enter(self.config.queue_timeout.total_seconds(), self.metrics.waiting.labels(hook.workflow))
        except Pressure as exc:
            return error(exc.status, exc.code, str(exc), retry_after=self.config.retry_after)
        self.metrics.in_flight.inc()
        try:
            result = await self._call(hook, payload, update_id)
        finally:
            self.metrics.in_flight.dec()
            gate.leave()
        if isinstance(result, HttpResponse):
            return result
        self.metrics.deliveries.labels(hook.workflow, hook.entry, result.disposition.value).inc()
        return disposition_response(hook, result, self.config.retry_after, self.config.deferred_retry_after)

    def _slots(self) -> int:
        """Deliveries in flight per workflow: one an update, or, grouped, up to 500 an update."""
        config = self.config
        return max(config.updates_per_workflow, config.groups_in_flight * MAX_BULK) if config.group_deliveries \
            else config.updates_per_workflow

    async def _call(self, hook: Hook, payload: Any, update_id: str) -> DeliveryResult | HttpResponse:
        timeout = self.config.delivery_timeout.total_seconds()
        try:
            wfi = self.wfi(await self.client())
            async with asyncio.timeout(timeout):  # WfiClient ends its call on cancellation
                grouped = self.config.group_deliveries  # a group's update id binds its members' content
                return await wfi.deliver(hook.workflow, payload, entry=hook.entry, update_id=None if grouped else update_id)
        except TimeoutError:
            return self._failed(hook, CallTimeout(f"no disposition within {timeout:g}s"))
        except WfiError as exc:
            return self._failed(hook, exc)

    def _failed(self, hook: Hook, failure: WfiError) -> HttpResponse:
        """The answer to a delivery that failed, by the table ``DELIVERY_FAILURES``."""
        row = DELIVERY_FAILURES[most_specific(type(failure), DELIVERY_FAILURES) or WfiError]
        facts = {"workflow": hook.workflow, "timeout": self.config.delivery_timeout.total_seconds(),
                 "task_queue": self.deployment.temporal.task_queue, "error": failure}
        if row.log is not None:
            self.delivery_failures.note(f"{hook.label}: {row.code}", row.log.format(**facts))
        if row.status < 500:  # what the sender sent cannot be delivered: the same on every retry
            return error(row.status, row.code, str(failure))
        return error(row.status, row.code, row.message.format(**facts), retry_after=self.config.retry_after)


def body_too_large(limit: int) -> _payload.BadRequest:
    return _payload.BadRequest(413, "body_too_large", f"the body is over the limit of {limit} bytes: "
                               "send a reference (URL, object key) instead of the content")


def request_update_id() -> str:
    """One update id per HTTP request (WfiClient reuses it for its own retries of the call). A
    sender's retry is a new update, so the activation answers it ``duplicate`` with the retained
    disposition (or ``conflict``), rather than the server replaying the first update's result."""
    return f"http-{uuid.uuid4().hex}"


def disposition_response(hook: Hook, result: DeliveryResult, retry_after: int, deferred_retry_after: int) -> HttpResponse:
    body: dict[str, Any] = {
        "disposition": result.disposition.value, "workflow": hook.workflow, "entry": result.entry or hook.entry,
        "delivery_id": result.delivery_id, "run_key": result.run_key, "activation_id": result.activation_id,
    }
    if result.retained is not None:
        body["retained"] = result.retained.value
    reason = result.message or REASONS.get(result.disposition)
    if reason:
        body["reason"] = reason
    status = STATUS[result.disposition]
    wait = deferred_retry_after if result.disposition == Disposition.DEFERRED else retry_after
    return json_response(body, status, {"retry-after": str(wait)} if status == 503 else None)
