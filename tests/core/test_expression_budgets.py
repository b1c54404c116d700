"""Expressions under hostile payloads: deterministic budgets, each tested at its limit and one past.

Issue 11 item 5: a payload must not control how much work an evaluation does. Every budget is a
count or a size (never time), so replay decides the same; running out is an ExpressionFault, which
the engine records as guard_fault / key_fault / projection_fault with the activation alive.
"""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.engine import drive
from wf_initiation.core import Evaluator, ExpressionFault, ExpressionSyntaxError
from wf_initiation.core._expr_sandbox import (
    ITEM_SIZE,
    MAX_ALLOCATED,
    MAX_EXPRESSION_CHARS,
    MAX_FORMAT_WIDTH,
    MAX_INT_DIGITS,
    MAX_OPERATIONS,
    MAX_VALUE_SIZE,
)

FAST = 1.0  # seconds: every hostile evaluation below ends well within this on a loaded 2-core machine


@pytest.fixture
def ev() -> Evaluator:
    return Evaluator()


def timed(ev: Evaluator, source: str, scope: dict[str, Any]) -> tuple[Any, BaseException | None]:
    started = time.perf_counter()
    try:
        value, error = ev.evaluate(source, scope), None
    except ExpressionFault as exc:
        value, error = None, exc
    assert time.perf_counter() - started < FAST, f"{source} took too long"
    return value, error


def test_issue_reproductions_fault_fast_instead_of_blocking_the_worker(ev: Evaluator) -> None:
    # proves: TRIG-9, BATCH-6 (a fault, not a hang: the engine records it and starts no run)
    for source, m in [
        ("{{ (m.base ** m.exp) > 0 }}", {"base": 3, "exp": 10**7}),
        ("{{ (m.label * m.qty) != '' }}", {"label": "x", "qty": 10**10}),
        ("{{ (m.items * m.qty) != [] }}", {"items": [1, 2, 3], "qty": 10**9}),
        ("{{ m.s|center(m.w) }}", {"s": "x", "w": 10**9}),
        ("{{ m.f|format(m.w, 1) }}", {"f": "%*d", "w": 10**9}),
        ("{{ m.f % 1 }}", {"f": "%0999999999d"}),
        ("{{ m.f.format(1) }}", {"f": "{:>999999999}"}),
        ("{{ m.s.replace('a', m.r) }}", {"s": "a" * 100_000, "r": "b" * 100_000}),
        ("{{ m.l|join(m.sep) }}", {"l": list(range(5000)), "sep": "x" * 100_000}),
        ("{{ m.l|batch(m.n, 0)|list }}", {"l": [1], "n": 10**9}),
        ("{{ m.l|slice(m.n)|list }}", {"l": [1], "n": 10**9}),
        ("{{ m.s|indent(m.w) }}", {"s": "\n" * 10_000, "w": 1000}),
        ("{{ m.l|sum(start=[]) }}", {"l": [[1]] * 1000}),
        ("{{ m.n|tojson(indent=100000) }}", {"n": [[[1]]]}),
    ]:
        _, error = timed(ev, source, {"m": m})
        assert isinstance(error, ExpressionFault), source


@pytest.mark.parametrize(
    ("source", "m", "ok"),
    [
        # ** and * : the integer result has at most MAX_INT_DIGITS digits (2**3321 has 1,000; 2**3322 1,001)
        ("{{ (2 ** m.e) > 0 }}", {"e": int(MAX_INT_DIGITS / math.log10(2))}, True),
        ("{{ (2 ** m.e) > 0 }}", {"e": int(MAX_INT_DIGITS / math.log10(2)) + 1}, False),
        ("{{ (m.a * m.a) > 0 }}", {"a": 10 ** (MAX_INT_DIGITS // 2) - 1}, True),  # MAX_INT_DIGITS digits
        ("{{ (m.a * m.a * 10) > 0 }}", {"a": 10 ** (MAX_INT_DIGITS // 2) - 1}, False),
        # * : a value of at most MAX_VALUE_SIZE (ITEM_SIZE per value + 1 per character)
        ("{{ (m.s * m.n) != '' }}", {"s": "x", "n": MAX_VALUE_SIZE - ITEM_SIZE}, True),
        ("{{ (m.s * m.n) != '' }}", {"s": "x", "n": MAX_VALUE_SIZE - ITEM_SIZE + 1}, False),
        ("{{ (m.l * m.n) != [] }}", {"l": [0], "n": MAX_VALUE_SIZE // ITEM_SIZE - 1}, True),
        ("{{ (m.l * m.n) != [] }}", {"l": [0], "n": MAX_VALUE_SIZE // ITEM_SIZE}, False),
        # widths of center/ljust and of % and str.format formats
        ("{{ m.s|center(m.w)|length > 0 }}", {"s": "x", "w": MAX_FORMAT_WIDTH}, True),
        ("{{ m.s|center(m.w)|length > 0 }}", {"s": "x", "w": MAX_FORMAT_WIDTH + 1}, False),
        ("{{ m.s.ljust(m.w) != '' }}", {"s": "x", "w": MAX_FORMAT_WIDTH}, True),
        ("{{ m.s.ljust(m.w) != '' }}", {"s": "x", "w": MAX_FORMAT_WIDTH + 1}, False),
        (f"{{{{ ('%{MAX_FORMAT_WIDTH}d' % m.n) != '' }}}}", {"n": 1}, True),
        (f"{{{{ ('%{MAX_FORMAT_WIDTH + 1}d' % m.n) != '' }}}}", {"n": 1}, False),
        (f"{{{{ '{{:>{MAX_FORMAT_WIDTH}}}'.format(m.n) != '' }}}}", {"n": 1}, True),
        (f"{{{{ '{{:>{MAX_FORMAT_WIDTH + 1}}}'.format(m.n) != '' }}}}", {"n": 1}, False),
        ("{{ '{:>{w}}'.format(m.n, w=3) != '' }}", {"n": 1}, False),  # nested width: refused outright
    ],
)
def test_each_size_budget_at_its_limit_and_one_past(ev: Evaluator, source: str, m: dict[str, Any], ok: bool) -> None:
    value, error = timed(ev, source, {"m": m})
    assert (error is None) == ok, error
    if ok:
        assert value is True


def test_the_operation_budget_at_its_limit_and_one_past(ev: Evaluator) -> None:
    # `m.l|length > 0`: 1 attribute look-up, the filter (1 + 1 per item it goes through), its result.
    source = "{{ m.l|length > 0 }}"
    at_limit = MAX_OPERATIONS - 3
    assert timed(ev, source, {"m": {"l": [0] * at_limit}}) == (True, None)
    _, error = timed(ev, source, {"m": {"l": [0] * (at_limit + 1)}})
    assert error is not None and f"more than {MAX_OPERATIONS:,} operations" in str(error)


def test_the_total_produced_by_one_evaluation_at_its_limit_and_one_past(ev: Evaluator) -> None:
    text = "x" * (MAX_VALUE_SIZE - ITEM_SIZE)  # each `m.s * 1` produces a value of exactly MAX_VALUE_SIZE
    parts = MAX_ALLOCATED // MAX_VALUE_SIZE
    fits = "{{ [" + ", ".join(["m.s * 1"] * parts) + "]|length > 0 }}"
    past = "{{ [" + ", ".join(["m.s * 1"] * (parts + 1)) + "]|length > 0 }}"
    assert timed(ev, fits, {"m": {"s": text}}) == (True, None)
    _, error = timed(ev, past, {"m": {"s": text}})
    assert error is not None and "in total" in str(error)


def test_the_text_of_an_expression_at_its_limit_and_one_past(ev: Evaluator) -> None:
    def source(length: int) -> str:
        head, tail = "{{ m.s == '", "' }}"
        return head + "x" * (length - len(head) - len(tail)) + tail

    assert len(source(MAX_EXPRESSION_CHARS)) == MAX_EXPRESSION_CHARS
    assert ev.evaluate(source(MAX_EXPRESSION_CHARS), {"m": {"s": "y"}}) is False
    with pytest.raises(ExpressionSyntaxError, match=f"at most {MAX_EXPRESSION_CHARS:,}"):
        ev.compile(source(MAX_EXPRESSION_CHARS + 1))
    with pytest.raises(ExpressionFault):  # at evaluation time the same text is a fault, never an escape
        ev.evaluate(source(MAX_EXPRESSION_CHARS + 1), {"m": {"s": "y"}})


def test_statements_globals_and_nondeterministic_filters_are_refused(ev: Evaluator) -> None:
    for source in ("{% for i in m %}{% endfor %}", "{% set x = 1 %}{{ x }}", "{{ m|random }}", "{{ [1, 2]|random }}"):
        with pytest.raises(ExpressionSyntaxError):
            ev.compile(source)
    for source in ("{{ range(3)|list }}", "{{ lipsum() }}", "{{ dict(a=1) }}", "{{ cycler(1) }}", "{{ namespace() }}"):
        with pytest.raises(ExpressionFault, match="undefined"):
            ev.evaluate(source, {"m": {}})
    with pytest.raises(ExpressionSyntaxError):  # a 5,000-digit literal never reaches Python's int() limit
        ev.compile("{{ " + "9" * 5000 + " }}")


def test_only_listed_value_methods_may_be_called(ev: Evaluator) -> None:
    scope = {"m": {"s": "Ab", "d": {"k": 1}, "l": [1, 2, 1]}}
    assert ev.evaluate("{{ m.s.upper() }}", scope) == "AB"
    assert ev.evaluate("{{ m.d.get('k') }}", scope) == 1
    assert ev.evaluate("{{ m.l.count(1) }}", scope) == 2
    for source in ("{{ m.s.encode() }}", "{{ m.s.expandtabs(99999) }}", "{{ (1).to_bytes(99999, 'big') }}",
                   "{{ m.s.maketrans('a', 'b') }}", "{{ m.l.copy() }}"):
        with pytest.raises(ExpressionFault, match="not allowed"):
            ev.evaluate(source, scope)


def test_a_payload_key_wins_over_a_dict_method_of_the_same_name(ev: Evaluator) -> None:
    # issue 11 (minor): hook.body.items gave the dict method
    body = {"items": [{"sku": "a"}], "keys": "k", "get": 3, "values": None}
    scope = {"hook": {"body": body}}
    assert ev.evaluate("{{ hook.body.items }}", scope) == [{"sku": "a"}]
    assert ev.evaluate("{{ hook.body.keys }}", scope) == "k"
    assert ev.evaluate("{{ hook.body.get }}", scope) == 3
    assert ev.evaluate("{{ hook.body['items'][0].sku }}", scope) == "a"
    assert ev.evaluate("{{ hook.body|list|sort }}", scope) == ["get", "items", "keys", "values"]
    assert ev.evaluate("{{ hook.get('body').get }}", scope) == 3  # a method still serves a key-less name


def test_results_are_json_values_and_strings_stay_strings(ev: Evaluator) -> None:
    scope = {"m": {"s": "42", "l": "[1, 2]", "t": "True", "words": ["a", "b"]}}
    assert ev.evaluate("{{ m.s }}", scope) == "42"
    assert ev.evaluate("{{ m.l }}", scope) == "[1, 2]"
    assert ev.evaluate("{{ m.s }}{{ m.s }}", scope) == "4242"
    with pytest.raises(ExpressionFault, match="true or false"):
        ev.guard("{{ m.t }}", scope)
    assert ev.evaluate("{{ m.words|map('upper')|list }}", scope) == ["A", "B"]
    assert ev.evaluate("{{ (1, 2) }}", scope) == [1, 2]
    with pytest.raises(ExpressionFault, match="add |list|end a filter chain"):
        ev.evaluate("{{ m.words|map('upper') }}", scope)
    with pytest.raises(ExpressionFault, match="not a JSON value"):
        ev.evaluate("{{ m.items() }}", scope)


def test_legacy_evaluation_keeps_what_earlier_builds_did_for_replay() -> None:
    legacy = Evaluator(legacy=True)
    assert legacy.evaluate("{{ m.s }}", {"m": {"s": "42"}}) == 42
    with pytest.raises(ExpressionFault):  # the dict method came first: not a JSON value
        legacy.evaluate("{{ m.items }}", {"m": {"items": 1}})
    assert legacy.evaluate("{{ m.get('items') }}", {"m": {"items": 1}}) == 1
    with pytest.raises(ExpressionFault):  # budgets apply in legacy mode too
        legacy.evaluate("{{ (m.s * m.n) != '' }}", {"m": {"s": "x", "n": 10**9}})


payload_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=50)),
    lambda inner: st.one_of(st.lists(inner, max_size=20), st.dictionaries(st.text(max_size=8), inner, max_size=20)),
    max_leaves=200,
)
HOSTILE = [
    "{{ (m.a ** m.b) > 0 }}", "{{ (m.a * m.b) != 1 }}", "{{ m.a|center(m.b) }}", "{{ m.a % m.b }}",
    "{{ m.a|join(m.b) }}", "{{ m.a|replace(m.b, m.a) }}", "{{ m.a|batch(m.b)|list }}", "{{ m.a|sum(start=m.b) }}",
    "{{ m.a ~ m.b ~ m.a ~ m.b }}", "{{ m.a|sort|unique|list }}", "{{ m.a.items }}", "{{ m.a|tojson(indent=m.b) }}",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=st.sampled_from(HOSTILE), a=payload_values, b=st.one_of(payload_values, st.integers(-10**12, 10**12)))
def test_any_payload_gives_a_value_or_a_fault_quickly(source: str, a: Any, b: Any) -> None:
    # proves: TRIG-9, TRIG-13, BATCH-6 (whatever the payload: a value or a fault, never an escape or a hang)
    timed(Evaluator(), source, {"m": {"a": a, "b": b}})


def test_integer_limit_is_the_text_limit_so_results_stay_json(ev: Evaluator) -> None:
    biggest = ev.evaluate("{{ m.a * 1 }}", {"m": {"a": 10**MAX_INT_DIGITS - 1}})
    assert len(str(biggest)) == MAX_INT_DIGITS


def test_common_idioms_keep_working_under_the_budgets(ev: Evaluator) -> None:
    scope = {"m": {"a": 1, "s": "Hello", "l": [{"x": 1}, {"x": 2}]}}
    cases = {
        "{{ m.missing | default('x') }}": "x",
        "{{ m.missing is defined }}": False,
        "{{ m.missing | d(none) }}": None,
        "{{ m.l|map(attribute='x')|list }}": [1, 2],
        "{{ m.l|selectattr('x', 'gt', 1)|list }}": [{"x": 2}],
        "{{ m.l|map(attribute='x')|join(',') }}": "1,2",
        "{{ m.l|sum(attribute='x') }}": 3,
        "{{ m.s|lower ~ '-' ~ m.a }}": "hello-1",
        "{{ '%s-%d' % (m.s, m.a) }}": "Hello-1",
        "{{ m.s[1:3] }}": "el",
        "{{ m.s.startswith('H') }}": True,
        "{{ {'a': m.a, 'b': [m.s]} }}": {"a": 1, "b": ["Hello"]},
        "{{ m|dictsort|first }}": ["a", 1],
        "{{ m.l|tojson }}": '[{"x": 1}, {"x": 2}]',
        "{{ true }}": True,
        "{{ 7 }}": 7,
        "Post: {{ m.s }}": "Post: Hello",
    }
    for source, expected in cases.items():
        assert ev.evaluate(source, scope) == expected, source


@pytest.mark.parametrize(
    "when",
    ["{{ [true, false]|random }}", "{{ lipsum() == '' }}", "{{ range(2)|list == [] }}", "{% if true %}true{% endif %}"],
)
def test_wfi_validate_refuses_what_could_differ_on_replay_or_loop(when: str) -> None:
    # proves: TRIG-8 (a guard references only the binding and inputs, and is a pure expression)
    from wf_initiation.core import Catalog, load_workfile

    text = f"name: w\non:\n  mail.received: {{inbox: a@b.co}}\n  as: message\n  when: \"{when}\"\n"
    result = load_workfile(text, catalog=Catalog.default())
    assert result.status == "invalid", when
    assert {d.code for d in result.diagnostics} & {"TRIG-EXPR-SYNTAX", "TRIG-WHEN-SCOPE"}, result.diagnostics


def test_the_engine_records_each_kind_of_budget_fault_and_admits_the_next_event(tmp_path) -> None:
    # proves: BATCH-6, BATCH-7, TRIG-9, TRIG-13 (guard_fault, key_fault, projection_fault: no run, id consumed)
    from datetime import UTC, datetime

    from tests.support.activation import make_spec
    from wf_initiation.core.engine import Disposition, Engine, initial_state

    text = """
name: hostile-into
on:
  - http.request: {path: /a}
    as: a
    when: "{{ (a.body.n ** a.body.e) > 0 }}"
    queue_by: "{{ a.body.k * a.body.q }}"
    into: {post: {title: "{{ a.body.t|center(a.body.w) }}"}}
  - http.request: {path: /b}
    as: b
    into: {post: {title: "{{ b.body.t }}"}}
"""
    spec = make_spec(tmp_path, text, task_queue="q")
    now = datetime(2026, 1, 1, tzinfo=UTC)
    engine = drive(Engine(spec, initial_state(spec, now)))
    normal = {"n": 2, "e": 3, "k": "x", "q": 2, "t": "hi", "w": 4}

    def deliver(ident: str, **body: object) -> Disposition:
        payload = {"delivery_id": ident, "method": "POST", "body": {**normal, **body}}
        return engine.deliver("a", payload, now).disposition

    assert deliver("1", e=10**7) == Disposition.GUARD_FAULT
    assert deliver("2", q=10**10) == Disposition.KEY_FAULT
    assert deliver("3", w=10**9) == Disposition.PROJECTION_FAULT
    assert deliver("1", e=10**7) == Disposition.DUPLICATE  # the fault consumed the id (BATCH-7)
    assert deliver("4") == Disposition.ACCEPTED
    starts = [c for c in engine.take_commands() if type(c).__name__ == "StartRun"]
    assert len(starts) == 1 and starts[0].input.into == {"post": {"title": " hi "}}
