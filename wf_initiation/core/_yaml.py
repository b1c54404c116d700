"""YAML reading for Workfiles: ruamel.yaml round-trip trees, with line numbers and YAML paths.

The round-trip loader keeps the line of every key and item, so each diagnostic can point at
the exact place to fix. Timestamps stay strings (a Workfile's ``start: 2024-01-01T00:00:00Z``
is configuration text validated by the manifest's schema, not a Python ``datetime``), and
duplicate keys are an error rather than "last one wins".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar
from ruamel.yaml.constructor import DuplicateKeyError, RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from wf_initiation.errors import YamlTooDeep

from ._diagnostics import Diagnostic

MAX_DEPTH = 64
MAX_NODES = 100_000
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Constructor(RoundTripConstructor):
    """Round-trip constructor that keeps timestamps as the text the author wrote."""


_Constructor.add_constructor("tag:yaml.org,2002:timestamp", RoundTripConstructor.construct_yaml_str)


@dataclass(frozen=True)
class Loc:
    """Where a node sits: its YAML path (``on[1].as``) and 1-based line (None when unknown)."""

    path: str
    line: int | None

    def key(self, mapping: Any, key: Any) -> Loc:
        """Location of ``mapping[key]``: the line of the key itself."""
        return Loc(_join_key(self.path, key), key_line(mapping, key) or self.line)

    def item(self, seq: Any, index: int) -> Loc:
        """Location of ``seq[index]``."""
        return Loc(f"{self.path}[{index}]", item_line(seq, index) or self.line)


def _join_key(path: str, key: Any) -> str:
    part = key if isinstance(key, str) and _IDENT.match(key) else f"[{_quote(key)}]"
    if part.startswith("["):
        return f"{path}{part}"
    return f"{path}.{part}" if path else part


def _quote(key: Any) -> str:
    return f'"{key}"' if isinstance(key, str) else repr(key)


def key_line(mapping: Any, key: Any) -> int | None:
    """1-based line of ``key`` in a round-trip mapping (None for merged or synthetic keys)."""
    data = getattr(getattr(mapping, "lc", None), "data", None)
    try:
        pos = data.get(key) if isinstance(data, dict) else None
    except TypeError:  # an unhashable key has no recorded position
        return None
    return pos[0] + 1 if pos else None


def item_line(seq: Any, index: int) -> int | None:
    """1-based line of item ``index`` in a round-trip sequence."""
    data = getattr(getattr(seq, "lc", None), "data", None)
    pos = data.get(index) if isinstance(data, dict) else None
    return pos[0] + 1 if pos else None


def node_line(node: Any) -> int | None:
    """1-based line where a mapping or sequence node starts."""
    lc = getattr(node, "lc", None)
    line = getattr(lc, "line", None)
    return line + 1 if isinstance(line, int) else None


def parse_yaml(text: str) -> tuple[Any, list[Diagnostic]]:
    """Parse one YAML document; problems come back as diagnostics, never as exceptions."""
    yaml = YAML(typ="rt")
    yaml.Constructor = _Constructor
    yaml.allow_duplicate_keys = False
    try:
        doc = yaml.load(text)
        check_depth(doc)
    except DuplicateKeyError as exc:
        return None, [_marked("YAML-DUPLICATE-KEY", exc, "remove or rename the repeated key")]
    except MarkedYAMLError as exc:
        return None, [_marked("YAML-SYNTAX", exc, "fix the YAML syntax")]
    except RecursionError:
        return None, [
            Diagnostic(code="YAML-SYNTAX", message=f"the document nests too deeply: keep it under {MAX_DEPTH} levels")
        ]
    except (YAMLError, YamlTooDeep, ValueError, TypeError, AttributeError) as exc:
        # ruamel reports some malformed input (bad escapes, odd tags, deep nesting) as plain errors
        return None, [Diagnostic(code="YAML-SYNTAX", message=f"the file is not valid YAML: {_short(exc)}")]
    return doc, []


def check_depth(node: Any) -> None:
    """Raise :class:`YamlTooDeep` for deep nesting, a self-referencing alias or an alias bomb."""
    _, size = _measure(node, 0, {}, set())
    if size > MAX_NODES:
        raise YamlTooDeep(f"the document expands to more than {MAX_NODES} nodes through aliases")


def _measure(node: Any, depth: int, memo: dict[int, tuple[int, int]], active: set[int]) -> tuple[int, int]:
    """(height, expanded size) of ``node``; memoised by identity so shared aliases cost once."""
    if not isinstance(node, (Mapping, list)):
        return 0, 1
    if id(node) in active:
        raise YamlTooDeep("an alias refers to a node that contains it")
    if depth > MAX_DEPTH:
        raise YamlTooDeep(f"the document nests deeper than {MAX_DEPTH} levels")
    if id(node) in memo:
        height, size = memo[id(node)]
    else:
        active.add(id(node))
        parts = [_measure(c, depth + 1, memo, active) for c in _children(node)]
        active.discard(id(node))
        height = 1 + max((h for h, _ in parts), default=0)
        size = min(1 + sum(s for _, s in parts), MAX_NODES + 1)
        memo[id(node)] = (height, size)
    if depth + height > MAX_DEPTH:
        raise YamlTooDeep(f"the document nests deeper than {MAX_DEPTH} levels")
    return height, size


def _children(node: Any) -> list[Any]:
    return [*node.keys(), *node.values()] if isinstance(node, Mapping) else list(node)


def to_plain(node: Any) -> Any:
    """The round-trip tree as plain dicts, lists, str, int, float, bool and None."""
    if isinstance(node, TaggedScalar):
        return str(node.value)
    if isinstance(node, Mapping):
        return {_plain_key(k): to_plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [to_plain(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    if type(node).__name__ == "ScalarBoolean":  # an anchored boolean is an int subclass
        return bool(node)
    for kind in (str, int, float):
        if isinstance(node, kind):
            return kind(node)
    return str(node)


def _plain_key(key: Any) -> Any:
    plain = to_plain(key)
    return plain if isinstance(plain, (str, int, float, bool)) or plain is None else str(plain)


def is_mapping(node: Any) -> bool:
    return isinstance(node, (CommentedMap, dict))


def is_sequence(node: Any) -> bool:
    return isinstance(node, (CommentedSeq, list))


def _marked(code: str, exc: MarkedYAMLError, fix: str) -> Diagnostic:
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark is not None else None
    what = " ".join(p for p in (exc.context, exc.problem) if p)
    return Diagnostic(code=code, message=f"{what or 'invalid YAML'}: {fix}", line=line)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]
