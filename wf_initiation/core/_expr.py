"""`{{ ... }}` expressions, evaluated by Jinja2's sandboxed native-types environment.

Why Jinja2: a well-kept, widely used engine whose sandbox forbids attribute access to internals
and whose native environment returns Python values (bool, int, list, dict) instead of strings.
We add strictness on top: a reference to a missing name or attribute raises, never renders as
empty, and every failure surfaces as :class:`ExpressionFault`, a type distinct from ``False``.

Evaluation is a pure function of the expression text and the scope: no clock, no randomness, no
I/O (the sandbox has no globals beyond a fixed set of filters), so it is safe in workflow code.

Equality of keys (``queue_by``, ``partition_by``) is JSON-value equality, see :func:`canonical_key`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

import jinja2
from jinja2 import meta, nodes
from jinja2.nativetypes import NativeCodeGenerator, NativeTemplate
from jinja2.sandbox import ImmutableSandboxedEnvironment

_WHOLE = re.compile(r"^\s*\{\{(.*)\}\}\s*$", re.DOTALL)


class ExpressionError(Exception):
    """Base class of expression problems."""


class ExpressionSyntaxError(ExpressionError):
    """The expression text does not parse (a static, validation-time problem)."""


class ExpressionFault(ExpressionError):
    """Evaluation failed: missing name or attribute, type error, null key, non-boolean guard.

    A fault is never the same as ``False``: callers record it as an error, distinct from
    suppression (TRIG-9, TRIG-13, BATCH-6).
    """


class _NativeSandbox(ImmutableSandboxedEnvironment):
    code_generator_class = NativeCodeGenerator
    concat = staticmethod(lambda values: _native_concat(values))
    template_class = NativeTemplate


def _native_concat(values: Any) -> Any:
    parts = list(values)
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    return "".join(str(p) for p in parts)


class Expression:
    """A compiled expression. Use :meth:`Evaluator.compile` to get one."""

    def __init__(self, source: str, template: jinja2.Template, names: frozenset[str]):
        self.source = source
        self._template = template
        self.names = names

    def evaluate(self, scope: Mapping[str, Any]) -> Any:
        """Evaluate over ``scope``; raise :class:`ExpressionFault` on any failure."""
        try:
            return _defined(self._template.render(dict(scope)))
        except ExpressionFault:
            raise
        except jinja2.UndefinedError as exc:
            raise ExpressionFault(f"{self.source!r}: {exc}") from None
        except Exception as exc:  # any runtime error inside the template is a fault by rule
            raise ExpressionFault(f"{self.source!r}: {type(exc).__name__}: {exc}") from None


class Evaluator:
    """Compiles and caches expressions. One per workflow instance or validator run."""

    def __init__(self) -> None:
        self._env = _NativeSandbox(undefined=jinja2.StrictUndefined, autoescape=False)
        self._cache: dict[str, Expression] = {}

    def compile(self, source: str) -> Expression:
        """Compile ``source`` (with or without the surrounding ``{{ }}``)."""
        cached = self._cache.get(source)
        if cached is not None:
            return cached
        text = source if "{{" in source or "{%" in source else "{{ " + source + " }}"
        try:
            ast = self._env.parse(text)
            template = self._env.from_string(ast)
        except jinja2.TemplateSyntaxError as exc:
            raise ExpressionSyntaxError(f"{source!r} does not parse: {exc.message}") from None
        names = frozenset(meta.find_undeclared_variables(ast))
        expr = Expression(source, template, names)
        self._cache[source] = expr
        return expr

    def root_references(self, source: str) -> list[tuple[str, tuple[str, ...]]]:
        """Each referenced root name with the constant attribute path that follows it."""
        text = source if "{{" in source or "{%" in source else "{{ " + source + " }}"
        try:
            ast = self._env.parse(text)
        except jinja2.TemplateSyntaxError as exc:
            raise ExpressionSyntaxError(f"{source!r} does not parse: {exc.message}") from None
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
        return self.compile(source).evaluate(scope)

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


def is_expression(text: Any) -> bool:
    return isinstance(text, str) and bool(_WHOLE.match(text))


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


def _defined(value: Any) -> Any:
    """Raise for an undefined value anywhere in the result (StrictUndefined only raises on use)."""
    if isinstance(value, jinja2.Undefined):
        str(value)  # raises UndefinedError with jinja's own message
    if isinstance(value, dict):
        for item in value.values():
            _defined(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _defined(item)
    return value


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
