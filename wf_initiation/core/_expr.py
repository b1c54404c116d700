"""`{{ ... }}` expressions, evaluated by Jinja2's sandbox with native types and budgets.

Why Jinja2: a well-kept, widely used engine whose sandbox forbids attribute access to internals
and whose native mode returns Python values (bool, int, list, dict) instead of strings.
We add strictness on top: a reference to a missing name or attribute raises, never renders as
empty, and every failure surfaces as :class:`ExpressionFault`, a type distinct from ``False``.

Evaluation is a pure function of the expression text and the scope: no clock, no randomness, no
I/O, no globals, deterministic filters only, so it is safe in workflow code. What one evaluation
may do is bounded by counts and sizes (:mod:`._expr_sandbox`): a payload cannot make it run long
or allocate much, and a budget that runs out is a fault like any other. A result is a JSON value
(a string stays a string; tuples become lists; anything else is a fault naming the fix).

Equality of keys (``queue_by``, ``partition_by``) is JSON-value equality, see :func:`canonical_key`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import jinja2
from jinja2 import meta, nodes

from wf_initiation.errors import ExpressionError, ExpressionFault, ExpressionSyntaxError  # noqa: F401  (imported from here too)

from ._expr_sandbox import (
    MAX_EXPRESSION_CHARS,
    NONDETERMINISTIC_FILTERS,
    Budget,
    BudgetedSandbox,
    BudgetExceeded,
    check_int_bits,
)


class Expression:
    """A compiled expression. Use :meth:`Evaluator.compile` to get one."""

    def __init__(self, source: str, template: jinja2.Template, names: frozenset[str], env: BudgetedSandbox):
        self.source = source
        self._template = template
        self._env = env
        self.names = names

    def evaluate(self, scope: Mapping[str, Any]) -> Any:
        """Evaluate over ``scope`` within a fresh budget; raise :class:`ExpressionFault` on any failure."""
        self._env.budget = Budget()
        try:
            return _json_value(self._template.render(dict(scope)))
        except ExpressionFault as exc:
            raise ExpressionFault(f"{_short(self.source)}: {exc}") from None
        except (jinja2.UndefinedError, BudgetExceeded) as exc:
            raise ExpressionFault(f"{_short(self.source)}: {exc}") from None
        except Exception as exc:  # any runtime error inside the template is a fault by rule
            raise ExpressionFault(f"{_short(self.source)}: {type(exc).__name__}: {_cut(str(exc))}") from None


class Evaluator:
    """Compiles and caches expressions. One per workflow instance or validator run."""

    def __init__(self, *, legacy: bool = False) -> None:
        """``legacy=True`` keeps two behaviours of activations of a spec before evaluation 2 (``ActivationSpec.evaluation``) for replay:
        a dict method wins over a payload key of the same name, and a rendered string is parsed as a
        Python literal (``"42"`` became ``42``). Budgets apply either way."""
        self._env = BudgetedSandbox(legacy=legacy, undefined=jinja2.StrictUndefined, autoescape=False)
        self._cache: dict[str, Expression] = {}

    def compile(self, source: str) -> Expression:
        """Compile ``source`` (with or without the surrounding ``{{ }}``).

        Raises:
            ExpressionSyntaxError: it does not parse, is longer than the limit, uses a statement
                (``{% ... %}``) or a non-deterministic filter.
        """
        cached = self._cache.get(source)
        if cached is not None:
            return cached
        ast = self._parse(source)
        self._env.budget = Budget()  # constant folding at compile time runs filters too
        try:
            template = self._env.from_string(ast)
        except jinja2.TemplateSyntaxError as exc:
            raise ExpressionSyntaxError(f"{_short(source)} does not parse: {exc.message}") from None
        except (RecursionError, MemoryError):
            raise ExpressionSyntaxError(f"{_short(source)} nests too deeply") from None
        names = frozenset(meta.find_undeclared_variables(ast))
        expr = Expression(source, template, names, self._env)
        self._cache[source] = expr
        return expr

    def _parse(self, source: str) -> nodes.Template:
        if len(source) > MAX_EXPRESSION_CHARS:
            raise ExpressionSyntaxError(
                f"{_short(source)} is {len(source):,} characters long; an expression may have at most "
                f"{MAX_EXPRESSION_CHARS:,}: compute the value elsewhere"
            )
        text = source if "{{" in source or "{%" in source else "{{ " + source + " }}"
        try:
            ast = self._env.parse(text)
        except jinja2.TemplateSyntaxError as exc:
            raise ExpressionSyntaxError(f"{_short(source)} does not parse: {exc.message}") from None
        except (RecursionError, MemoryError):
            raise ExpressionSyntaxError(f"{_short(source)} nests too deeply") from None
        except Exception as exc:  # the lexer turns literals into Python values: 5,000-digit integers fail there
            raise ExpressionSyntaxError(f"{_short(source)} does not parse: {_cut(str(exc))}") from None
        _check_shape(source, ast)
        return ast

    def root_references(self, source: str) -> list[tuple[str, tuple[str, ...]]]:
        """Each referenced root name with the constant attribute path that follows it."""
        ast = self._parse(source)
        found: list[tuple[str, tuple[str, ...]]] = []
        for node in ast.find_all((nodes.Getattr, nodes.Getitem, nodes.Name)):
            chain: list[str] = []
            cur: nodes.Node = node
            while isinstance(cur, (nodes.Getattr, nodes.Getitem)):
                if isinstance(cur, nodes.Getattr):
                    chain.append(cur.attr)
                elif isinstance(cur.arg, nodes.Const):
                    chain.append(str(cur.arg.value))
                else:
                    chain.clear()
                cur = cur.node
            if isinstance(cur, nodes.Name) and cur.ctx == "load":
                found.append((cur.name, tuple(reversed(chain))))
        return found

    def evaluate(self, source: str, scope: Mapping[str, Any]) -> Any:
        """Compile (cached) and evaluate; at evaluation time a text that does not compile is a fault too."""
        try:
            expression = self.compile(source)
        except ExpressionSyntaxError as exc:
            raise ExpressionFault(str(exc)) from None
        return expression.evaluate(scope)

    def guard(self, source: str, scope: Mapping[str, Any]) -> bool:
        """Evaluate a ``when`` guard: it must yield a boolean, else it is a fault."""
        value = self.evaluate(source, scope)
        if isinstance(value, bool):
            return value
        raise ExpressionFault(f"{source!r} must evaluate to true or false, got {_kind(value)}")

    def key(self, source: str, scope: Mapping[str, Any]) -> str:
        """Evaluate a ``queue_by``/``partition_by`` key to its canonical form; null is a fault."""
        value = self.evaluate(source, scope)
        if value is None:
            raise ExpressionFault(f"{source!r} evaluated to null; a key must have a value (TRIG-13)")
        return canonical_key(value)

    def render_tree(self, value: Any, scope: Mapping[str, Any]) -> Any:
        """Evaluate every string leaf of a nested structure (used by ``into`` projections)."""
        if isinstance(value, str):
            return self.evaluate(value, scope) if "{{" in value else value
        if isinstance(value, Mapping):
            return {k: self.render_tree(v, scope) for k, v in value.items()}
        if isinstance(value, list):
            return [self.render_tree(v, scope) for v in value]
        return value


def canonical_key(value: Any) -> str:
    """Canonical JSON text of a key value: equal under JSON-value equality iff texts are equal.

    Rules: ``1`` and ``1.0`` are equal (integral floats become integers); object key order is
    irrelevant (keys sorted); ``true`` is not ``1``; strings compare by code points; NaN and
    infinities are faults (they have no JSON value).
    """
    try:
        return json.dumps(_normalise(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ExpressionFault(f"key value is not a JSON value: {exc}") from None


def _normalise(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ValueError("NaN or infinity")
        return int(value) if value.is_integer() else value
    if isinstance(value, Mapping):
        return {str(k): _normalise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _check_shape(source: str, ast: nodes.Template) -> None:
    """Only ``{{ ... }}`` and text: statements could loop; some filters are not deterministic."""
    for node in ast.body:
        if not isinstance(node, nodes.Output):
            raise ExpressionSyntaxError(
                f"{_short(source)} uses a statement ({{% ... %}}): an expression is text with {{{{ ... }}}} only"
            )
    for node in ast.find_all(nodes.Filter):
        if node.name in NONDETERMINISTIC_FILTERS:
            raise ExpressionSyntaxError(
                f"{_short(source)} uses the filter {node.name!r}, which is not deterministic: a workflow "
                "must decide the same on replay; send the value in the event instead"
            )


def _json_value(value: Any) -> Any:
    """The result as a JSON value: undefined anywhere is a fault, tuples become lists, Markup plain text."""
    if isinstance(value, jinja2.Undefined):
        str(value)  # raises UndefinedError with jinja's own message
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        check_int_bits(value.bit_length())
        return value
    if isinstance(value, float):
        return value  # NaN and infinities are faults where they matter (keys); see canonical_key
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise ExpressionFault("the result is a mapping with a key that is not a string")
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    raise ExpressionFault(
        f"the result is a {type(value).__name__}, not a JSON value: end a filter chain with |list, "
        "or produce a string, number, boolean, list or mapping"
    )


def _short(source: str, limit: int = 120) -> str:
    """An expression quoted for a message, cut to ``limit`` characters (a hostile one can be long)."""
    shown = repr(source)
    return shown if len(shown) <= limit else shown[: limit - 4] + "...'"


def _cut(message: str, limit: int = 300) -> str:
    return message if len(message) <= limit else message[: limit - 3] + "..."


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
