"""The core validator: a Workfile's text in, a :class:`ValidationResult` out.

It checks trigger syntax and the resolved manifest contract without regard to target support
(CAP-5), reports every problem of a file at once, and never raises on bad input: every problem
is a :class:`~wf_initiation.core.Diagnostic` with a stable code, a message naming the fix, the trigger
entry, the YAML path and the line. Support is classified only when the caller passes the
deployment's claimed capabilities (CAP-7).
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field

from ._capabilities import classify, required_capabilities
from ._catalog import Catalog, Manifest, manifest_problems
from ._diagnostics import Diagnostic
from ._durations import DurationError, parse_duration
from ._expr import Evaluator, ExpressionSyntaxError
from ._model import BatchSpec, TriggerEntry, Workfile
from ._yaml import Loc, is_mapping, is_sequence, node_line, parse_yaml, to_plain

Status = Literal["valid", "invalid", "unsupported"]
FORMAT_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
WORKFLOW_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
RESERVED_NAMES = ("inputs", "trigger")
ENTRY_KEYS = ("as", "when", "queue_by", "batch", "into")
BATCH_KEYS = ("size", "max_wait", "partition_by")
# Keys by which a Workfile might try to declare initiation capabilities itself (CAP-2).
DECLARED_CAPABILITY_KEYS = ("requires", "capabilities", "required_capabilities")


class ValidationResult(BaseModel):
    """Outcome of validating one Workfile (and, when claims were given, classifying its support)."""

    model_config = ConfigDict(frozen=True)

    file: str | None = Field(description="File name the diagnostics refer to, if any.")
    status: Status = Field(description="valid | invalid | unsupported (unsupported only when claims were given).")
    workflow: str | None = Field(description="The Workfile's `name` (its workflow identity), when readable.")
    workfile: Workfile | None = Field(description="The parsed model; None when invalid.")
    required_capabilities: list[str] = Field(description="Sorted union of inferred capabilities; [] when invalid.")
    diagnostics: list[Diagnostic] = Field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The JSON form printed by ``wfi validate --json``."""
        keys = ("code", "message", "entry", "path", "line", "capability")
        return {
            "file": self.file,
            "status": self.status,
            "workflow": self.workflow,
            "required_capabilities": list(self.required_capabilities),
            "diagnostics": [d.model_dump(include=set(keys)) for d in self.diagnostics],
        }


def load_workfile(
    source: str | pathlib.Path,
    *,
    catalog: Catalog | None = None,
    claims: Iterable[str] | None = None,
    file: str | None = None,
) -> ValidationResult:
    """Parse and validate a Workfile, and classify its support when ``claims`` is given.

    Args:
        source: A path to read, or the YAML text itself.
        catalog: Connector catalog; :meth:`Catalog.default` when omitted.
        claims: Capabilities the target deployment claims. None means "do not classify":
            the status is then only ``valid`` or ``invalid``.
        file: Name to report diagnostics against (defaults to the path).

    Returns:
        The result; bad input of any kind yields diagnostics, never an exception.
    """
    if isinstance(source, pathlib.Path):
        file = file if file is not None else str(source)
        text, problem = _read(source)
        if problem is not None:
            return _invalid(file, None, [problem])
    else:
        text = source
    catalog = catalog if catalog is not None else Catalog.default()
    doc, diagnostics = parse_yaml(text)
    if diagnostics:
        return _invalid(file, None, diagnostics)
    workfile, diagnostics = validate_document(doc, catalog)
    if workfile is None:
        return _invalid(file, _workflow_name(doc), diagnostics)
    return _classified(file, workfile, catalog, claims)


def _classified(file: str | None, wf: Workfile, catalog: Catalog, claims: Iterable[str] | None) -> ValidationResult:
    caps = sorted(required_capabilities(wf, catalog))
    unsupported = classify(wf, catalog, claims) if claims is not None else []
    status: Status = "unsupported" if unsupported else "valid"
    return ValidationResult(
        file=file, status=status, workflow=wf.name, workfile=wf, required_capabilities=caps, diagnostics=unsupported
    )


def _invalid(file: str | None, workflow: str | None, diagnostics: list[Diagnostic]) -> ValidationResult:
    return ValidationResult(
        file=file, status="invalid", workflow=workflow, workfile=None, required_capabilities=[], diagnostics=diagnostics
    )


def _read(path: pathlib.Path) -> tuple[str, Diagnostic | None]:
    try:
        return path.read_text(encoding="utf-8"), None
    except UnicodeDecodeError as exc:
        return "", Diagnostic(
            code="WF-FILE-UNREADABLE", message=f"{path} is not UTF-8 text ({exc.reason}): save it as UTF-8"
        )
    except OSError as exc:
        return "", Diagnostic(code="WF-FILE-UNREADABLE", message=f"cannot read {path}: {exc.strerror or exc}")


def _workflow_name(doc: Any) -> str | None:
    name = doc.get("name") if is_mapping(doc) else None
    return str(name) if isinstance(name, str) else None


# --------------------------------------------------------------------------- document


@dataclass
class _Ctx:
    """Everything entry checks need: the catalog, the root scope, and the diagnostics so far."""

    catalog: Catalog
    evaluator: Evaluator = field(default_factory=Evaluator)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    inputs: dict[str, Any] = field(default_factory=dict)
    step_ids: list[str] = field(default_factory=list)
    multi: bool = False

    def add(self, code: str, message: str, loc: Loc | None = None, entry: str | None = None) -> None:
        self.diagnostics.append(
            Diagnostic(
                code=code,
                message=message,
                entry=entry,
                path=loc.path if loc else None,
                line=loc.line if loc else None,
            )
        )


@dataclass
class _Draft:
    """One entry of `on:` as far as it could be read, with the locations cross-entry checks need."""

    index: int
    loc: Loc
    label: str
    connector: str | None = None
    manifest: Manifest | None = None
    config: dict[str, Any] = field(default_factory=dict)
    connection: str | None = None
    as_name: str | None = None
    as_loc: Loc | None = None
    binding: str | None = None
    when: str | None = None
    queue_by: str | None = None
    batch: BatchSpec | None = None
    into: Any = None
    into_loc: Loc | None = None


def validate_document(doc: Any, catalog: Catalog) -> tuple[Workfile | None, list[Diagnostic]]:
    """Validate a parsed round-trip YAML tree; the model is None whenever a diagnostic exists."""
    ctx = _Ctx(catalog=catalog)
    root = Loc("", 1)
    if not is_mapping(doc):
        what = "empty" if doc is None else f"a {_type_name(doc)}"
        ctx.add("WF-NOT-MAPPING", f"the Workfile is {what}: write a mapping with `name:`, `on:` and `steps:`", root)
        return None, ctx.diagnostics
    _root_keys(doc, ctx)
    name = _name(doc, ctx)
    ctx.inputs = _inputs(doc, ctx)
    ctx.step_ids = _steps(doc, ctx)
    drafts = _on(doc, ctx)
    _cross_entry(drafts, ctx)
    if ctx.diagnostics or name is None:
        return None, sorted(ctx.diagnostics, key=lambda d: d.line or 0)
    entries = [_entry_model(d) for d in drafts]
    wf = Workfile(name=name, inputs=ctx.inputs, entries=entries, multi=ctx.multi, step_ids=ctx.step_ids)
    return wf, []


def _root_keys(doc: Any, ctx: _Ctx) -> None:
    for key in doc:
        loc = Loc("", 1).key(doc, key)
        if not isinstance(key, str):
            ctx.add("WF-KEY-TYPE", f"top-level key {key!r} must be a string: quote it or remove it", loc)
        elif key in DECLARED_CAPABILITY_KEYS:
            # CAP-2 (use of the trigger is the whole activation predicate)
            ctx.add(
                "CAP-DECLARED",
                f"remove `{key}:`: a Workfile must not declare initiation capabilities; "
                "they are inferred from its triggers",
                loc,
            )


def _name(doc: Any, ctx: _Ctx) -> str | None:
    if "name" not in doc:
        ctx.add("WF-NAME-MISSING", "add `name:`, the workflow identity (e.g. `name: support-triage`)", Loc("name", 1))
        return None
    value, loc = doc["name"], Loc("", 1).key(doc, "name")
    if not isinstance(value, str) or not WORKFLOW_NAME.match(value):
        ctx.add(
            "WF-NAME-INVALID",
            f"`name: {_show(value)}` is not a workflow identity: use letters, digits, '.', '_' or '-' "
            "(at most 200 characters, starting with a letter or digit)",
            loc,
        )
        return None
    return str(value)


def _inputs(doc: Any, ctx: _Ctx) -> dict[str, Any]:
    node = doc.get("inputs")
    loc = Loc("", 1).key(doc, "inputs")
    if node is None:
        return {}
    if not is_mapping(node):
        ctx.add("WF-INPUTS-INVALID", "`inputs:` must be a mapping of input name to its spec or default", loc)
        return {}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(key, str) and IDENT.match(key):
            out[key] = to_plain(value)
        else:
            ctx.add(
                "WF-INPUT-NAME",
                f"input name {_show(key)} must be an identifier (letters, digits, '_')",
                loc.key(node, key),
            )
    return out


def _steps(doc: Any, ctx: _Ctx) -> list[str]:
    node = doc.get("steps")
    loc = Loc("", 1).key(doc, "steps")
    if node is None:
        return []
    if not is_sequence(node):
        ctx.add("WF-STEPS-INVALID", "`steps:` must be a list of steps, each a mapping with an `id`", loc)
        return []
    ids: list[str] = []
    for i, step in enumerate(node):
        step_loc = loc.item(node, i)
        step_id = step.get("id") if is_mapping(step) else None
        if not is_mapping(step) or "id" not in step:
            ctx.add("WF-STEP-ID-MISSING", f"step {i + 1} needs a mapping with an `id:`", step_loc)
        elif not isinstance(step_id, str) or not IDENT.match(step_id) or step_id in RESERVED_NAMES:
            reserved = " and is not `inputs` or `trigger`" if step_id in RESERVED_NAMES else ""
            ctx.add(
                "WF-STEP-ID-INVALID",
                f"step id {_show(step_id)} must be an identifier{reserved}",
                step_loc.key(step, "id"),
            )
        elif step_id in ids:
            ctx.add("WF-STEP-ID-DUPLICATE", f"step id {step_id!r} is used twice: rename one", step_loc.key(step, "id"))
        else:
            ids.append(step_id)
    return ids


def _on(doc: Any, ctx: _Ctx) -> list[_Draft]:
    if "on" not in doc:
        hint = ' (`on` was read as the boolean true: quote it as "on")' if True in doc else ""
        ctx.add("TRIG-ON-MISSING", f"add `on:` naming the trigger that starts this workflow{hint}", Loc("on", 1))
        return []
    node, loc = doc["on"], Loc("", 1).key(doc, "on")
    if is_mapping(node):
        return _present([_entry(node, 0, Loc("on", node_line(node) or loc.line), ctx)])
    if not is_sequence(node):
        ctx.add("TRIG-ON-TYPE", "`on:` must be one trigger entry (a mapping) or a list of entries", loc)
        return []
    ctx.multi = True
    if not node:
        ctx.add("TRIG-ON-EMPTY", "`on:` is an empty list: declare at least one trigger", loc)
    return _present([_entry(item, i, loc.item(node, i), ctx) for i, item in enumerate(node)])


def _present(drafts: list[_Draft | None]) -> list[_Draft]:
    return [d for d in drafts if d is not None]


# --------------------------------------------------------------------------- one entry


def _entry(node: Any, index: int, loc: Loc, ctx: _Ctx) -> _Draft | None:
    if not is_mapping(node):
        ctx.add(
            "TRIG-ENTRY-TYPE",
            f"trigger entry {index + 1} must be a mapping like `mail.received: {{...}}`",
            loc,
            f"on[{index}]",
        )
        return None
    draft = _Draft(index=index, loc=loc, label=_label(node, index))
    connector_key = _connector_key(node, loc, draft, ctx)
    if connector_key is not None:
        draft.connector = str(connector_key)
        draft.loc = loc.key(node, connector_key)
        draft.manifest = _manifest(draft, ctx)
    _as(node, loc, draft, ctx)
    if draft.manifest is not None:
        draft.config, draft.connection = _config(node[connector_key], draft.loc, draft, ctx)
    draft.when = _expression_key(node, "when", loc, draft, ctx)
    draft.queue_by = _expression_key(node, "queue_by", loc, draft, ctx)
    draft.batch = _batch(node, loc, draft, ctx)
    if "into" in node:
        draft.into, draft.into_loc = node["into"], loc.key(node, "into")
    return draft


def _label(node: Any, index: int) -> str:
    as_name = node.get("as")
    if isinstance(as_name, str) and IDENT.match(as_name) and as_name not in RESERVED_NAMES:
        return as_name
    others = [k for k in node if k not in ENTRY_KEYS]
    dotted = [k for k in others if isinstance(k, str) and "." in k]
    named = others if len(others) == 1 else dotted
    return str(named[0]) if len(named) == 1 else f"on[{index}]"


def _connector_key(node: Any, loc: Loc, draft: _Draft, ctx: _Ctx) -> Any:
    """The one `connector.event` key of an entry; every other key must be an entry key."""
    others = [k for k in node if k not in ENTRY_KEYS]
    dotted = [k for k in others if isinstance(k, str) and "." in k]
    if len(others) == 1:
        return others[0]
    for key in others:
        if key not in dotted:
            ctx.add(
                "TRIG-ENTRY-UNKNOWN-KEY",
                f"{_show(key)} is not an entry key: use {', '.join(ENTRY_KEYS)} beside one `connector.event` key",
                loc.key(node, key),
                draft.label,
            )
    if not others:
        ctx.add(
            "TRIG-CONNECTOR-MISSING",
            "name the trigger: add one `connector.event:` key (e.g. `mail.received:`)",
            loc,
            draft.label,
        )
    elif len(dotted) > 1:
        ctx.add(
            "TRIG-CONNECTOR-MULTIPLE",
            f"an entry names exactly one trigger, this one names {', '.join(map(str, dotted))}: "
            "write a list under `on:` with one entry per trigger",
            loc.key(node, dotted[1]),
            draft.label,
        )
    return dotted[0] if len(dotted) == 1 else None


def _manifest(draft: _Draft, ctx: _Ctx) -> Manifest | None:
    assert draft.connector is not None
    manifest = ctx.catalog.get(draft.connector)
    if manifest is None:
        found = ctx.catalog.diagnostic_for(draft.connector)
        if found is not None:
            ctx.diagnostics.append(
                found.model_copy(update={"entry": draft.label, "path": draft.loc.path, "line": draft.loc.line})
            )
        return None
    problems = manifest_problems(manifest)
    if problems:
        # CAP-6 (a manifest without delivery identity is an invalid dependency)
        ctx.add(
            "MANIFEST-INVALID",
            f"manifest of {manifest.name!r} is invalid: {'; '.join(problems)}",
            draft.loc,
            draft.label,
        )
        return None
    return manifest


def _as(node: Any, loc: Loc, draft: _Draft, ctx: _Ctx) -> None:
    default = draft.manifest.binds if draft.manifest else None
    if "as" not in node:
        _missing_as(loc, draft, default, ctx)
        draft.binding = default
        return
    value, as_loc = node["as"], loc.key(node, "as")
    draft.as_loc = as_loc
    if not isinstance(value, str) or not IDENT.match(value):
        ctx.add(
            "TRIG-AS-INVALID", f"`as: {_show(value)}` must be an identifier (letters, digits, '_')", as_loc, draft.label
        )
    elif value in RESERVED_NAMES:
        ctx.add(
            "TRIG-AS-RESERVED",
            f"`as: {value}` shadows the reserved name {value!r}: choose another name",
            as_loc,
            draft.label,
        )
    elif value in ctx.step_ids:
        ctx.add(
            "TRIG-AS-STEP-COLLISION",
            f"`as: {value}` collides with step id {value!r}: rename one of them",
            as_loc,
            draft.label,
        )
    else:
        draft.as_name = draft.binding = value


def _missing_as(loc: Loc, draft: _Draft, default: str | None, ctx: _Ctx) -> None:
    if ctx.multi:
        # TRIG-4, TRIG-18 (each entry of a list needs its own `as`)
        ctx.add(
            "TRIG-AS-REQUIRED",
            f"add `as: <name>` to entry {draft.index + 1} ({draft.label}): every entry of a list under `on:` "
            "needs its own binding name",
            draft.loc if draft.connector else loc,
            draft.label,
        )
    elif default is not None and default in ctx.step_ids:
        # TRIG-5 (never resolved silently)
        ctx.add(
            "TRIG-AS-COLLISION",
            f"the default binding {default!r} of {draft.connector} collides with step id {default!r}: "
            "add `as: <name>` to the trigger entry",
            draft.loc,
            draft.label,
        )


def _expression_key(node: Any, key: str, loc: Loc, draft: _Draft, ctx: _Ctx) -> str | None:
    if key not in node:
        return None
    return check_expression(node[key], key, loc.key(node, key), draft, ctx)


def check_expression(
    value: Any, what: str, loc: Loc, draft: _Draft, ctx: _Ctx, *, event_scope: bool = True
) -> str | None:
    """Check that ``value`` is an expression over the allowed root names only (TRIG-8, TRIG-10, TRIG-16)."""
    if not isinstance(value, str) or not value.strip():
        ctx.add("TRIG-EXPR-TYPE", f'`{what}` must be an expression string such as "{{{{ ... }}}}"', loc, draft.label)
        return None
    try:
        refs = ctx.evaluator.root_references(value)
        ctx.evaluator.compile(value)
    except (ExpressionSyntaxError, RecursionError) as exc:
        ctx.add(
            "TRIG-EXPR-SYNTAX",
            f"`{what}` {exc if isinstance(exc, ExpressionSyntaxError) else 'nests too deeply'}: fix the expression",
            loc,
            draft.label,
        )
        return None
    allowed = {"inputs", draft.binding} if event_scope else {"inputs"}
    outside = sorted({name for name, _ in refs} - allowed)
    undeclared = sorted({path[0] for name, path in refs if name == "inputs" and path and path[0] not in ctx.inputs})
    scope = " and ".join(sorted(n for n in allowed if n))
    for name in outside:
        code = f"TRIG-{what.upper().replace('_', '-')}-SCOPE"
        ctx.add(code, f"`{what}` references {name!r}, but it may reference only {scope}", loc, draft.label)
    for name in undeclared:
        ctx.add(
            "TRIG-INPUT-UNKNOWN",
            f"`{what}` references inputs.{name}, which `inputs:` does not declare: declare it",
            loc,
            draft.label,
        )
    return value if not outside and not undeclared else None


def _batch(node: Any, loc: Loc, draft: _Draft, ctx: _Ctx) -> BatchSpec | None:
    if "batch" not in node:
        return None
    value, batch_loc = node["batch"], loc.key(node, "batch")
    if "queue_by" in node:
        # TRIG-17
        ctx.add(
            "TRIG-BATCH-QUEUE-BY",
            "an entry must not declare both `batch` and `queue_by`: remove one",
            batch_loc,
            draft.label,
        )
    if not is_mapping(value):
        ctx.add(
            "TRIG-BATCH-TYPE",
            "`batch:` must be a mapping with `size`, `max_wait` and/or `partition_by`",
            batch_loc,
            draft.label,
        )
        return None
    ok = True
    for key in value:
        if key not in BATCH_KEYS:
            ok = False
            ctx.add(
                "TRIG-BATCH-UNKNOWN-KEY",
                f"unknown `batch` key {_show(key)}: use {', '.join(BATCH_KEYS)}",
                batch_loc.key(value, key),
                draft.label,
            )
    size = _batch_size(value, batch_loc, draft, ctx)
    wait = _batch_wait(value, batch_loc, draft, ctx)
    partition = (
        check_expression(value["partition_by"], "partition_by", batch_loc.key(value, "partition_by"), draft, ctx)
        if "partition_by" in value
        else None
    )
    if "size" not in value and "max_wait" not in value:
        ok = False
        ctx.add(
            "TRIG-BATCH-EMPTY",
            "`batch:` needs `size`, `max_wait` or both to say when a batch closes",
            batch_loc,
            draft.label,
        )
    if (
        not ok
        or ("size" in value and size is None)
        or ("max_wait" in value and wait is None)
        or ("partition_by" in value and partition is None)
    ):
        return None
    return BatchSpec(size=size, max_wait_seconds=wait, partition_by=partition)


def _batch_size(value: Any, loc: Loc, draft: _Draft, ctx: _Ctx) -> int | None:
    if "size" not in value:
        return None
    size = value["size"]
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        ctx.add(
            "TRIG-BATCH-SIZE",
            f"`batch.size: {_show(size)}` must be a positive integer",
            loc.key(value, "size"),
            draft.label,
        )
        return None
    return int(size)


def _batch_wait(value: Any, loc: Loc, draft: _Draft, ctx: _Ctx) -> float | None:
    if "max_wait" not in value:
        return None
    try:
        seconds = parse_duration(to_plain(value["max_wait"])).total_seconds()
    except (DurationError, TypeError) as exc:
        ctx.add("TRIG-BATCH-MAX-WAIT", f"`batch.max_wait`: {exc}", loc.key(value, "max_wait"), draft.label)
        return None
    except OverflowError:
        ctx.add(
            "TRIG-BATCH-MAX-WAIT",
            "`batch.max_wait` is too long: write a duration of days at most",
            loc.key(value, "max_wait"),
            draft.label,
        )
        return None
    if seconds <= 0:
        ctx.add(
            "TRIG-BATCH-MAX-WAIT",
            "`batch.max_wait` must be longer than zero, e.g. 5s",
            loc.key(value, "max_wait"),
            draft.label,
        )
        return None
    return seconds


# --------------------------------------------------------------------------- configuration


def _config(node: Any, loc: Loc, draft: _Draft, ctx: _Ctx) -> tuple[dict[str, Any], str | None]:
    """Check an entry's configuration against its manifest's input schema (TRIG-2)."""
    assert draft.manifest is not None
    if node is None:
        node = {}
    if not is_mapping(node):
        ctx.add(
            "TRIG-CONFIG-TYPE",
            f"the configuration of {draft.connector} must be a mapping of its keys",
            loc,
            draft.label,
        )
        return {}, None
    plain = to_plain(node)
    connection = _connection(plain.pop("connection", None), loc.key(node, "connection"), draft, ctx)
    _config_expressions(node, loc, draft, ctx)
    validator = jsonschema.Draft202012Validator(draft.manifest.input_schema, format_checker=FORMAT_CHECKER)
    for error in validator.iter_errors(plain):
        if not _is_expression_text(error.instance):
            _schema_error(error, node, loc, draft, ctx)
    return plain, connection


def _connection(value: Any, loc: Loc, draft: _Draft, ctx: _Ctx) -> str | None:
    if value is None:
        return None  # TRIG-6: resolving a missing connection is a deployment concern
    if isinstance(value, str) and value.strip():
        return value
    ctx.add(
        "TRIG-CONNECTION-INVALID",
        f"`connection: {_show(value)}` must name a credential binding (a string)",
        loc,
        draft.label,
    )
    return None


def _config_expressions(node: Any, loc: Loc, draft: _Draft, ctx: _Ctx) -> None:
    """Configuration is evaluated at activation, before any event: only `inputs` is in scope."""
    if is_mapping(node):
        for key, value in node.items():
            _config_expressions(value, loc.key(node, key), draft, ctx)
    elif is_sequence(node):
        for i, value in enumerate(node):
            _config_expressions(value, loc.item(node, i), draft, ctx)
    elif _is_expression_text(node):
        check_expression(node, "config", loc, draft, ctx, event_scope=False)


def _is_expression_text(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


def _schema_error(error: jsonschema.ValidationError, node: Any, loc: Loc, draft: _Draft, ctx: _Ctx) -> None:
    where = _locate(node, loc, list(error.absolute_path))
    keys = ", ".join(_schema_keys(error.schema, at_root=not error.absolute_path)) or "none"
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        for extra in sorted((k for k in error.instance if k not in allowed), key=str):
            target = _locate(node, loc, [*error.absolute_path, extra])
            ctx.add(
                "TRIG-CONFIG-UNKNOWN-KEY",
                f"unknown configuration key {extra!r} for {draft.connector}: the keys are {keys}",
                target,
                draft.label,
            )
    elif error.validator == "required" and isinstance(error.instance, dict):
        for missing in (k for k in error.validator_value if k not in error.instance):
            ctx.add(
                "TRIG-CONFIG-MISSING",
                f"{draft.connector} needs configuration key {missing!r}: add it",
                where,
                draft.label,
            )
    elif error.validator in ("anyOf", "oneOf") and _only_required(error.validator_value):
        options = " or ".join(k for sub in error.validator_value for k in sub["required"])
        ctx.add("TRIG-CONFIG-MISSING", f"{draft.connector} needs {options}: add one", where, draft.label)
    else:
        at = ".".join(str(p) for p in error.absolute_path) or "configuration"
        message = error.message if len(error.message) <= 160 else error.message[:157] + "..."
        ctx.add("TRIG-CONFIG-INVALID", f"{draft.connector} {at}: {message}", where, draft.label)


def _schema_keys(schema: Any, *, at_root: bool) -> list[str]:
    props = [str(k) for k in (schema.get("properties", {}) if isinstance(schema, dict) else {})]
    return sorted({*props, "connection"} if at_root else set(props))


def _only_required(options: Any) -> bool:
    return isinstance(options, list) and all(isinstance(o, dict) and set(o) == {"required"} for o in options)


def _locate(node: Any, loc: Loc, path: list[Any]) -> Loc:
    """Walk a round-trip tree along a JSON-Schema error path, keeping the deepest known location."""
    for part in path:
        if is_mapping(node) and part in node:
            loc, node = loc.key(node, part), node[part]
        elif is_sequence(node) and isinstance(part, int) and 0 <= part < len(node):
            loc, node = loc.item(node, part), node[part]
        else:
            break
    return loc


# --------------------------------------------------------------------------- across entries


def _cross_entry(drafts: list[_Draft], ctx: _Ctx) -> None:
    seen: dict[str, _Draft] = {}
    for d in drafts:
        if d.as_name is None:
            continue
        if d.as_name in seen:
            ctx.add(
                "TRIG-AS-DUPLICATE",
                f"`as: {d.as_name}` is already the binding of entry {seen[d.as_name].index + 1}: choose another name",
                d.as_loc,
                d.label,
            )
        else:
            seen[d.as_name] = d
    _into(drafts, ctx)


def _into(drafts: list[_Draft], ctx: _Ctx) -> None:
    declared = [d for d in drafts if d.into_loc is not None]
    if not declared:
        return
    if len(drafts) == 1:
        # TRIG-21
        ctx.add(
            "TRIG-INTO-SINGLE",
            "a single-trigger file must not declare `into`: use a value step for the projection",
            declared[0].into_loc,
            declared[0].label,
        )
        return
    for d in drafts:
        if d.into_loc is None:
            # TRIG-20 (if one entry declares into, every entry must)
            ctx.add(
                "TRIG-INTO-MISSING",
                f"entry {d.index + 1} ({d.label}) needs `into:` because another entry declares it",
                d.loc,
                d.label,
            )
    shapes = [(d, _into_shape(d, ctx)) for d in declared]
    _into_names(shapes, drafts, ctx)
    _into_same_shape(shapes, ctx)


def _into_shape(d: _Draft, ctx: _Ctx) -> dict[str, Any] | None:
    assert d.into_loc is not None
    if not is_mapping(d.into) or not d.into:
        ctx.add(
            "TRIG-INTO-TYPE", "`into:` must map shared binding names to projections of the payload", d.into_loc, d.label
        )
        return None
    return _shape(d.into, d.into_loc, d, ctx)


def _shape(node: Any, loc: Loc, d: _Draft, ctx: _Ctx) -> Any:
    if is_mapping(node):
        return {str(k): _shape(v, loc.key(node, k), d, ctx) for k, v in node.items()}
    if is_sequence(node):
        for i, item in enumerate(node):
            _shape(item, loc.item(node, i), d, ctx)
    elif isinstance(node, str) and "{{" in node:
        check_expression(node, "into", loc, d, ctx)
    return None


def _into_names(shapes: list[tuple[_Draft, Any]], drafts: list[_Draft], ctx: _Ctx) -> None:
    taken = {*RESERVED_NAMES, *ctx.step_ids, *(d.binding for d in drafts if d.binding)}
    reported: set[str] = set()
    for d, shape in shapes:
        for name in shape or {}:
            if name in reported:
                continue
            loc = d.into_loc.key(d.into, name) if d.into_loc else None
            if not IDENT.match(name):
                ctx.add("TRIG-INTO-NAME", f"`into` name {name!r} must be an identifier", loc, d.label)
            elif name in taken:
                ctx.add(
                    "TRIG-INTO-COLLISION",
                    f"`into` name {name!r} collides with a root-scope name "
                    "(a step id, a binding, inputs or trigger): rename it",
                    loc,
                    d.label,
                )
            else:
                continue
            reported.add(name)


def _into_same_shape(shapes: list[tuple[_Draft, Any]], ctx: _Ctx) -> None:
    valid = [(d, s) for d, s in shapes if s is not None]
    if not valid:
        return
    ref_draft, reference = valid[0]
    for d, shape in valid[1:]:
        missing = sorted(_paths(reference) - _paths(shape))
        extra = sorted(_paths(shape) - _paths(reference))
        if missing or extra:
            parts = [f"missing {', '.join(missing)}" if missing else "", f"extra {', '.join(extra)}" if extra else ""]
            ctx.add(
                "TRIG-INTO-SHAPE",
                f"`into` of entry {d.index + 1} must bind the same names with the same nested keys as entry "
                f"{ref_draft.index + 1} ({'; '.join(p for p in parts if p)})",
                d.into_loc,
                d.label,
            )


def _paths(shape: Any, prefix: str = "") -> set[str]:
    if not isinstance(shape, dict):
        return {prefix} if prefix else set()
    out: set[str] = set()
    for key, sub in shape.items():
        path = f"{prefix}.{key}" if prefix else key
        out |= _paths(sub, path) if isinstance(sub, dict) and sub else {path + ("{}" if isinstance(sub, dict) else "")}
    return out


# --------------------------------------------------------------------------- model


def _entry_model(d: _Draft) -> TriggerEntry:
    assert d.connector is not None and d.binding is not None
    into = to_plain(d.into) if d.into_loc is not None else None
    return TriggerEntry(
        index=d.index,
        connector=d.connector,
        config=d.config,
        connection=d.connection,
        as_name=d.as_name,
        binding=d.binding,
        when=d.when,
        queue_by=d.queue_by,
        batch=d.batch,
        into=into,
        line=d.loc.line,
    )


def _type_name(value: Any) -> str:
    if is_sequence(value):
        return "list"
    return {str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(to_plain(value)), type(value).__name__
    )


def _show(value: Any) -> str:
    text = repr(to_plain(value)) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["ValidationResult", "load_workfile", "validate_document"]
