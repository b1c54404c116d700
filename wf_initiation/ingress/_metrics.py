"""Prometheus metrics of one ingress app, in a registry of its own (served at ``GET /metrics``).

``route`` is the route template (``/hooks/{workflow}/{entry}``) or the declared path, never the raw
request path, so an unknown-path scan cannot grow the series without bound.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST


class IngressMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "wfi_ingress_requests", "HTTP requests answered, by route and status.", ["route", "method", "status"],
            registry=self.registry)
        self.latency = Histogram(
            "wfi_ingress_request_duration_seconds", "Time to answer a request, by route.", ["route"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=self.registry)
        self.deliveries = Counter(
            "wfi_ingress_deliveries", "Deliveries by their durable disposition.", ["workflow", "entry", "disposition"],
            registry=self.registry)
        self.auth_failures = Counter(
            "wfi_ingress_auth_failures", "Requests refused by authentication (401).", ["workflow", "entry"],
            registry=self.registry)
        self.in_flight = Gauge(
            "wfi_ingress_deliveries_in_flight", "Deliveries sent to Temporal and not yet answered.", registry=self.registry)
        self.connections = Gauge("wfi_ingress_connections", "Open HTTP connections.", registry=self.registry)
        self.connections_refused = Counter(
            "wfi_ingress_connections_refused", "Connections closed by the ingress's limits, by reason (header_timeout, "
            "body_too_slow, headers_too_large, connection_limit, evicted, bad_request, accept_failed).", ["reason"],
            registry=self.registry)
        self.waiting = Gauge(
            "wfi_ingress_deliveries_waiting", "Requests waiting for a delivery slot of their workflow.", ["workflow"],
            registry=self.registry)

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
