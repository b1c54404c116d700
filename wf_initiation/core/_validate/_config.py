"""Rules of an entry's configuration: its manifest's input schema (TRIG-2) and `connection` (TRIG-6)."""

from __future__ import annotations

from typing import Any

import jsonschema

from .._config_checks import semantic_problems
from .._yaml import Loc, is_mapping, is_sequence, to_plain
from ._context import FORMAT_CHECKER, Ctx, Draft, is_expression_text, show
from ._expressions import check_expression


def config(node: Any, loc: Loc, draft: Draft, ctx: Ctx) -> tuple[dict[str, Any], str | None]:
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
    errors = [e for e in validator.iter_errors(plain) if not is_expression_text(e.instance)]
    for error in errors:
        _schema_error(error, node, loc, draft, ctx)
    if not errors and not _has_expression(plain):
        _semantics(plain, loc, draft, ctx)  # with expressions, activation checks the evaluated values
    return plain, connection


def _semantics(plain: dict[str, Any], loc: Loc, draft: Draft, ctx: Ctx) -> None:
    """What the schema cannot say (a cron's fields, a zone, bounded instants): as activation checks it."""
    assert draft.manifest is not None
    code, problems = semantic_problems(draft.manifest, plain)
    for problem in problems:  # the entry named as activation names it: the same diagnostic either way
        ctx.add(code, problem, loc, draft.binding or draft.label)


def _has_expression(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_has_expression(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_expression(v) for v in value)
    return is_expression_text(value)


def _connection(value: Any, loc: Loc, draft: Draft, ctx: Ctx) -> str | None:
    if value is None:
        return None  # TRIG-6: resolving a missing connection is a deployment concern
    if isinstance(value, str) and value.strip():
        return value
    ctx.add(
        "TRIG-CONNECTION-INVALID",
        f"`connection: {show(value)}` must name a credential binding (a string)",
        loc,
        draft.label,
    )
    return None


def _config_expressions(node: Any, loc: Loc, draft: Draft, ctx: Ctx) -> None:
    """Configuration is evaluated at activation, before any event: only `inputs` is in scope."""
    if is_mapping(node):
        for key, value in node.items():
            _config_expressions(value, loc.key(node, key), draft, ctx)
    elif is_sequence(node):
        for i, value in enumerate(node):
            _config_expressions(value, loc.item(node, i), draft, ctx)
    elif is_expression_text(node):
        check_expression(node, "config", loc, draft, ctx, event_scope=False)


def _schema_error(error: jsonschema.ValidationError, node: Any, loc: Loc, draft: Draft, ctx: Ctx) -> None:
    where = _locate(node, loc, list(error.absolute_path))
    keys = ", ".join(_schema_keys(error.schema, at_root=not error.absolute_path)) or "none"
    rule = error.validator_value
    if error.validator == "additionalProperties" and isinstance(error.instance, dict) and isinstance(error.schema, dict):
        allowed = set(error.schema.get("properties", {}))
        for extra in sorted((k for k in error.instance if k not in allowed), key=str):
            target = _locate(node, loc, [*error.absolute_path, extra])
            ctx.add(
                "TRIG-CONFIG-UNKNOWN-KEY",
                f"unknown configuration key {extra!r} for {draft.connector}: the keys are {keys}",
                target,
                draft.label,
            )
    elif error.validator == "required" and isinstance(error.instance, dict) and isinstance(rule, list):
        for missing in (k for k in rule if k not in error.instance):
            ctx.add(
                "TRIG-CONFIG-MISSING",
                f"{draft.connector} needs configuration key {missing!r}: add it",
                where,
                draft.label,
            )
    elif error.validator in ("anyOf", "oneOf") and isinstance(rule, list) and _only_required(rule):
        options = " or ".join(k for sub in rule for k in sub["required"])
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
