"""Expressions: strict names, faults distinct from false, JSON-value key equality."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wf_initiation.core import Evaluator, ExpressionFault, ExpressionSyntaxError, canonical_key


@pytest.fixture
def ev() -> Evaluator:
    return Evaluator()


def test_a_reference_to_a_missing_name_is_a_fault_not_an_empty_value(ev: Evaluator) -> None:
    # proves: TRIG-9 (the evaluation fault is raised, never rendered as empty)
    with pytest.raises(ExpressionFault):
        ev.evaluate("{{ nobody }}", {"message": {}})


def test_a_reference_to_a_missing_attribute_is_a_fault(ev: Evaluator) -> None:
    with pytest.raises(ExpressionFault):
        ev.evaluate("{{ message.thread_id }}", {"message": {"subject": "hi"}})
    with pytest.raises(ExpressionFault):
        ev.evaluate("{{ message.thread_id == 'x' }}", {"message": {}})


def test_a_guard_fault_is_distinct_from_false(ev: Evaluator) -> None:
    # proves: TRIG-9 (a fault in `when` is an error type, distinct from suppression by false)
    assert ev.guard("{{ message.n > 1 }}", {"message": {"n": 0}}) is False
    with pytest.raises(ExpressionFault):
        ev.guard("{{ message.missing > 1 }}", {"message": {"n": 0}})
    assert not issubclass(ExpressionFault, (bool, type(None)))


def test_a_guard_that_is_not_a_boolean_is_a_fault(ev: Evaluator) -> None:
    with pytest.raises(ExpressionFault):
        ev.guard("{{ message.n }}", {"message": {"n": 0}})


def test_a_key_that_evaluates_to_null_is_a_fault(ev: Evaluator) -> None:
    # proves: TRIG-13 (a null key is an evaluation fault)
    with pytest.raises(ExpressionFault):
        ev.key("{{ message.thread_id }}", {"message": {"thread_id": None}})
    assert ev.key("{{ message.thread_id }}", {"message": {"thread_id": "t1"}}) == '"t1"'


def test_keys_compare_by_json_value_equality(ev: Evaluator) -> None:
    # proves: TRIG-13 (keys compare by the equality rules), TRIG-12 (equal keys of two entries share a queue)
    assert canonical_key(1) == canonical_key(1.0)
    assert canonical_key({"a": 1, "b": [1, 2.0]}) == canonical_key({"b": [1.0, 2], "a": 1.0})
    assert canonical_key(True) != canonical_key(1)
    assert canonical_key("1") != canonical_key(1)
    mail = ev.key("{{ m.thread }}", {"m": {"thread": 7}})
    hook = ev.key("{{ h.body.thread }}", {"h": {"body": {"thread": 7.0}}})
    assert mail == hook


def test_non_json_key_values_are_faults() -> None:
    with pytest.raises(ExpressionFault):
        canonical_key(float("nan"))
    with pytest.raises(ExpressionFault):
        canonical_key({1, 2})


def test_a_malformed_expression_is_a_syntax_error(ev: Evaluator) -> None:
    with pytest.raises(ExpressionSyntaxError):
        ev.compile("{{ message. }}")


def test_root_references_name_each_root_with_its_path(ev: Evaluator) -> None:
    refs = set(ev.root_references("{{ message.thread_id ~ inputs.prefix }}"))
    assert ("message", ("thread_id",)) in refs and ("inputs", ("prefix",)) in refs


def test_evaluation_has_no_access_to_internals(ev: Evaluator) -> None:
    with pytest.raises(ExpressionFault):
        ev.evaluate("{{ message.__class__.__mro__ }}", {"message": {}})


json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=5)
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)),
    max_leaves=15,
)


def _as_floats(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, (int, dict, list)):
        return value
    if isinstance(value, int):
        return float(value) if abs(value) < 2**53 else value
    if isinstance(value, dict):
        return {k: _as_floats(v) for k, v in reversed(list(value.items()))}
    return [_as_floats(v) for v in value]


@given(json_values)
def test_canonical_keys_ignore_key_order_and_integral_float_spelling(value: object) -> None:
    assert canonical_key(_as_floats(value)) == canonical_key(value)
