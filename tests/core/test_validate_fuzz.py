"""Bad input of any kind gives diagnostics, never an exception (issue 2, item 3).

Hypothesis feeds `load_workfile` random text, random YAML documents of any shape, and valid
Workfiles mutated line by line; every outcome must be a well-formed ValidationResult.
"""

from __future__ import annotations

import io
import pathlib

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from tests.support.paths import ROOT
from wf_initiation.core import Catalog, ValidationResult, load_workfile

EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.yaml")
                  if p.name != "deployment.yaml")
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEYS = [
    "name",
    "on",
    "steps",
    "inputs",
    "as",
    "when",
    "queue_by",
    "batch",
    "into",
    "size",
    "max_wait",
    "partition_by",
    "id",
    "connection",
    "mail.received",
    "time.schedule",
    "http.request",
    "inbox",
    "cron",
]


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.default(third_party=False)


def assert_well_formed(result: ValidationResult) -> None:
    assert result.status in ("valid", "invalid", "unsupported")
    assert (result.workfile is None) == (result.status == "invalid")
    codes = {d.code for d in result.diagnostics}
    if result.status == "valid":
        assert not codes
    elif result.status == "unsupported":
        assert codes == {"CAP-UNSUPPORTED"}
    else:
        assert codes and "CAP-UNSUPPORTED" not in codes
    for d in result.diagnostics:
        assert d.code and d.message
        assert d.line is None or d.line >= 1
    result.summary()  # serialisable for --json


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.sampled_from(["{{ message.x }}", "{{", "{{ inputs.a }}", "5s", "0s", "-1", "a@b.co", "}}"]),
)
yaml_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), inner, max_size=5),
    ),
    max_leaves=25,
)


def dump(value: object) -> str:
    out = io.StringIO()
    YAML(typ="safe").dump(value, out)
    return out.getvalue()


@FUZZ
@given(st.text(max_size=400))
def test_random_text_never_raises(catalog: Catalog, text: str) -> None:
    assert_well_formed(load_workfile(text, catalog=catalog))


@FUZZ
@given(st.binary(max_size=200))
def test_binary_junk_never_raises(catalog: Catalog, data: bytes) -> None:
    assert_well_formed(load_workfile(data.decode("latin-1"), catalog=catalog))


@FUZZ
@given(yaml_values)
def test_random_yaml_documents_never_raise(catalog: Catalog, value: object) -> None:
    assert_well_formed(load_workfile(dump(value), catalog=catalog, claims=["wf.polling-initiation"]))


@FUZZ
@given(
    st.fixed_dictionaries({"name": scalars, "on": yaml_values}, optional={"steps": yaml_values, "inputs": yaml_values})
)
def test_workfile_shaped_documents_never_raise(catalog: Catalog, value: object) -> None:
    assert_well_formed(load_workfile(dump(value), catalog=catalog, claims=[]))


mutations = st.lists(
    st.tuples(
        st.sampled_from(["delete", "duplicate", "insert", "indent", "dedent", "replace"]),
        st.integers(min_value=0, max_value=60),
        st.one_of(
            st.sampled_from(["  as: x", "batch: 3", "- 7", ": :", "into: {a: 1}", "{{", "&a *a", "[", "'"]),
            st.text(max_size=12),
        ),
    ),
    min_size=1,
    max_size=4,
)


def mutate(text: str, edits: list[tuple[str, int, str]]) -> str:
    lines = text.splitlines()
    for op, at, junk in edits:
        i = at % max(len(lines), 1)
        if op == "delete" and lines:
            del lines[i]
        elif op == "duplicate" and lines:
            lines.insert(i, lines[i])
        elif op == "insert":
            lines.insert(i, junk)
        elif op == "indent" and lines:
            lines[i] = "  " + lines[i]
        elif op == "dedent" and lines:
            lines[i] = lines[i].lstrip()
        elif op == "replace" and lines:
            lines[i] = lines[i][: len(lines[i]) // 2] + junk
    return "\n".join(lines) + "\n"


@FUZZ
@given(st.sampled_from(EXAMPLES), mutations)
# Found in CI on 2 Dec: an entry whose one non-entry key is null (`- : :`) named no trigger and raised.
@example(example=ROOT / "examples" / "content-into.yaml", edits=[("replace", 8, "  as: x"), ("replace", 8, ""), ("replace", 8, ": :")])
def test_mutated_examples_never_raise(
    catalog: Catalog, example: pathlib.Path, edits: list[tuple[str, int, str]]
) -> None:
    assert_well_formed(load_workfile(mutate(example.read_text(), edits), catalog=catalog, claims=[]))


@pytest.mark.parametrize(
    "text",
    [
        "a: " + "[" * 5000,
        "[" * 3000 + "]" * 3000,
        "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200)),
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)),
        "name: w\non: {mail.received: {inbox: &x [*x]}}\n",
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  when: '{{ " + "(" * 2000 + "1" + ")" * 2000 + " }}'\n",
        "\x00\x01\x02",
        "\ufeffname: w\n",
        "name: !!binary zz\n",
        "? [a, b]\n: c\n",
        "--- a\n--- b\n",
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  batch: {max_wait: 99999999999999999999999d}\n",
    ],
    ids=[
        "unclosed-nesting",
        "deep-nesting",
        "deep-mapping",
        "alias-bomb",
        "self-alias",
        "deep-expression",
        "control-chars",
        "bom",
        "bad-binary",
        "complex-key",
        "two-documents",
        "huge-duration",
    ],
)
def test_hostile_documents_yield_diagnostics(catalog: Catalog, text: str) -> None:
    result = load_workfile(text, catalog=catalog)
    assert_well_formed(result)
    assert result.status == "invalid"


def test_a_missing_file_is_a_diagnostic(tmp_path: pathlib.Path, catalog: Catalog) -> None:
    result = load_workfile(tmp_path / "absent.yaml", catalog=catalog)
    assert (result.status, [d.code for d in result.diagnostics]) == ("invalid", ["WF-FILE-UNREADABLE"])
    assert result.file == str(tmp_path / "absent.yaml")


def test_a_file_that_is_not_utf8_is_a_diagnostic(tmp_path: pathlib.Path, catalog: Catalog) -> None:
    path = tmp_path / "latin.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    result = load_workfile(path, catalog=catalog)
    assert [d.code for d in result.diagnostics] == ["WF-FILE-UNREADABLE"]
