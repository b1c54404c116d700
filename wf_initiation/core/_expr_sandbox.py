"""The budgeted Jinja2 sandbox that evaluates expressions: what one evaluation may do, and how much.

A payload controls the values an expression works on, so it must not control how much work the
worker does: ``{{ m.base ** m.exp }}`` with ``exp`` 10^7, or ``{{ m.label * m.qty }}`` with a
large ``qty``, would hold the worker's GIL for minutes and grow it by gigabytes, stalling every
other activation on that worker. Every evaluation therefore runs under a :class:`Budget` whose
limits are counts and sizes, never time: workflow code must decide the same on replay, and a
count of operations is the same on every worker while a clock is not.

Jinja2's :class:`~jinja2.sandbox.SandboxedEnvironment` provides the hooks: intercepted binary
operators (``call_binop``), ``call``, ``getattr``/``getitem``; filters and tests are wrapped, and
string concatenation (``~``) is routed through the environment by a small code-generator change.
An operation whose result would be too large is refused *before* it allocates (``"x" * n``,
``a ** b``, ``center(n)``, ``"%0*d"``, ``join`` with a long separator); every result is measured
after; the sum of the sizes of all results and the number of operations are bounded per
evaluation. Anything refused raises :class:`BudgetExceeded`, which the evaluator reports as an
:class:`~wf_initiation.core.ExpressionFault` (a ``guard_fault``/``key_fault``/``projection_fault``
disposition in the engine, with the activation alive).

What an expression may use: the names in scope (the trigger binding, ``inputs``), literals,
operators, the deterministic built-in filters and tests (not ``random``), and a fixed list of
value methods (:data:`ALLOWED_METHODS`). No globals (``range``, ``lipsum``, ``dict``, ...), no
statements (``{% ... %}``). A payload key wins over a method of the same name:
``hook.body.items`` is the payload's ``items`` field, not ``dict.items``.

The numbers are deterministic for a given Jinja2 version: upgrading Jinja2 can move an evaluation
that sits exactly at a limit across it, so pin Jinja2 in the worker's environment like Temporal's
own SDK.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, TypeVar, cast

from jinja2 import Undefined, nodes
from jinja2.compiler import Frame, optimizeconst
from jinja2.nativetypes import NativeCodeGenerator, NativeTemplate, native_concat
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

from wf_initiation.errors import InvalidInput

from .limits import MAX_INT_DIGITS

V = TypeVar("V")
Args = tuple[object, ...]
"""A filter's or method's positional arguments: whatever the expression passed."""
Kwargs = dict[str, object]
Prechecked = tuple[Args, Kwargs]
"""The arguments after a precheck (an iterable argument materialised as a list)."""

# -- limits (docs/limits.md, "Expressions, validation and schedules") ------------------------------
MAX_EXPRESSION_CHARS = 4_096
"""Characters of one expression's text (a ``when``/``queue_by``/``partition_by``/``into`` leaf)."""
MAX_OPERATIONS = 10_000
"""Operations per evaluation: operators, calls, filters, tests, attribute and item look-ups, plus
one per item (per 100 characters of text) that a filter or method goes through."""
ITEM_SIZE = 8
"""What one value (a number, an item of a list or mapping) counts in a size, like a pointer's bytes."""
MAX_VALUE_SIZE = 1_048_576
"""Size of any one value an operation produces: 8 per value plus 1 per character of a string
(a string of a million characters, or a list of 131,072 numbers)."""
MAX_ALLOCATED = 4 * 1_048_576
"""Sum of the sizes of all values one evaluation produces."""
# Decimal digits of an integer result: as many as a payload's integers may have (core.limits), so
# a result is what a payload could hold and stays JSON for every peer.
MAX_FORMAT_WIDTH = 1_000
"""Width or precision in a ``%`` or ``str.format`` format, and the width of ``center``/``ljust``/...."""
MAX_JSON_INDENT = 8
"""``tojson(indent=...)`` at most."""

_MAX_INT_BITS = int(MAX_INT_DIGITS * 3.3219280948873626) + 1
NONDETERMINISTIC_FILTERS = frozenset({"random"})
# Filters with no use in trigger expressions whose cost or output grows with an argument in ways
# not worth estimating (HTML link attributes repeated per link, line wrapping, pretty-printing).
_DROPPED_FILTERS = frozenset({"pprint", "urlize", "wordwrap"})
ALLOWED_METHODS: Mapping[type, frozenset[str]] = {
    str: frozenset({
        "capitalize", "casefold", "center", "count", "endswith", "find", "format", "format_map", "index",
        "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric",
        "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "partition",
        "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit",
        "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title", "upper", "zfill",
    }),
    dict: frozenset({"get", "items", "keys", "values"}),
    list: frozenset({"count", "index"}),
    tuple: frozenset({"count", "index"}),
    int: frozenset({"bit_length"}),
    float: frozenset({"is_integer"}),
}
_PRINTF_FIELD = re.compile(r"%(?:\([^)]*\))?[#0 +\-]*(\*|\d+)?(?:\.(\*|\d+))?")
_DIGITS = re.compile(r"\d+")


class BudgetExceeded(InvalidInput):
    """An evaluation went past one of its limits; the message names the limit and the fix."""


class Budget:
    """What one evaluation has used so far: operations and the total size of produced values."""

    def __init__(self) -> None:
        self.operations = 0
        self.allocated = 0

    def tick(self, n: int = 1) -> None:
        """Count ``n`` operations."""
        self.operations += n
        if self.operations > MAX_OPERATIONS:
            raise BudgetExceeded(
                f"the expression took more than {MAX_OPERATIONS:,} operations: simplify it "
                "or compute the value before sending the event"
            )

    def charge(self, value: V) -> V:
        """Count one operation that produced ``value``; refuse a value or a total that is too large."""
        self.tick()
        if isinstance(value, int) and not isinstance(value, bool):
            check_int_bits(value.bit_length())
            return value
        size = value_size(value, MAX_VALUE_SIZE)
        check_size(size)
        self.allocated += size
        if self.allocated > MAX_ALLOCATED:
            raise BudgetExceeded(
                f"the expression produced values of more than {MAX_ALLOCATED:,} cells in total: "
                "simplify it or compute the value before sending the event"
            )
        return value


_SCALARS = frozenset({int, float, bool, type(None)})


def value_size(value: object, cap: int) -> int:
    """:data:`ITEM_SIZE` per value plus 1 per character, through lists and mappings; stops past ``cap``."""
    total, stack = 0, [value]
    while stack and total <= cap:
        item = stack.pop()
        total += ITEM_SIZE
        if isinstance(item, Undefined):  # strict: touching it raises; `default` and `is defined` take it as it is
            continue
        if isinstance(item, (str, bytes)):
            total += len(item)
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, Collection):
            for element in item:  # numbers need no stack round-trip: lists of them are the common big case
                if element.__class__ in _SCALARS:
                    total += ITEM_SIZE
                else:
                    stack.append(element)
    return total


def input_work(value: object) -> int:
    """Operations a filter or method spends going through ``value``: 1 per item, 1 per 100 characters."""
    if isinstance(value, Undefined):
        return 0
    if isinstance(value, (str, bytes)):
        return len(value) // 100
    if isinstance(value, Collection):
        return len(value)
    return 0


def check_size(size: int) -> None:
    if size > MAX_VALUE_SIZE:
        raise BudgetExceeded(
            f"a value of the expression would be larger than {MAX_VALUE_SIZE:,} cells "
            "(8 per value, 1 per character): work on smaller values or send a reference"
        )


def check_int_bits(bits: int) -> None:
    if bits > _MAX_INT_BITS:
        raise BudgetExceeded(f"an integer of the expression would have more than {MAX_INT_DIGITS:,} digits")


def check_width(width: object, what: str) -> None:
    if isinstance(width, int) and width > MAX_FORMAT_WIDTH:
        raise BudgetExceeded(f"{what} {width:,} is larger than {MAX_FORMAT_WIDTH:,}: use a smaller width")


# -- operators --------------------------------------------------------------------------------------


def _is_seq(value: object) -> bool:
    return isinstance(value, (str, list, tuple))


def _precheck_mul(left: object, right: object) -> None:
    if _is_seq(left) and isinstance(right, int):
        check_size(_repeated_size(left, right))
    elif _is_seq(right) and isinstance(left, int):
        check_size(_repeated_size(right, left))
    elif isinstance(left, int) and isinstance(right, int):
        check_int_bits(left.bit_length() + right.bit_length() - 1)


def _repeated_size(seq: object, times: int) -> int:
    """Size of ``seq * times`` (a string repeats its characters, a list its items)."""
    if times <= 0:
        return ITEM_SIZE
    inner = value_size(seq, MAX_VALUE_SIZE) - ITEM_SIZE
    return ITEM_SIZE + inner * times


def _precheck_pow(base: object, exp: object) -> None:
    if isinstance(base, int) and isinstance(exp, int) and exp > 0 and abs(base) > 1:
        check_int_bits((base.bit_length() - 1) * exp + 1)


def _precheck_mod(left: object, right: object) -> None:
    if isinstance(left, str):
        check_printf(left, right)


def check_printf(fmt: str, args: object) -> None:
    """Refuse a ``%`` format whose widths or precisions (written, or taken from ``args`` by ``*``) are too large."""
    star = False
    for match in _PRINTF_FIELD.finditer(fmt):
        for part in match.groups():
            if part == "*":
                star = True
            elif part is not None:
                check_width(int(part), "a format width")
    if star:
        for arg in args if isinstance(args, tuple) else (args,):
            check_width(arg, "a format width")


def check_format(fmt: str) -> None:
    """Refuse a ``str.format`` template with a nested field in a spec or a too large width."""
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return  # the call itself raises the same error, as a fault
    for _literal, _name, spec, _conversion in fields:
        if spec and "{" in spec:
            raise BudgetExceeded("a format spec may not contain a nested {field}: write the width out")
        for digits in _DIGITS.findall(spec or ""):
            check_width(int(digits), "a format width")


_PRECHECKS: Mapping[str, Callable[[object, object], None]] = {"*": _precheck_mul, "**": _precheck_pow, "%": _precheck_mod}


# -- methods and filters ----------------------------------------------------------------------------


def _estimate_replace(text: object, old: object, new: object, count: object = -1) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str) and len(new) > len(old):
        hits = text.count(old) if old else len(text) + 1
        if isinstance(count, int) and count >= 0:
            hits = min(hits, count)
        check_size(ITEM_SIZE + len(text) + hits * (len(new) - len(old)))


def _items(value: object) -> list[object]:
    """An iterable argument as a list (``join`` goes through it once to measure it); one that is not
    iterable raises the TypeError the call itself would."""
    return list(cast("Iterable[object]", value))


def _estimate_join(sep: str, items: list[object]) -> None:
    check_size(ITEM_SIZE + len(items) + max(len(items) - 1, 0) * len(sep))


def _method_precheck(owner: object, name: str, args: Args, kwargs: Kwargs) -> Args:
    """Refuse a call to an allowed method whose result would be too large; return the (materialised) args."""
    if not isinstance(owner, str):
        return args
    if name in ("center", "ljust", "rjust", "zfill") and args:
        check_width(args[0], f"{name} width")
    elif name == "replace" and len(args) >= 2:
        _estimate_replace(owner, *args[:3])
    elif name == "join" and args:
        items = _items(args[0])
        _estimate_join(owner, items)
        args = (items, *args[1:])
    elif name == "format":
        check_format(owner)
    elif name == "format_map":
        check_format(owner)
    return args


def _filter_prechecks() -> Mapping[str, Callable[[Args, Kwargs], Prechecked]]:
    """Per filter: refuse arguments that would make its result too large; may materialise an iterable."""

    def center(args: Args, kwargs: Kwargs) -> Prechecked:
        check_width(args[1] if len(args) > 1 else kwargs.get("width", 80), "center width")
        return args, kwargs

    def indent(args: Args, kwargs: Kwargs) -> Prechecked:
        width = args[1] if len(args) > 1 else kwargs.get("width", 4)
        unit = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
        text = str(args[0]) if args else ""
        check_size(ITEM_SIZE + len(text) + (text.count("\n") + 1) * max(unit, 0))
        return args, kwargs

    def fmt(args: Args, kwargs: Kwargs) -> Prechecked:
        if args and isinstance(args[0], str):
            check_printf(args[0], kwargs or tuple(args[1:]))
        return args, kwargs

    def sized(name: str, index: int) -> Callable[[Args, Kwargs], Prechecked]:
        def check(args: Args, kwargs: Kwargs) -> Prechecked:
            count = args[index] if len(args) > index else kwargs.get(name)
            if isinstance(count, int) and count > MAX_VALUE_SIZE:
                raise BudgetExceeded(f"{name} {count:,} is larger than {MAX_VALUE_SIZE:,}")
            return args, kwargs
        return check

    def join(args: Args, kwargs: Kwargs) -> Prechecked:
        items = _items(args[0]) if args else []
        sep = args[1] if len(args) > 1 else kwargs.get("d", "")
        _estimate_join(str(sep), items)
        return (items, *args[1:]), kwargs

    def replace(args: Args, kwargs: Kwargs) -> Prechecked:
        if len(args) >= 3:
            _estimate_replace(str(args[0]), *args[1:4])
        return args, kwargs

    def tojson(args: Args, kwargs: Kwargs) -> Prechecked:
        indent = args[1] if len(args) > 1 else kwargs.get("indent")
        if isinstance(indent, int) and indent > MAX_JSON_INDENT:
            raise BudgetExceeded(f"tojson indent {indent} is larger than {MAX_JSON_INDENT}")
        return args, kwargs

    def numbers_only(args: Args, kwargs: Kwargs) -> Prechecked:
        # Only numbers add to a number among JSON values: no quadratic list concatenation.
        start = args[2] if len(args) > 2 else kwargs.get("start", 0)
        if not isinstance(start, (int, float)):
            raise BudgetExceeded("sum adds numbers only: join strings with |join, lists with +")
        return args, kwargs

    return {
        "center": center, "indent": indent, "format": fmt, "join": join, "replace": replace,
        "tojson": tojson, "sum": numbers_only,
        "batch": sized("linecount", 1), "slice": sized("slices", 1), "truncate": sized("length", 1),
    }


_FILTER_PRECHECKS = _filter_prechecks()


# -- the environment --------------------------------------------------------------------------------


class _Template(NativeTemplate):
    """A native template whose output is assembled by its environment (budgeted, JSON-native)."""

    def render(self, *args: Any, **kwargs: Any) -> Any:
        ctx = self.new_context(dict(*args, **kwargs))
        try:
            return self.environment.concat_output(self.root_render_func(ctx))  # type: ignore[attr-defined]
        except Exception:
            return self.environment.handle_exception()


class _CodeGenerator(NativeCodeGenerator):
    """Native code generation, with ``a ~ b`` routed through the environment so it is budgeted."""

    def _output_const_repr(self, group: Iterable[object]) -> str:
        # A lone constant keeps its type ({{ true }} is True): Jinja joins it into text and relied
        # on parsing the text back as a Python literal, which this environment no longer does.
        parts = list(group)
        if len(parts) == 1 and not isinstance(parts[0], str):
            return repr(parts[0])
        return repr("".join(str(v) for v in parts))

    @optimizeconst
    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.concat_values((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class BudgetedSandbox(ImmutableSandboxedEnvironment):
    """An immutable sandbox with native types, no globals and a :class:`Budget` per evaluation."""

    code_generator_class = _CodeGenerator
    template_class = _Template
    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})

    def __init__(self, *, legacy: bool = False, **options: Any) -> None:
        super().__init__(**options)
        self.budget = Budget()
        # Builds before this one preferred a method over a payload key and parsed a rendered string
        # as a Python literal; histories they recorded replay with legacy=True (ActivationSpec.evaluation < 2).
        self.legacy_literals = legacy
        self.globals.clear()
        self.filters = {
            name: self._budgeted(name, fn) for name, fn in self.filters.items()
            if name not in NONDETERMINISTIC_FILTERS | _DROPPED_FILTERS
        }
        # jinja2 infers its default tests' type as the bare `function`; they are callables.
        tests = cast("dict[str, Callable[..., Any]]", self.tests)
        self.tests = {name: self._budgeted(name, fn) for name, fn in tests.items()}

    def _budgeted(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        precheck = _FILTER_PRECHECKS.get(name)

        @functools.wraps(fn)  # keeps jinja_pass_arg (context/environment passing)
        def run(*args: object, **kwargs: object) -> object:
            head = 1 if getattr(fn, "jinja_pass_arg", None) is not None else 0
            self.budget.tick(1 + (input_work(args[head]) if len(args) > head else 0))
            if precheck is not None:
                rest, kwargs = precheck(args[head:], kwargs)
                args = (*args[:head], *rest)
            return self.budget.charge(fn(*args, **kwargs))

        return run

    # The three hooks the sandbox offers (see jinja2.sandbox.SandboxedEnvironment).
    def call_binop(self, context: Context, operator_: str, left: object, right: object) -> object:
        precheck = _PRECHECKS.get(operator_)
        if precheck is not None:
            precheck(left, right)
        return self.budget.charge(self.binop_table[operator_](left, right))

    def call(__self, __context: Context, __obj: Any, *args: object, **kwargs: object) -> object:  # noqa: N805 (jinja's signature)
        if isinstance(__obj, Undefined):
            return __obj()  # raises the undefined error naming what is missing
        owner, name = _method_of(__obj)
        if owner is None or name not in ALLOWED_METHODS.get(_base_type(owner), frozenset()):
            raise BudgetExceeded(f"calling {_describe(__obj)} is not allowed in expressions: use a filter")
        __self.budget.tick(1 + input_work(owner) + sum(input_work(a) for a in args))
        args = _method_precheck(owner, name, args, kwargs)
        return __self.budget.charge(__obj(*args, **kwargs))

    def getattr(self, obj: object, attribute: str) -> object:
        self.budget.tick()
        if isinstance(obj, Mapping) and attribute in obj and not self.legacy_literals:
            return obj[attribute]  # a payload key wins over a method of the same name
        return super().getattr(obj, attribute)

    def getitem(self, obj: object, argument: object) -> object:
        self.budget.tick()
        value = super().getitem(obj, argument)
        return self.budget.charge(value) if isinstance(argument, slice) else value

    def concat_values(self, parts: Iterable[object]) -> str:
        """``a ~ b ~ c``: every part as text, refused before joining when the result would be too large."""
        texts = [str(p) for p in parts]
        check_size(ITEM_SIZE + sum(len(t) for t in texts))
        joined = "".join(texts)
        return self.budget.charge(joined)

    def concat_output(self, values: Iterable[object]) -> object:
        """The value of a whole template: one output node's value as it is, several joined as text."""
        parts = list(values)
        if not parts:
            return None
        value = parts[0] if len(parts) == 1 else self.concat_values(parts)
        if self.legacy_literals and isinstance(value, str):
            check_size(len(value))
            return native_concat([value])  # builds before json_native parsed a rendered string as a literal
        return value


def _method_of(obj: object) -> tuple[object | None, str]:
    """The value a bound method belongs to and its name (the sandbox's str.format wrapper included)."""
    target = getattr(obj, "__wrapped__", obj)
    owner = getattr(target, "__self__", None)
    if owner is None or isinstance(owner, type) or not callable(obj):
        return None, ""
    return owner, getattr(target, "__name__", "")


def _base_type(value: object) -> type:
    for kind in (bool, int, float, str, dict, list, tuple):
        if isinstance(value, kind):
            return int if kind is bool else kind
    return type(value)


def _describe(obj: object) -> str:
    owner, name = _method_of(obj)
    if owner is not None:
        return f"{_base_type(owner).__name__}.{name}()"
    return f"{getattr(obj, '__name__', type(obj).__name__)}()"


