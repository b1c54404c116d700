"""The hooks: which HTTP paths deliver to which trigger entry, and how each authenticates.

Built once from the deployment and the Workfiles it lists (``workflows.<name>.workfile``): every
entry whose manifest is ``kind: external`` is served. An ``http.request`` entry gets the request as
its payload; any other external entry (``mail.received``, lifecycle events ``workflow.*`` relayed from
another deployment, whose causation chain the cycle guard checks) gets the JSON body as its payload.
Each is served at

- ``POST /hooks/{workflow}/{entry}`` and, for a workflow with one such entry, ``POST /hooks/{workflow}``;
- the ``path`` an ``http.request`` entry declares in its Workfile (e.g. ``/hooks/github``), with its
  ``methods``;
- the ``path`` of an ``ingress.endpoints`` item.

A declared path is matched before the ``/hooks/{workflow}...`` patterns, so it wins where both fit.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from wf_initiation.core._diagnostics import DiagnosticError
from wf_initiation.core.activation import EntrySpec
from wf_initiation.core.connections import SecretRef, parse_ref
from wf_initiation.core.deployment import Deployment
from wf_initiation.errors import IngressConfigError  # noqa: F401  (exported by wf_initiation.ingress from here)

from .config import AuthConfig, DeliveryIdSource, Endpoint, IngressConfig

RESERVED = ("/healthz", "/readyz", "/metrics")
RESERVED_PREFIXES = ("/readyz/",)  # /readyz/{workflow}
ENVELOPE_CONNECTOR = "http.request"
DEFAULT_IDS = {
    "standard": DeliveryIdSource(header="webhook-id"),
    "github": DeliveryIdSource(header="X-GitHub-Delivery"),
    "stripe": DeliveryIdSource(body="id"),
}
IDEMPOTENCY = DeliveryIdSource(header="Idempotency-Key")
# Stripe's event objects count the endpoints still to be delivered; it changes between retries.
DEFAULT_IGNORE = {"stripe": ["pending_webhooks"]}
# The headers that are part of the event, by scheme: what a redelivery is compared by besides the
# body (docs/webhooks.md, "What a redelivery is compared by"). GitHub's event name; not which hook
# sent it (a repository's and an organisation's hook share the GUID), nor its content type (a hook
# setting: form and JSON bodies parse to the same payload). Stripe's and Standard Webhooks' event
# is the body. A scheme not listed (token, none: a sender the ingress knows nothing of) keeps every
# header but those of one attempt (wf_initiation.core.ingress.attempt_header).
EVENT_HEADERS: dict[str, list[str]] = {"github": ["x-github-event"], "stripe": [], "standard": []}


@dataclasses.dataclass
class Hook:
    """One served trigger entry."""

    workflow: str
    entry: str
    connector: str
    methods: frozenset[str]
    auth: AuthConfig | None
    secrets: list[SecretRef]
    delivery_id: DeliveryIdSource | None
    headers: list[str] | None = None  # the event's headers (None: all but those of one attempt)
    ignore_body: list[str] = dataclasses.field(default_factory=list)
    received_at: bool = False
    paths: list[str] = dataclasses.field(default_factory=list)

    @property
    def envelope(self) -> bool:
        """Whether the payload is the request itself (http.request) rather than the JSON body."""
        return self.connector == ENVELOPE_CONNECTOR

    @property
    def canonical_path(self) -> str:
        """The ``path`` of its payloads, whichever hook a request came by: the first declared path,
        else ``/hooks/{workflow}/{entry}``. A retry sent to another of its hooks stays a duplicate."""
        return self.paths[0] if self.paths else f"/hooks/{self.workflow}/{self.entry}"

    @property
    def label(self) -> str:
        return f"{self.workflow}/{self.entry}"


@dataclasses.dataclass
class HookTable:
    by_name: dict[tuple[str, str], Hook]
    single: dict[str, Hook]
    by_path: dict[str, Hook]
    problems: list[str]

    def find(self, workflow: str, entry: str | None) -> Hook | None:
        return self.single.get(workflow) if entry is None else self.by_name.get((workflow, entry))


def build_hooks(deployment: Deployment, config: IngressConfig, specs: dict[str, list[EntrySpec]] | None = None) -> HookTable:
    """The table; ``problems`` lists what could not be served (fatal for ``wfi serve``)."""
    problems: list[str] = []
    entries = specs if specs is not None else _external_entries(deployment, problems)
    hooks: dict[tuple[str, str], Hook] = {}
    for workflow, specs_of in entries.items():
        for e in specs_of:
            hooks[(workflow, e.name)] = _hook(workflow, e, None, config, deployment)
    for i, endpoint in enumerate(config.endpoints):
        _apply_endpoint(i, endpoint, entries, hooks, config, deployment, problems)
    single = {}
    for workflow, specs_of in entries.items():
        if len(specs_of) == 1:
            single[workflow] = hooks[(workflow, specs_of[0].name)]
    return HookTable(by_name=hooks, single=single, by_path=_paths(hooks, problems), problems=problems)


def _external_entries(deployment: Deployment, problems: list[str]) -> dict[str, list[EntrySpec]]:
    from wf_initiation.specs import build_spec

    out: dict[str, list[EntrySpec]] = {}
    for name, section in deployment.workflows.items():
        workfile = section.get("workfile")
        if not workfile:
            continue
        try:
            spec = build_spec(deployment.resolve_path(workfile), deployment)
        except DiagnosticError as exc:
            problems.append(f"workflow {name}: its Workfile {workfile} cannot be activated, so it is not served: "
                            + "; ".join(d.message for d in exc.diagnostics)[:300])
            continue
        served = [e for e in spec.entries if e.kind == "external"]
        if served:
            out[name] = served
    return out


def _hook(workflow: str, entry: EntrySpec, endpoint: Endpoint | None, config: IngressConfig, deployment: Deployment) -> Hook:
    auth = endpoint.auth if endpoint is not None and endpoint.auth is not None else config.default_auth
    scheme = auth.scheme if auth is not None else None
    envelope = entry.connector == ENVELOPE_CONNECTOR
    delivery_id = None
    if envelope:
        delivery_id = (endpoint.delivery_id if endpoint is not None and endpoint.delivery_id is not None
                       else DEFAULT_IDS.get(scheme or "", IDEMPOTENCY))
    ignore = endpoint.ignore_body if endpoint is not None and endpoint.ignore_body is not None else DEFAULT_IGNORE.get(scheme or "", [])
    headers = endpoint.headers if endpoint is not None and endpoint.headers is not None else EVENT_HEADERS.get(scheme or "")
    methods = entry.config.get("methods") if envelope else None
    hook = Hook(
        workflow=workflow, entry=entry.name, connector=entry.connector,
        methods=frozenset(methods or ["POST"]), auth=auth, secrets=_secrets(auth, entry, deployment),
        delivery_id=delivery_id, headers=None if headers is None else list(headers),
        ignore_body=list(ignore), received_at=bool(endpoint and endpoint.received_at),
    )
    declared = entry.config.get("path") if envelope else None
    if isinstance(declared, str) and declared.startswith("/"):
        hook.paths.append(declared)
    if endpoint is not None and endpoint.path and endpoint.path not in hook.paths:
        hook.paths.append(endpoint.path)
    return hook


def _secrets(auth: AuthConfig | None, entry: EntrySpec, deployment: Deployment) -> list[SecretRef]:
    """The endpoint's secret references; without any, the entry's connection's ``secret`` reference
    or ``secret_env`` variable (the connection a Workfile names with ``connection:``)."""
    if auth is None or auth.scheme == "none":
        return []
    refs = list(auth.secrets)
    if not refs:
        refs = _connection_refs(entry.connection_settings)
    return [ref for r in refs if (ref := parse_ref(r)) is not None]


def _connection_refs(settings: dict[str, Any]) -> list[str]:
    ref = settings.get("secret")
    if isinstance(ref, str) and parse_ref(ref) is not None:
        return [ref]
    env = settings.get("secret_env")
    return [f"env:{env}"] if isinstance(env, str) and env else []


def _apply_endpoint(
    i: int, endpoint: Endpoint, entries: dict[str, list[EntrySpec]], hooks: dict[tuple[str, str], Hook],
    config: IngressConfig, deployment: Deployment, problems: list[str],
) -> None:
    where = f"ingress.endpoints[{i}]"
    specs_of = entries.get(endpoint.workflow)
    if specs_of is None:
        problems.append(f"{where}: workflow {endpoint.workflow!r} has no external trigger entry the ingress can serve "
                        "(is it under workflows: with a workfile: whose Workfile is valid?)")
        return
    if endpoint.entry is None and len(specs_of) != 1:
        problems.append(f"{where}: workflow {endpoint.workflow!r} has {len(specs_of)} external entries "
                        f"({', '.join(e.name for e in specs_of)}); name one with entry:")
        return
    spec = specs_of[0] if endpoint.entry is None else next((e for e in specs_of if e.name == endpoint.entry), None)
    if spec is None:
        problems.append(f"{where}: workflow {endpoint.workflow!r} has no external entry {endpoint.entry!r} "
                        f"(known: {', '.join(e.name for e in specs_of)})")
        return
    if endpoint.delivery_id is not None and spec.connector != ENVELOPE_CONNECTOR:
        problems.append(f"{where}: delivery_id applies to http.request entries; {spec.connector} payloads carry their own")
    hooks[(endpoint.workflow, spec.name)] = _hook(endpoint.workflow, spec, endpoint, config, deployment)


def _paths(hooks: dict[tuple[str, str], Hook], problems: list[str]) -> dict[str, Hook]:
    by_path: dict[str, Hook] = {}
    for hook in hooks.values():
        for path in hook.paths:
            other = by_path.get(path)
            if path in RESERVED or path.startswith(RESERVED_PREFIXES):
                problems.append(f"{hook.label}: path {path} is reserved by the ingress ({', '.join(RESERVED)}, "
                                "/readyz/...); declare another")
            elif other is not None:
                problems.append(f"path {path} is declared by both {other.label} and {hook.label}; give each its own")
            else:
                by_path[path] = hook
    return by_path
