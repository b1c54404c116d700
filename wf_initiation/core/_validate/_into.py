"""Rules across entries: distinct `as` names and `into` projections (TRIG-18..21)."""

from __future__ import annotations

from typing import Any

from .._yaml import Loc, is_mapping, is_sequence
from ._context import IDENT, RESERVED_NAMES, Ctx, Draft
from ._expressions import check_expression


def cross_entry(drafts: list[Draft], ctx: Ctx) -> None:
    seen: dict[str, Draft] = {}
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


def _into(drafts: list[Draft], ctx: Ctx) -> None:
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


def _into_shape(d: Draft, ctx: Ctx) -> dict[str, Any] | None:
    assert d.into_loc is not None
    if not is_mapping(d.into) or not d.into:
        ctx.add(
            "TRIG-INTO-TYPE", "`into:` must map shared binding names to projections of the payload", d.into_loc, d.label
        )
        return None
    return _shape(d.into, d.into_loc, d, ctx)


def _shape(node: Any, loc: Loc, d: Draft, ctx: Ctx) -> Any:
    if is_mapping(node):
        return {str(k): _shape(v, loc.key(node, k), d, ctx) for k, v in node.items()}
    if is_sequence(node):
        for i, item in enumerate(node):
            _shape(item, loc.item(node, i), d, ctx)
    elif isinstance(node, str) and "{{" in node:
        check_expression(node, "into", loc, d, ctx)
    return None


def _into_names(shapes: list[tuple[Draft, Any]], drafts: list[Draft], ctx: Ctx) -> None:
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


def _into_same_shape(shapes: list[tuple[Draft, Any]], ctx: Ctx) -> None:
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
