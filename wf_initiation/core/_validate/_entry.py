"""Rules of one `on:` entry: its connector key, its manifest, `as` and its other keys."""

from __future__ import annotations

from typing import Any

from .._bounds import MAX_BINDING_NAME
from .._catalog import Manifest, manifest_problems
from .._yaml import Loc, is_mapping
from ._batch import batch
from ._config import config
from ._context import ENTRY_KEYS, IDENT, RESERVED_NAMES, Ctx, Draft, show
from ._expressions import expression_key


def entry(node: Any, index: int, loc: Loc, ctx: Ctx) -> Draft | None:
    if not is_mapping(node):
        ctx.add(
            "TRIG-ENTRY-TYPE",
            f"trigger entry {index + 1} must be a mapping like `mail.received: {{...}}`",
            loc,
            f"on[{index}]",
        )
        return None
    draft = Draft(index=index, loc=loc, label=_label(node, index))
    connector_key = _connector_key(node, loc, draft, ctx)
    if connector_key is not None:
        draft.connector = str(connector_key)
        draft.loc = loc.key(node, connector_key)
        draft.manifest = _manifest(draft, ctx)
    _as(node, loc, draft, ctx)
    if draft.manifest is not None:
        draft.config, draft.connection = config(node[connector_key], draft.loc, draft, ctx)
    draft.when = expression_key(node, "when", loc, draft, ctx)
    draft.queue_by = expression_key(node, "queue_by", loc, draft, ctx)
    draft.batch = batch(node, loc, draft, ctx)
    if "into" in node:
        draft.into, draft.into_loc = node["into"], loc.key(node, "into")
    return draft


def _label(node: Any, index: int) -> str:
    as_name = node.get("as")
    if isinstance(as_name, str) and IDENT.match(as_name) and as_name not in RESERVED_NAMES and len(as_name) <= MAX_BINDING_NAME:
        return as_name
    others = [k for k in node if k not in ENTRY_KEYS]
    dotted = [k for k in others if isinstance(k, str) and "." in k]
    named = others if len(others) == 1 else dotted
    return str(named[0]) if len(named) == 1 else f"on[{index}]"


def _connector_key(node: Any, loc: Loc, draft: Draft, ctx: Ctx) -> Any:
    """The one `connector.event` key of an entry; every other key must be an entry key."""
    others = [k for k in node if k not in ENTRY_KEYS]
    dotted = [k for k in others if isinstance(k, str) and "." in k]
    if len(others) == 1 and isinstance(others[0], str):  # a null or number key names no trigger: reported below
        return others[0]
    for key in others:
        if key not in dotted:
            ctx.add(
                "TRIG-ENTRY-UNKNOWN-KEY",
                f"{'a key with no name' if key is None else show(key)} is not an entry key: use {', '.join(ENTRY_KEYS)} "
                "beside one `connector.event` key",
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


def _manifest(draft: Draft, ctx: Ctx) -> Manifest | None:
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


def _as(node: Any, loc: Loc, draft: Draft, ctx: Ctx) -> None:
    default = draft.manifest.binds if draft.manifest else None
    if "as" not in node:
        _missing_as(loc, draft, default, ctx)
        draft.binding = default
        return
    value, as_loc = node["as"], loc.key(node, "as")
    draft.as_loc = as_loc
    if not isinstance(value, str) or not IDENT.match(value):
        ctx.add(
            "TRIG-AS-INVALID", f"`as: {show(value)}` must be an identifier (letters, digits, '_')", as_loc, draft.label
        )
    elif len(value) > MAX_BINDING_NAME:
        ctx.add(
            "TRIG-AS-INVALID",
            f"`as: {show(value)}` has {len(value)} characters; at most {MAX_BINDING_NAME} "
            "(it is part of every run's workflow id): choose a shorter name",
            as_loc,
            draft.label,
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


def _missing_as(loc: Loc, draft: Draft, default: str | None, ctx: Ctx) -> None:
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
