"""Rules of the document as a whole: root keys, `name`, `inputs`, `steps`, the shape of `on:`."""

from __future__ import annotations

from typing import Any

from .._catalog import Catalog
from .._diagnostics import Diagnostic
from .._model import TriggerEntry, Workfile
from .._yaml import Loc, is_mapping, is_sequence, node_line, to_plain
from ._context import DECLARED_CAPABILITY_KEYS, IDENT, RESERVED_NAMES, WORKFLOW_NAME, Ctx, Draft, show, type_name
from ._entry import entry
from ._into import cross_entry


def validate_document(doc: Any, catalog: Catalog) -> tuple[Workfile | None, list[Diagnostic]]:
    """Validate a parsed round-trip YAML tree; the model is None whenever a diagnostic exists."""
    ctx = Ctx(catalog=catalog)
    root = Loc("", 1)
    if not is_mapping(doc):
        what = "empty" if doc is None else f"a {type_name(doc)}"
        ctx.add("WF-NOT-MAPPING", f"the Workfile is {what}: write a mapping with `name:`, `on:` and `steps:`", root)
        return None, ctx.diagnostics
    _root_keys(doc, ctx)
    name = _name(doc, ctx)
    ctx.inputs = _inputs(doc, ctx)
    ctx.step_ids = _steps(doc, ctx)
    drafts = _on(doc, ctx)
    cross_entry(drafts, ctx)
    if ctx.diagnostics or name is None:
        return None, sorted(ctx.diagnostics, key=lambda d: d.line or 0)
    entries = [entry_model(d) for d in drafts]
    wf = Workfile(name=name, inputs=ctx.inputs, entries=entries, multi=ctx.multi, step_ids=ctx.step_ids)
    return wf, []


def _root_keys(doc: Any, ctx: Ctx) -> None:
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


def _name(doc: Any, ctx: Ctx) -> str | None:
    if "name" not in doc:
        ctx.add("WF-NAME-MISSING", "add `name:`, the workflow identity (e.g. `name: support-triage`)", Loc("name", 1))
        return None
    value, loc = doc["name"], Loc("", 1).key(doc, "name")
    if not isinstance(value, str) or not WORKFLOW_NAME.match(value):
        ctx.add(
            "WF-NAME-INVALID",
            f"`name: {show(value)}` is not a workflow identity: use letters, digits, '.', '_' or '-' "
            "(at most 200 characters, starting with a letter or digit)",
            loc,
        )
        return None
    return str(value)


def _inputs(doc: Any, ctx: Ctx) -> dict[str, Any]:
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
                f"input name {show(key)} must be an identifier (letters, digits, '_')",
                loc.key(node, key),
            )
    return out


def _steps(doc: Any, ctx: Ctx) -> list[str]:
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
                f"step id {show(step_id)} must be an identifier{reserved}",
                step_loc.key(step, "id"),
            )
        elif step_id in ids:
            ctx.add("WF-STEP-ID-DUPLICATE", f"step id {step_id!r} is used twice: rename one", step_loc.key(step, "id"))
        else:
            ids.append(step_id)
    return ids


def _on(doc: Any, ctx: Ctx) -> list[Draft]:
    if "on" not in doc:
        hint = ' (`on` was read as the boolean true: quote it as "on")' if True in doc else ""
        ctx.add("TRIG-ON-MISSING", f"add `on:` naming the trigger that starts this workflow{hint}", Loc("on", 1))
        return []
    node, loc = doc["on"], Loc("", 1).key(doc, "on")
    if is_mapping(node):
        return _present([entry(node, 0, Loc("on", node_line(node) or loc.line), ctx)])
    if not is_sequence(node):
        ctx.add("TRIG-ON-TYPE", "`on:` must be one trigger entry (a mapping) or a list of entries", loc)
        return []
    ctx.multi = True
    if not node:
        ctx.add("TRIG-ON-EMPTY", "`on:` is an empty list: declare at least one trigger", loc)
    return _present([entry(item, i, loc.item(node, i), ctx) for i, item in enumerate(node)])


def _present(drafts: list[Draft | None]) -> list[Draft]:
    return [d for d in drafts if d is not None]


def entry_model(d: Draft) -> TriggerEntry:
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
