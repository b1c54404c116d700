"""The ``ingress:`` section of a deployment file: where ``wfi serve`` listens and how each endpoint
authenticates its senders.

    ingress:
      port: 8780
      default_auth: {scheme: token, secrets: [env:WFI_INGRESS_TOKEN]}
      endpoints:
        - workflow: github-push              # path: the Workfile's http.request `path` (/hooks/github)
          auth: {scheme: github, secrets: [env:GITHUB_WEBHOOK_SECRET]}
        - workflow: payments
          path: /hooks/stripe
          auth: {scheme: stripe, secrets: [env:STRIPE_WEBHOOK_SECRET], tolerance: 5m}

Part of the deployment model, so it lives in the pure core (pydantic only, no web stack); the
ingress (``wf_initiation.ingress``) reads it. Secrets are references (``env:NAME``,
``file:PATH``) resolved by the ingress process; every key: ``docs/webhooks.md``.
"""

from __future__ import annotations

import functools
import re
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ._durations import parse_duration
from .connections import check_reference
from .limits import MAX_BODY_BYTES, MAX_PAYLOAD_DEPTH, MAX_UPDATES_IN_FLIGHT

Scheme = Literal["standard", "github", "stripe", "token", "none"]
DEFAULT_PORT = 8780
DEFERRED_RETRY_AFTER = 30
_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")

# Headers of one attempt, never of the event it delivers: what a sender, a client library, a proxy,
# a load balancer or a tracer adds or rewrites per attempt or per hop, credentials, signatures and
# the timestamps they sign, the sender's build, and retry metadata. Two attempts of one event differ
# in them (GitHub's Redeliver sends a newer `GitHub-Hookshot/<build>`, a Svix retry from another node
# is re-signed at a new time, a proxy adds `X-Request-Start`), so none enters an http.request payload,
# whose digest is what a redelivery is compared by (EXT-3, EXT-4): docs/webhooks.md, "What a
# redelivery is compared by".
ATTEMPT_HEADERS = frozenset({
    # credentials, signatures, signed timestamps (also: never in workflow history)
    "authorization", "proxy-authorization", "cookie", "webhook-signature", "webhook-timestamp",
    "svix-signature", "svix-timestamp", "x-hub-signature", "x-hub-signature-256", "stripe-signature",
    # retry metadata: the message id of a signed scheme (the payload's delivery_id holds the id)
    "webhook-id", "svix-id",
    # transport (RFC 9110 / 9112): the connection, the framing, content negotiation, caching
    "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "expect",
    "content-length", "content-encoding", "host", "accept", "accept-encoding", "accept-charset",
    "accept-language", "cache-control", "pragma", "priority",
    # the sender's build
    "user-agent", "x-github-enterprise-version",
    # proxies and load balancers
    "forwarded", "via", "x-real-ip", "true-client-ip", "x-client-ip", "x-cluster-client-ip", "cdn-loop",
    "x-request-start", "x-queue-start", "x-request-id", "x-correlation-id",
    # tracing (W3C, B3, vendors)
    "traceparent", "tracestate", "baggage", "b3", "x-cloud-trace-context", "sentry-trace", "uber-trace-id",
    "x-ot-span-context", "newrelic", "elastic-apm-traceparent",
})
ATTEMPT_PREFIXES = (
    "x-forwarded-", "x-b3-", "x-amzn-", "x-amz-cf-", "cf-", "x-envoy-", "x-datadog-", "x-newrelic-",
    "x-appengine-", "x-azure-", "x-arr-", "x-vercel-", "fly-", "sec-fetch-", "sec-ch-",
    # GitHub: which hook sent it (a repository's and an organisation's hook share the event's GUID)
    "x-github-hook-",
)


@functools.lru_cache(maxsize=4096)  # asked for every header of every request; the names recur
def attempt_header(name: str) -> bool:
    """Whether the header ``name`` (any case) belongs to one attempt rather than to its event."""
    lowered = name.lower()
    return lowered in ATTEMPT_HEADERS or lowered.startswith(ATTEMPT_PREFIXES)


def _duration(value: Any) -> timedelta:
    return value if isinstance(value, timedelta) else parse_duration(value)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AuthConfig(_Strict):
    """How an endpoint authenticates its sender."""

    scheme: Scheme = Field(description="standard (Standard Webhooks), github, stripe, token, or none (explicitly open).")
    secrets: list[str] = Field(
        default_factory=list,
        description="Secret references (env:NAME, file:PATH); several during a key rotation, any one verifies.",
    )
    tolerance: timedelta = Field(
        default=timedelta(minutes=5), description="standard, stripe: a signed timestamp further from now is refused (401).",
    )
    header: str | None = Field(
        default=None, description="token: the header carrying the token (default: Authorization, as 'Bearer <token>').",
    )

    _d = field_validator("tolerance", mode="before")(_duration)

    @field_validator("secrets")
    @classmethod
    def _references(cls, refs: list[str]) -> list[str]:
        return [check_reference(r) for r in refs]

    @field_validator("header")
    @classmethod
    def _header_name(cls, name: str | None) -> str | None:
        if name is not None and not _HEADER.match(name):
            raise ValueError(f"{name!r} is not an HTTP header name")
        return name

    @model_validator(mode="after")
    def _consistent(self) -> AuthConfig:
        if self.scheme == "none" and self.secrets:
            raise ValueError("scheme none takes no secrets; pick standard, github, stripe or token")
        if self.header is not None and self.scheme != "token":
            raise ValueError("'header' applies to scheme token only")
        return self


class DeliveryIdSource(_Strict):
    """Where the delivery id of a request is read: one header, or one dotted path into the JSON body."""

    header: str | None = None
    body: str | None = Field(default=None, description="Dotted path into the JSON body, e.g. 'id' or 'event.id'.")

    @model_validator(mode="after")
    def _one(self) -> DeliveryIdSource:
        if (self.header is None) == (self.body is None):
            raise ValueError("give exactly one of 'header' or 'body' (e.g. {header: X-Request-Id} or {body: event.id})")
        return self


class Endpoint(_Strict):
    """One trigger entry served over HTTP, with its own route, authentication and delivery-id source."""

    workflow: str = Field(description="Workflow identity (the Workfile's name) under the deployment's workflows:.")
    entry: str | None = Field(default=None, description="Trigger entry ('as' name); optional with one external entry.")
    path: str | None = Field(default=None, description="Extra route for this entry (besides the Workfile's `path`).")
    auth: AuthConfig | None = Field(default=None, description="Default: ingress.default_auth.")
    delivery_id: DeliveryIdSource | None = Field(
        default=None,
        description="Default by scheme: standard webhook-id, github X-GitHub-Delivery, stripe body id, else Idempotency-Key.",
    )
    headers: list[str] | None = Field(
        default=None, description="The request headers that are part of the event: only these enter the payload, "
        "and a redelivery is compared by them (default by scheme: github [X-GitHub-Event], stripe and standard "
        "none, token and none every header but those of one attempt).",
    )
    ignore_body: list[str] | None = Field(
        default=None,
        description="Dotted body paths left out of the payload because the sender changes them between retries "
        "(default for stripe: [pending_webhooks]).",
    )
    received_at: bool = Field(
        default=False, description="Add the time this ingress first received the delivery id as `received_at`.",
    )

    @field_validator("headers")
    @classmethod
    def _event_headers(cls, names: list[str] | None) -> list[str] | None:
        for name in names or []:
            if not _HEADER.match(name):
                raise ValueError(f"{name!r} is not an HTTP header name")
            if attempt_header(name):
                raise ValueError(
                    f"{name!r} belongs to one attempt, not to the event (a transport, proxy, tracing, credential, "
                    "signature, timestamp, sender-build or retry header): it differs between two deliveries of "
                    "one event, so every redelivery would be a conflict; remove it from headers")
        return names

    @field_validator("path")
    @classmethod
    def _path(cls, path: str | None) -> str | None:
        if path is not None and (not path.startswith("/") or "{" in path):
            raise ValueError(f"{path!r}: a path starts with '/' and has no parameters, e.g. /hooks/github")
        return path


class IngressConfig(_Strict):
    """The ``ingress:`` section of a deployment."""

    host: str = Field(default="127.0.0.1", description="Interface `wfi serve` binds (0.0.0.0 for every interface).")
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    default_auth: AuthConfig | None = Field(
        default=None, description="Authentication of entries with no endpoint of their own; unset: they refuse every request (401).",
    )
    endpoints: list[Endpoint] = Field(default_factory=list)
    generic_routes: bool = Field(default=True, description="Serve POST /hooks/{workflow}/{entry} for every external entry.")
    max_body_bytes: int = Field(default=MAX_BODY_BYTES, ge=1, le=MAX_BODY_BYTES)
    max_json_depth: int = Field(default=MAX_PAYLOAD_DEPTH, ge=1, le=MAX_PAYLOAD_DEPTH)
    updates_per_workflow: int = Field(
        default=8, ge=1, le=1000,
        description=f"Deliveries in flight to one activation at once; keep it below the cluster's "
        f"history.maxInFlightUpdates (default {MAX_UPDATES_IN_FLIGHT}), which refuses the rest.",
    )
    max_waiting: int = Field(
        default=256, ge=0, description="Requests waiting for a slot, per workflow; one more is answered 429.",
    )
    group_deliveries: bool = Field(
        default=True, description="Send concurrent requests to one workflow together, as deliver_many updates (each "
        "request still answered with its own durable disposition): many more deliveries a second into one "
        "activation. Then up to groups_in_flight x 500 requests per workflow are in flight (updates_per_workflow "
        "bounds requests sent one update each when this is false).",
    )
    group_window: timedelta = Field(
        default=timedelta(milliseconds=2), description="How long a request waits for others when no update of its "
        "workflow is in flight (when one is, the next update goes as soon as one returns).",
    )
    groups_in_flight: int = Field(default=1, ge=1, le=8, description=(
        "Grouped updates in flight per workflow. 1 (the default): the next group forms while one is out and is "
        "sent as soon as it returns, which measured best (bench/README.md, grouping)."))
    queue_timeout: timedelta = Field(default=timedelta(seconds=10), description="Longest wait for a slot; then 503.")
    delivery_timeout: timedelta = Field(
        default=timedelta(seconds=30), description="Longest wait for the durable disposition; then 503 (retry is safe).",
    )
    header_timeout: timedelta = Field(
        default=timedelta(seconds=10), description="A connection's request line and headers must be complete within "
        "this of it opening (or of the first byte after a keep-alive pause); else 408 and closed.",
    )
    body_timeout: timedelta = Field(
        default=timedelta(seconds=10), description="Grace before min_body_rate applies: a body of n bytes must be "
        "complete within body_timeout + n / min_body_rate of its headers; else 408 and closed.",
    )
    min_body_rate: int = Field(default=1024, ge=1, description="Bytes a second a body must arrive at, on average.")
    keep_alive_timeout: timedelta = Field(
        default=timedelta(seconds=75), description="An idle keep-alive connection is closed after this.",
    )
    max_connections: int | None = Field(
        default=None, ge=1, description="Open connections at most (default: 10,000, or fewer to stay below the "
        "process's file-descriptor limit, which always bounds it); at the cap the connection idle or waiting for "
        "its headers the longest is closed, and when all are in a request a new one is refused.",
    )
    retry_after: int = Field(default=2, ge=0, description="Seconds, sent as Retry-After with 429 and 503.")
    deferred_retry_after: int = Field(
        default=DEFERRED_RETRY_AFTER, ge=0,
        description="Seconds, sent as Retry-After with the 503 of a `deferred` delivery: the activation holds "
        "its budget of payloads for runs not started yet, which frees as those runs start (or as a carried "
        "state over its limit shrinks), in seconds to minutes rather than at once.",
    )

    _d = field_validator("queue_timeout", "delivery_timeout", "header_timeout", "body_timeout", "keep_alive_timeout",
                         "group_window", mode="before")(_duration)

    @field_validator("header_timeout", "body_timeout", "keep_alive_timeout")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("must be longer than 0s, e.g. 10s")
        return value
