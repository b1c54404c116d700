"""Connector manifests and the catalog that resolves `connector.event` names to them.

A manifest is the contract between a Workfile and a connector: its kind (which capability it
needs), the default binding name, the configuration (input) schema the validator checks
Workfile keys against, the payload schema every event is validated against before acceptance,
and, for ``external`` and ``poll`` kinds, where the delivery identity lives in the payload.

Built-in manifests live in ``wf_initiation/core/manifests/`` (schedule, external and lifecycle
triggers) and in each poll connector's own folder (``activities/poll/<connector>/manifest.yaml``,
beside its code). They are read as package resources: the connector packages import nothing on
import, so loading the catalog never imports Temporal or a connector's dependencies.

Third-party connectors register through the ``wf_initiation.connectors`` entry-point group; each
entry point resolves to a :class:`Manifest`, a mapping in manifest form, or a list of them. A poll
manifest's ``implementation`` names its activity (``module:function``), which ``WfiPlugin``
registers (``wf_initiation.activities.poll.poll_activities``). See docs/poll-contract.md.

**Implementations chosen by the deployment.** A trigger can have more than one implementation: its
manifest (the one :meth:`Catalog.get` returns, which the validator checks a Workfile against) and
alternatives that declare ``via`` (``mail.received`` via ``imap``: the same trigger, polled over
IMAP instead of pushed by a bridge). A deployment's connection chooses one with ``via: imap``; the
Workfile does not change. An alternative must mean the same trigger (same ``binds``, input schema,
payload schema and delivery id), and a trigger has at most one poll implementation (its activity is
``wfi.poll.<name>``). The kind, and so the capability an entry needs (CAP-1), is the resolved
implementation's: :meth:`Catalog.resolve`.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from collections.abc import Iterable, Mapping
from importlib.metadata import entry_points
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from ruamel.yaml import YAML

from wf_initiation.errors import ManifestError

from ._diagnostics import Diagnostic

Kind = Literal["schedule", "external", "poll"]
ENTRY_POINT_GROUP = "wf_initiation.connectors"
BUILTIN_MANIFEST_PACKAGES = (
    "wf_initiation.core.manifests",
    "wf_initiation.activities.poll.rss",
    "wf_initiation.activities.poll.sheet",
    "wf_initiation.activities.poll.sql",
    "wf_initiation.activities.poll.http_json",
    "wf_initiation.activities.poll.imap",
)
CAPABILITY_BY_KIND: dict[str, str] = {
    "schedule": "wf.scheduled-initiation",
    "external": "wf.external-event-initiation",
    "poll": "wf.polling-initiation",
}
_NAME = re.compile(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_VIA = re.compile(r"^[a-z][a-z0-9_]*$")
_IMPLEMENTATION = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")


class Manifest(BaseModel):
    """The declared contract of one trigger (`connector.event`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="`connector.event`, as written under `on:`.")
    version: str = Field(description="Connector version; part of every trigger binding.")
    kind: Kind = Field(description="schedule | external | poll: decides the required capability.")
    binds: str = Field(description="Default binding name of the payload when an entry has no `as`.")
    description: str = ""
    input_schema: dict[str, Any] = Field(description="JSON Schema of the entry's configuration keys.")
    payload_schema: dict[str, Any] = Field(description="JSON Schema every event payload must satisfy.")
    delivery_id: str | None = Field(
        default=None, description="Dotted path of the delivery identity inside the payload (external/poll)."
    )
    stable_order: bool | None = Field(default=None, description="Poll only: does the poll contract promise stable order?")
    implementation: str | None = Field(
        default=None,
        description="Poll only: `module:function` of the poll activity (named `wfi.poll.<name>`), which "
        "WfiPlugin registers; without it, register the activity with `WfiPlugin(poll_activities=...)`.",
    )
    via: str | None = Field(
        default=None,
        description="An alternative implementation of the trigger `name`, chosen by a deployment connection with "
        "`via: <this>` (e.g. `mail.received` via `imap`); same binds, input schema, payload schema and delivery id "
        "as the trigger's manifest without `via`.",
    )

    @model_validator(mode="after")
    def _contract(self) -> Manifest:
        problems = manifest_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def capability(self) -> str:
        return CAPABILITY_BY_KIND[self.kind]

    def delivery_id_of(self, payload: Mapping[str, Any]) -> Any:
        """The delivery identity at the manifest's path, or None when absent."""
        value: Any = payload
        for part in (self.delivery_id or "").split("."):
            if not isinstance(value, Mapping) or part not in value:
                return None
            value = value[part]
        return value


def manifest_problems(m: Manifest) -> list[str]:
    """Contract violations of a manifest, as fix-naming messages (empty when sound)."""
    problems: list[str] = []
    if not _NAME.match(m.name):
        problems.append(f"name {m.name!r} must be 'connector.event' in lower case")
    if not _IDENT.match(m.binds):
        problems.append(f"binds {m.binds!r} must be an identifier")
    for label, schema in (("input_schema", m.input_schema), ("payload_schema", m.payload_schema)):
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            problems.append(f"{label} is not a valid JSON Schema: {exc.message}")
    if m.kind in ("external", "poll"):
        problems.extend(_delivery_id_problems(m))
    elif m.delivery_id is not None:
        problems.append("a schedule manifest has no delivery_id: occurrence identity is the instant (SCHED-13)")
    if m.kind != "poll" and m.stable_order is not None:
        problems.append("stable_order applies to poll manifests only")
    if m.implementation is not None and (m.kind != "poll" or not _IMPLEMENTATION.match(m.implementation)):
        problems.append(f"implementation {m.implementation!r} must be 'package.module:function' on a poll manifest")
    if m.via is not None and not _VIA.match(m.via):
        problems.append(f"via {m.via!r} must be a lower-case identifier, e.g. 'imap'")
    return problems


def variant_problem(default: Manifest | None, variant: Manifest, others: Iterable[Manifest]) -> str | None:
    """Why ``variant`` (a manifest with ``via``) cannot stand for the trigger ``default`` describes, or None.

    Args:
        default: The trigger's manifest without ``via`` (None when the catalog has none).
        variant: The alternative implementation.
        others: The trigger's implementations accepted so far (its default among them).
    """
    if default is None:
        return f"it is an alternative ('via: {variant.via}') of {variant.name}, which has no manifest without 'via'"
    differs = [key for key in ("binds", "input_schema", "payload_schema", "delivery_id")
               if getattr(default, key) != getattr(variant, key)]
    if differs:
        return (f"an alternative implementation ('via: {variant.via}') must mean the same trigger as {variant.name}'s "
                f"manifest, but its {', '.join(differs)} differ: copy them from that manifest")
    if variant.kind == "poll" and any(m.kind == "poll" for m in others):
        return (f"{variant.name} already has a poll implementation, and a trigger has at most one (its activity is "
                f"named wfi.poll.{variant.name})")
    return None


def _delivery_id_problems(m: Manifest) -> list[str]:
    if not m.delivery_id:
        return [f"a {m.kind} manifest must declare delivery_id: the payload path of the delivery identity"]
    schema: Any = m.payload_schema
    for part in m.delivery_id.split("."):
        props = schema.get("properties", {}) if isinstance(schema, dict) else {}
        if part not in props or part not in schema.get("required", []):
            return [f"delivery_id path {m.delivery_id!r} must be a required property of payload_schema"]
        schema = props[part]
    return []


class Catalog:
    """Resolves trigger names to manifests. Build one with :meth:`default` and pass it around."""

    def __init__(self, manifests: Iterable[Manifest] = (), broken: Mapping[str, str] | None = None):
        self._by_name: dict[str, Manifest] = {}
        self._variants: dict[tuple[str, str], Manifest] = {}
        self.broken: dict[str, str] = dict(broken or {})
        variants = []
        for m in manifests:
            if m.via is None:
                self._by_name[m.name] = m
            else:
                variants.append(m)
        for v in variants:
            taken = [self._by_name[v.name]] if v.name in self._by_name else []
            taken += [m for (name, _), m in self._variants.items() if name == v.name]
            problem = variant_problem(self._by_name.get(v.name), v, taken)
            if problem is None:
                self._variants[(v.name, v.via or "")] = v
            else:
                self.broken[f"{v.name} via {v.via}"] = problem

    @classmethod
    def default(cls, *, third_party: bool = True) -> Catalog:
        """Built-in manifests plus, unless disabled, those registered through entry points."""
        manifests = list(builtin_manifests())
        broken: dict[str, str] = {}
        if third_party:
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                found, errors = _load_entry_point(ep)
                manifests.extend(found)
                broken.update(errors)
        return cls(manifests, broken)

    def get(self, name: str) -> Manifest | None:
        """The trigger's manifest (without ``via``): what a Workfile is validated against."""
        return self._by_name.get(name)

    def resolve(self, name: str, via: str | None = None) -> Manifest | None:
        """The implementation a connection chooses: ``via`` None is :meth:`get`, else that alternative."""
        return self.get(name) if via is None else self._variants.get((name, via))

    def vias(self, name: str) -> list[str]:
        """The ``via`` names of the trigger's alternative implementations."""
        return sorted(via for (trigger, via) in self._variants if trigger == name)

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def manifests(self) -> list[Manifest]:
        """Every resolvable manifest: by name, each trigger's alternatives after its manifest."""
        out = []
        for name in self.names():
            out.append(self._by_name[name])
            out.extend(self._variants[(name, via)] for via in self.vias(name))
        return out

    def diagnostic_for(self, name: str) -> Diagnostic | None:
        """Why ``name`` cannot be resolved (None when it can)."""
        if name in self._by_name:
            return None
        if name in self.broken:
            return Diagnostic(code="MANIFEST-INVALID", message=f"manifest of {name!r} is invalid: {self.broken[name]}")
        return Diagnostic(
            code="TRIG-UNKNOWN-CONNECTOR",
            message=f"unknown trigger {name!r}: the catalog has {', '.join(self.names())}",
        )


def parse_manifest(data: Mapping[str, Any]) -> Manifest:
    """Build a manifest from its mapping form; raise :class:`ManifestError` naming each problem."""
    try:
        return Manifest.model_validate(dict(data))
    except ValidationError as exc:
        msgs = [f"{'.'.join(str(p) for p in e['loc']) or 'manifest'}: {e['msg']}" for e in exc.errors()]
        raise ManifestError("; ".join(msgs)) from None


def builtin_manifests() -> list[Manifest]:
    """The manifests shipped with wf-initiation, from every package of BUILTIN_MANIFEST_PACKAGES."""
    return list(_shipped_manifests())


@functools.cache
def _shipped_manifests() -> tuple[Manifest, ...]:
    """Read and checked once per process (~0.13 s: YAML and a JSON Schema check of every schema):
    the package's files do not change while it runs, and every Workfile loaded without a catalog,
    every ``wfi validate`` and every ``WfiPlugin`` asks for them."""
    yaml = YAML(typ="safe")
    out = []
    for package in BUILTIN_MANIFEST_PACKAGES:
        for res in sorted(importlib.resources.files(package).iterdir(), key=lambda r: r.name):
            if res.name.endswith(".yaml"):
                out.append(parse_manifest(yaml.load(res.read_text())))
    return tuple(out)


def _load_entry_point(ep: Any) -> tuple[list[Manifest], dict[str, str]]:
    try:
        obj = ep.load()
        items = obj if isinstance(obj, list) else [obj]
        found = [i if isinstance(i, Manifest) else parse_manifest(i) for i in items]
        return found, {}
    except Exception as exc:  # a broken plugin must not break validation of other Workfiles
        return [], {ep.name: f"entry point {ep.value!r} failed to load: {exc}"}
