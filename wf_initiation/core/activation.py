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
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._bounds import MAX_BINDING_NAME
from ._capabilities import classify
from ._catalog import Catalog, Manifest
from ._config_checks import schema_problems, semantic_problems
from ._diagnostics import Diagnostic, DiagnosticError
from ._expr import Evaluator, ExpressionFault, ExpressionSyntaxError
from ._model import BatchSpec, TriggerEntry, Workfile
from .deployment import ADDED_POLICIES, BOUNDED, Deployment, Policies, RunTarget
from .sharding import sharding_problems
from .unencoded import Unencoded


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


EVALUATION_VERSION = 2
"""How expressions and schedules are evaluated: 2 = JSON results, payload keys over dict methods,
Vixie cron days, the bounds of docs/limits.md. A spec recorded before (no ``evaluation``) reads as
1 and its activation keeps the earlier evaluation, so its history replays; activating it again
(any change of binding) moves it on at its next continue-as-new."""


class Split(BaseModel):
    """A split of an activation from ``from_shards`` to more shards (core.sharding, "Splitting").

    A shard numbered ``from_shards`` or more (a child) takes ids that its parent (``shard %
    from_shards``) took before the split: until the parent has drained, a child judges a new id only
    with the parent's answer for it. A parent records ``seq`` (the last acceptance before the split);
    ``drain_after`` is when every id it held at the split has expired (set once none of them has a
    run still going); ``drained`` ends its part.

    A spec names the split its activation begins (``from_shards`` alone, as the client sets it); the
    engine keeps each shard's progress in its own state (``core/engine/_split.py``). A spec carried by
    a run of an earlier build holds that progress too, which the engine takes from it once.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    from_shards: int = Field(ge=1)
    seq: int | None = None
    drain_after: datetime | None = None
    drained: bool = False


class Growth(BaseModel):
    """An activation that grows itself (the deployment's ``scale.grow_at`` and ``scale.max_shards``;
    core/engine/_growth.py): part of the binding."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    grow_at: float = Field(gt=0, lt=1, description="Fill of the fullest shard past which the shards are doubled.")
    max_shards: int = Field(ge=1, description="The most shards it grows to.")


class ActivationSpec(BaseModel):
    """One Workfile bound to one deployment, resolved: what an activation workflow runs on.

    Built by ``wf_initiation.activation_spec`` (``wfi activate``); ``activation_id`` is the binding's
    hash, so the same Workfile and deployment always give the same id (INIT-4).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    workflow: str
    activation_id: str
    entries: list[EntrySpec]
    inputs: dict[str, Any] = Field(default_factory=dict)
    policies: Policies
    run: RunTarget
    capabilities: list[str]
    tzdata_version: str
    evaluation: int = Field(default=1, description="Evaluation rules (EVALUATION_VERSION); 1 for specs recorded before it.")
    shards: int = Field(default=1, ge=1, description="Activation workflows this one spans (the deployment's scale.shards).")
    shard: int = Field(default=0, ge=0, description="Which of them this workflow is (core.sharding); not part of the binding.")
    split: Split | None = Field(default=None, description="The split of the activation into more shards this "
                                "activation begins (core.sharding.Split; its progress is the engine's); not part "
                                "of the binding.")
    grow: Growth | None = Field(default=None, description="Growing by itself (scale.grow_at): shard 0 doubles the "
                                "shards when the fullest passes grow_at, up to max_shards.")
    unencoded: Unencoded = Field(default="accept", description="What a delivery that arrives without the team's "
                                 "payload codec meets (the deployment's temporal.unencoded, core.unencoded); "
                                 "'accept' for specs recorded before it.")

    def entry(self, name: str) -> EntrySpec | None:
        """The trigger entry named ``name`` (its ``as``), or None."""
        return next((e for e in self.entries if e.name == name), None)

    def as_shard(self, shard: int) -> ActivationSpec:
        """The spec shard ``shard`` of the activation is started with (the same binding)."""
        return self if shard == self.shard else self.model_copy(update={"shard": shard})

    def grown(self, shards: int) -> ActivationSpec:
        """The same binding on ``shards`` shards, with the activation id a deployment saying
        ``scale.shards: <shards>`` gives it (what an activation that grows itself activates)."""
        spec = self.model_copy(update={"shards": shards, "split": None})
        return spec.model_copy(update={"activation_id": f"{self.workflow}@{binding_digest(spec)}"})

    def for_running(self, current: int) -> ActivationSpec:
        """The spec to activate on an activation running on ``current`` shards: one that grew by itself
        (``scale.grow_at``) past this spec's ``shards``, within its ``max_shards``, keeps its count
        (``scale.shards`` is the count it starts with); any other is activated as it is."""
        grow = self.grow
        if grow is None or not self.shards < current <= grow.max_shards:
            return self
        return self.grown(current)

    def shard_part(self) -> ActivationSpec:
        """What this shard runs: shard 0 everything, the others only the external entries (each takes
        its share of their deliveries; core.sharding)."""
        if self.shard == 0:
            return self
        return self.model_copy(update={"entries": [e for e in self.entries if e.kind == "external"]})


def build_activation(workfile: Workfile, deployment: Deployment, catalog: Catalog) -> ActivationSpec:
    """What ``wfi activate`` activates: refuse an unsupported Workfile (CAP-7), then resolve its bindings.

    ``wfi validate --deployment`` reports the diagnostics of this very function, so the two agree.

    Raises:
        DiagnosticError: naming every problem at once.
    """
    unsupported = classify(workfile, catalog, deployment.capabilities, resolve=manifest_resolver(deployment, catalog))
    if unsupported:
        raise DiagnosticError(unsupported)
    return resolve_activation(workfile, deployment, catalog)


def activation_problems(workfile: Workfile, deployment: Deployment, catalog: Catalog) -> list[Diagnostic]:
    """The diagnostics :func:`build_activation` would raise; [] when the Workfile can be activated."""
    try:
        build_activation(workfile, deployment, catalog)
    except DiagnosticError as exc:
        return list(exc.diagnostics)
    return []


def resolve_activation(workfile: Workfile, deployment: Deployment, catalog: Catalog) -> ActivationSpec:
    """Resolve every binding; raise :class:`DiagnosticError` naming every problem at once."""
    import tzdata

    settings = deployment.workflow(workfile.name)
    inputs = _inputs(workfile, settings.inputs)
    problems: list[Diagnostic] = _unknown_overlays(workfile, settings.overlay) + _throttle_key_problems(workfile, settings)
    entries = []
    for entry in workfile.entries:
        manifest = catalog.get(entry.connector)
        if manifest is None:
            problems.append(catalog.diagnostic_for(entry.connector) or Diagnostic(code="TRIG-UNKNOWN-CONNECTOR", message=entry.connector))
            continue
        connection, conn_settings, conn_problem = _connection(entry.connection, entry.connector, entry.name, deployment)
        if conn_problem:
            problems.append(conn_problem)
        manifest, via_problem = _implementation(catalog, manifest, connection, conn_settings, entry.name)
        if via_problem:
            problems.append(via_problem)
            continue
        overlay = settings.overlay.get(entry.name, {})
        config, config_problems = _evaluate_config({**entry.config, **overlay}, inputs, entry.name)
        problems.extend(config_problems)
        if not config_problems:
            problems.extend(_evaluated_config_problems(manifest, config, entry.name))
        entries.append(EntrySpec(
            name=entry.name, index=entry.index, connector=entry.connector, connector_version=manifest.version,
            kind=manifest.kind, connection=connection, connection_settings=conn_settings, config=config,
            overlay=overlay, when=entry.when, queue_by=entry.queue_by, batch=entry.batch, into=entry.into,
            payload_schema=manifest.payload_schema, delivery_id_path=manifest.delivery_id,
            stable_order=manifest.stable_order, implementation=manifest.implementation,
        ))
    problems += _unknown_schedule_entries(workfile, settings.schedule.entries, entries)
    if problems:
        raise DiagnosticError(problems)
    policies = Policies.model_validate({k: getattr(settings, k) for k in Policies.model_fields})
    scale = settings.scale
    grow = Growth(grow_at=scale.grow_at, max_shards=scale.max_shards) \
        if scale.grow_at is not None and scale.max_shards is not None else None
    unencoded = deployment.temporal.unencoded_policy()
    spec = ActivationSpec(
        workflow=workfile.name, activation_id="", entries=entries, inputs=inputs,
        policies=policies, run=settings.run, capabilities=list(deployment.capabilities),
        tzdata_version=tzdata.IANA_VERSION, evaluation=EVALUATION_VERSION, shards=scale.shards, grow=grow,
        unencoded=unencoded,
    )
    spec = spec.model_copy(update={"activation_id": f"{workfile.name}@{binding_digest(spec)}"})
    sharding = sharding_problems(spec)
    if sharding:
        raise DiagnosticError([Diagnostic(code="DEPLOY-SCALE", message=m) for m in sharding])
    return spec


def binding_digest(spec: ActivationSpec) -> str:
    """The hash of a binding (its activation id after the ``@``): every member of every binding, the
    policies, the run target, the tzdata version, the scale and what an unencoded delivery meets. An
    unsharded id stays as it was before sharding, a sharded one without growth as it was before growth,
    and one that accepts unencoded deliveries as it was before that setting."""
    body = {
        "workflow": spec.workflow, "entries": [e.model_dump(mode="json") for e in spec.entries], "inputs": spec.inputs,
        "policies": _hashed_policies(spec.policies), "run": spec.run.model_dump(mode="json"),
        "tzdata": spec.tzdata_version,
        **({"shards": spec.shards} if spec.shards > 1 else {}),
        **({"grow": spec.grow.model_dump(mode="json")} if spec.grow is not None else {}),
        **({"unencoded": spec.unencoded} if spec.unencoded != "accept" else {}),  # likewise a deployment without a codec's
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:12]


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
    if unknown:
        declared = ", ".join(sorted(workfile.inputs)) or "none"
        raise DiagnosticError([Diagnostic(
            code="DEPLOY-UNKNOWN-INPUT",
            message=f"deployment inputs {', '.join(unknown)} are not declared under the Workfile's 'inputs:' "
            f"(declared: {declared}): declare them or remove them from the deployment",
        )])
    out.update(provided)
    return out


def manifest_resolver(deployment: Deployment, catalog: Catalog) -> Callable[[TriggerEntry], Manifest | None]:
    """Each entry's implementation under ``deployment``: the one its connection chooses with ``via``
    (``mail.received`` via ``imap`` is a poll), else the trigger's manifest. What capability inference
    (CAP-1) and activation use alike."""
    def resolve(entry: TriggerEntry) -> Manifest | None:
        manifest = catalog.get(entry.connector)
        _, settings, _ = _connection(entry.connection, entry.connector, entry.name, deployment)
        via = settings.get("via")
        return manifest if manifest is None or not isinstance(via, str) else catalog.resolve(entry.connector, via) or manifest

    return resolve


def _implementation(
    catalog: Catalog, manifest: Manifest, connection: str | None, settings: dict[str, Any], entry: str,
) -> tuple[Manifest, Diagnostic | None]:
    """The implementation the entry's connection chooses (``via``), or a diagnostic naming those there are."""
    via = settings.get("via")
    if not isinstance(via, str):
        return manifest, None
    chosen = catalog.resolve(manifest.name, via)
    if chosen is not None:
        return chosen, None
    known = catalog.vias(manifest.name)
    broken = catalog.broken.get(f"{manifest.name} via {via}")
    why = f"its manifest is invalid: {broken}" if broken else (
        f"it has {', '.join(repr(v) for v in known)}" if known else "it has none: remove 'via' from the connection")
    return manifest, Diagnostic(
        code="DEPLOY-CONNECTION-VIA", entry=entry,
        message=f"connection {connection!r} chooses via: {via}, but {manifest.name} has no implementation via "
        f"{via!r} ({why})",
    )


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


def _evaluated_config_problems(manifest: Manifest, config: dict[str, Any], entry: str) -> list[Diagnostic]:
    """The evaluated configuration (inputs substituted, overlay applied) against the manifest (TRIG-2)
    and the connector's own rules, exactly as the validator checks a Workfile's literal values."""
    schema = schema_problems(manifest, config)
    if schema:
        return [Diagnostic(code="TRIG-CONFIG-INVALID", entry=entry, message=f"{manifest.name} {problem} "
                           "(after evaluating inputs and the overlay)") for problem in schema]
    code, problems = semantic_problems(manifest, config)
    return [Diagnostic(code=code, entry=entry, message=problem) for problem in problems]


def _throttle_key_problems(workfile: Workfile, settings: Policies) -> list[Diagnostic]:
    """A throttle's ``key`` references only the Workfile's bindings (their ``as`` names) and its
    declared inputs, as ``queue_by`` does (TRIG-10); each problem names the fix."""
    key = settings.throttle.key if settings.throttle is not None else None
    if key is None:
        return []
    bindings = sorted(entry.name for entry in workfile.entries)
    try:
        refs = Evaluator().root_references(key)
    except ExpressionSyntaxError as exc:  # checked when the deployment loads; a spec built otherwise
        return [Diagnostic(code="DEPLOY-THROTTLE-KEY", message=f"throttle.key {exc}: fix the expression")]
    problems = []
    for name in sorted({name for name, _ in refs} - {"inputs", *bindings}):
        problems.append(Diagnostic(code="DEPLOY-THROTTLE-KEY", message=(
            f"throttle.key references {name!r}, but it may reference only inputs and the bindings of "
            f"{workfile.name!r} ({', '.join(bindings)}): fix the expression")))
    for name in sorted({path[0] for name, path in refs if name == "inputs" and path and path[0] not in workfile.inputs}):
        problems.append(Diagnostic(code="DEPLOY-THROTTLE-KEY", message=(
            f"throttle.key references inputs.{name}, which the Workfile's `inputs:` does not declare: declare it")))
    return problems


def _unknown_overlays(workfile: Workfile, overlay: dict[str, Any]) -> list[Diagnostic]:
    names = {entry.name for entry in workfile.entries}
    return [
        Diagnostic(
            code="DEPLOY-UNKNOWN-OVERLAY",
            message=f"the deployment's overlay names entry {name!r}, which workflow {workfile.name!r} does not have "
            f"(entries: {', '.join(sorted(names))}): fix the name or remove it",
        )
        for name in sorted(set(overlay) - names)
    ]


def _unknown_schedule_entries(workfile: Workfile, named: dict[str, Any], entries: list[EntrySpec]) -> list[Diagnostic]:
    schedules = sorted(e.name for e in entries if e.kind == "schedule")
    return [
        Diagnostic(
            code="DEPLOY-UNKNOWN-SCHEDULE-ENTRY",
            message=f"the deployment's schedule.entries names {name!r}, which is not a schedule entry of workflow "
            f"{workfile.name!r} (schedule entries: {', '.join(schedules) or 'none'}): fix the name or remove it",
        )
        for name in sorted(set(named) - set(schedules))
    ]


def spec_problems(spec: ActivationSpec) -> list[str]:
    """The edge's bounds, checked again on a spec that reaches the activation workflow directly (a
    plain Temporal client can send the ``activate`` update): one line per problem, [] when fine."""
    problems: list[str] = sharding_problems(spec)
    for model, value in ((Policies, spec.policies), (RunTarget, spec.run)):
        try:
            model.model_validate(value.model_dump(mode="json"), context=BOUNDED)
        except ValidationError as exc:
            problems += [f"{'.'.join(map(str, e['loc']))}: {str(e['msg']).removeprefix('Value error, ')}" for e in exc.errors()]
    for entry in spec.entries:
        if len(entry.name) > MAX_BINDING_NAME:
            problems.append(f"entry name of {len(entry.name)} characters; at most {MAX_BINDING_NAME}")
        if entry.kind == "schedule":
            from .schedule import ScheduleConfigError, parse_schedule

            try:
                parse_schedule(entry.config)
            except ScheduleConfigError as exc:
                problems.append(f"entry {entry.name[:MAX_BINDING_NAME]!r}: {exc}")
    return problems
