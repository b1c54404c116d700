"""Activation: resolve and fix every trigger binding of a Workfile for one deployment (INIT-3).

The result, :class:`ActivationSpec`, is all the activation workflow needs: it never consults the
catalog or the deployment file again, so a later change to either cannot reinterpret what this
activation accepted (INIT-5). Its ``activation_id`` is ``<workflow>@<hash>`` where the hash covers
every member of every binding plus the policies: the same inputs give the same id (idempotent
activation), any change gives a new one (INIT-4).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ._catalog import Catalog
from ._diagnostics import Diagnostic, DiagnosticError
from ._expr import Evaluator, ExpressionFault, ExpressionSyntaxError
from ._model import BatchSpec, Workfile
from .deployment import ADDED_POLICIES, Deployment, Policies, RunTarget


class EntrySpec(BaseModel):
    """One resolved trigger binding and the rules that apply to its events."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Binding name = trigger.name.")
    index: int
    connector: str
    connector_version: str
    kind: str
    connection: str | None = Field(description="Connection identity (TRIG-6).")
    connection_settings: dict[str, Any] = Field(default_factory=dict, description="Resolved connection (no Workfile value).")
    config: dict[str, Any] = Field(description="Evaluated configuration, overlay applied.")
    overlay: dict[str, Any] = Field(default_factory=dict)
    when: str | None = None
    queue_by: str | None = None
    batch: BatchSpec | None = None
    into: dict[str, Any] | None = None
    payload_schema: dict[str, Any]
    delivery_id_path: str | None = None
    stable_order: bool | None = None
    implementation: str | None = None


class ActivationSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    workflow: str
    activation_id: str
    entries: list[EntrySpec]
    inputs: dict[str, Any] = Field(default_factory=dict)
    policies: Policies
    run: RunTarget
    capabilities: list[str]
    tzdata_version: str

    def entry(self, name: str) -> EntrySpec | None:
        return next((e for e in self.entries if e.name == name), None)


def resolve_activation(workfile: Workfile, deployment: Deployment, catalog: Catalog) -> ActivationSpec:
    """Resolve every binding; raise :class:`DiagnosticError` naming every problem at once."""
    import tzdata

    settings = deployment.workflow(workfile.name)
    inputs = _inputs(workfile, settings.inputs)
    problems: list[Diagnostic] = []
    entries = []
    for entry in workfile.entries:
        manifest = catalog.get(entry.connector)
        if manifest is None:
            problems.append(catalog.diagnostic_for(entry.connector) or Diagnostic(code="TRIG-UNKNOWN-CONNECTOR", message=entry.connector))
            continue
        connection, conn_settings, conn_problem = _connection(entry.connection, entry.connector, entry.name, deployment)
        if conn_problem:
            problems.append(conn_problem)
        overlay = settings.overlay.get(entry.name, {})
        config, config_problems = _evaluate_config({**entry.config, **overlay}, inputs, entry.name)
        problems.extend(config_problems)
        if manifest.kind == "schedule" and not config_problems:
            problems.extend(_schedule_problems(config, entry.name))
        entries.append(EntrySpec(
            name=entry.name, index=entry.index, connector=entry.connector, connector_version=manifest.version,
            kind=manifest.kind, connection=connection, connection_settings=conn_settings, config=config,
            overlay=overlay, when=entry.when, queue_by=entry.queue_by, batch=entry.batch, into=entry.into,
            payload_schema=manifest.payload_schema, delivery_id_path=manifest.delivery_id,
            stable_order=manifest.stable_order, implementation=manifest.implementation,
        ))
    if problems:
        raise DiagnosticError(problems)
    policies = Policies.model_validate({k: getattr(settings, k) for k in Policies.model_fields})
    body = {
        "workflow": workfile.name, "entries": [e.model_dump(mode="json") for e in entries], "inputs": inputs,
        "policies": _hashed_policies(policies), "run": settings.run.model_dump(mode="json"),
        "tzdata": tzdata.IANA_VERSION,
    }
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return ActivationSpec(
        workflow=workfile.name, activation_id=f"{workfile.name}@{digest}", entries=entries, inputs=inputs,
        policies=policies, run=settings.run, capabilities=list(deployment.capabilities),
        tzdata_version=tzdata.IANA_VERSION,
    )


def _hashed_policies(policies: Policies) -> dict[str, Any]:
    """The policies as hashed into the activation id; an added policy at its default is left out."""
    dumped = policies.model_dump(mode="json")
    for name, default in ADDED_POLICIES.items():
        if getattr(policies, name) == default:
            dumped.pop(name)
    return dumped


def _inputs(workfile: Workfile, provided: dict[str, Any]) -> dict[str, Any]:
    """Deployment inputs over the Workfile's declared defaults."""
    out: dict[str, Any] = {}
    for name, spec in workfile.inputs.items():
        out[name] = spec.get("default") if isinstance(spec, dict) else spec
    unknown = sorted(set(provided) - set(workfile.inputs))
    if unknown and workfile.inputs:
        raise DiagnosticError([Diagnostic(
            code="DEPLOY-UNKNOWN-INPUT",
            message=f"deployment inputs {unknown} are not declared under the Workfile's 'inputs:'",
        )])
    out.update(provided)
    return out


def _connection(
    named: str | None, connector: str, entry: str, deployment: Deployment
) -> tuple[str | None, dict[str, Any], Diagnostic | None]:
    # The binding carries the connection as written: secrets stay references (env:NAME, file:/path)
    # that the worker resolves at each use, so they never enter history (wf_initiation.core.connections).
    candidates = deployment.connections_for(connector)
    if named is not None:
        conn = deployment.connections.get(named)
        if conn is None:
            return named, {}, Diagnostic(
                code="DEPLOY-UNKNOWN-CONNECTION", entry=entry,
                message=f"connection {named!r} is not defined under the deployment's 'connections:'",
            )
        if not conn.serves(connector):
            return named, {}, Diagnostic(
                code="DEPLOY-CONNECTION-MISMATCH", entry=entry,
                message=f"connection {named!r} serves {conn.connector!r}, not {connector}; name a connection "
                f"with connector: {connector.split('.')[0]}",
            )
        return named, conn.model_dump(), None
    if len(candidates) == 1:
        (name, conn), = candidates.items()
        return name, conn.model_dump(), None
    if len(candidates) > 1:
        return None, {}, Diagnostic(
            code="TRIG-CONNECTION-AMBIGUOUS", entry=entry,
            message=f"the deployment defines {len(candidates)} connections for {connector} "
            f"({', '.join(sorted(candidates))}); name one with 'connection:' (TRIG-6)",
        )
    return None, {}, None


def _evaluate_config(config: dict[str, Any], inputs: dict[str, Any], entry: str) -> tuple[dict[str, Any], list[Diagnostic]]:
    evaluator = Evaluator()
    try:
        return evaluator.render_tree(config, {"inputs": inputs}), []
    except (ExpressionFault, ExpressionSyntaxError) as exc:
        return config, [Diagnostic(code="TRIG-CONFIG-EVAL", entry=entry, message=f"configuration cannot be evaluated: {exc}")]


def _schedule_problems(config: dict[str, Any], entry: str) -> list[Diagnostic]:
    from .schedule import ScheduleConfigError, parse_schedule

    try:
        parse_schedule(config)
    except ScheduleConfigError as exc:
        return [Diagnostic(code="SCHED-INVALID", entry=entry, message=f"schedule cannot be evaluated (SCHED-3): {exc}")]
    return []


def binding_digest(spec: ActivationSpec) -> str:
    return spec.activation_id.rsplit("@", 1)[1]
