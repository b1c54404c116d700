"""Rules of expressions: syntax, and the root names each kind of expression may reference."""

from __future__ import annotations

from typing import Any

from .._expr import ExpressionSyntaxError
from .._yaml import Loc
from ._context import Ctx, Draft


def expression_key(node: Any, key: str, loc: Loc, draft: Draft, ctx: Ctx) -> str | None:
    if key not in node:
        return None
    return check_expression(node[key], key, loc.key(node, key), draft, ctx)


def check_expression(
    value: Any, what: str, loc: Loc, draft: Draft, ctx: Ctx, *, event_scope: bool = True
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
