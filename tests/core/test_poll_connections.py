"""Connections and their secrets (issue 11 item 8): references instead of values, refusal of inline
secrets, redaction of every error text, and the binding hash. Resolution on a worker, against a real
feed server and PostgreSQL address, is in tests/integration/test_poll_connections_live.py.

The end-to-end proof (a planted secret absent from history, state, summary, current details and
the worker log of a real activation) is in test_poll_hostile.py.
"""

from __future__ import annotations

import pathlib

import pytest

from tests.support.activation import make_spec, unique
from wf_initiation.core._diagnostics import DiagnosticError
from wf_initiation.core.connections import (
    Redactor,
    SecretUnavailable,
    inline_secret_problems,
    parse_ref,
    redact,
    resolve_settings,
)
from wf_initiation.core.deployment import parse_deployment

SECRET = "pl4nted-S3CRET-value"


def deployment(**connections: dict) -> None:
    parse_deployment({"connections": connections})


# --- the deployment refuses secrets written inline ------------------------------------------------


@pytest.mark.parametrize(("settings", "where"), [
    ({"password": "hunter2"}, "password"),
    ({"token": "abc"}, "token"),
    ({"api_key": "abc"}, "api_key"),
    ({"headers": {"Authorization": "Bearer abc"}}, "headers.Authorization"),
    ({"headers": {"X-Api-Key": "abc"}}, "headers.X-Api-Key"),
    ({"dsn": "postgresql://app:hunter2@db.internal/shop"}, "dsn"),
    ({"dsn": "host=db.internal password=hunter2 dbname=shop"}, "dsn"),
    ({"urls": ["https://user:pw@mirror.test/feed"]}, "urls[0]"),
])
def test_a_secret_written_inline_is_refused_with_the_reference_to_write(settings: dict, where: str):
    with pytest.raises(DiagnosticError) as caught:
        deployment(db={"connector": "sql", **settings})
    (diagnostic,) = caught.value.diagnostics
    assert diagnostic.code == "DEPLOY-INVALID" and diagnostic.path == "connections.db"
    assert repr(where) in diagnostic.message and '"env:' in diagnostic.message
    assert "hunter2" not in diagnostic.message and "Bearer abc" not in diagnostic.message


@pytest.mark.parametrize("settings", [
    {"password": "env:SHOP_PASSWORD", "dsn": "postgresql://app@db.internal/shop"},
    {"dsn": "env:SHOP_DSN"},
    {"headers": {"Authorization": "file:/run/secrets/blog", "Accept": "application/rss+xml"}, "timeout": 10},
    {"secret_env": "GITHUB_WEBHOOK_SECRET", "token_file": "/run/secrets/x"},  # names of where a secret lives
    {"sqlite": "/data/orders.db"}, {"dir": "/data/sheets"}, {"author": "ops"},
])
def test_references_and_plain_settings_are_accepted(settings: dict):
    deployment(c={"connector": "sql", **settings})


@pytest.mark.parametrize(("value", "fix"), [("env:1BAD", "variable name"), ("env:", "variable name"),
                                            ("file:relative/path", "absolute path")])
def test_a_malformed_reference_is_refused(value: str, fix: str):
    with pytest.raises(DiagnosticError) as caught:
        deployment(c={"connector": "rss", "headers": {"Authorization": value}})
    assert fix in caught.value.diagnostics[0].message


# --- resolution and redaction on the worker --------------------------------------------------------


def test_references_resolve_from_the_environment_and_files_and_their_values_are_collected(tmp_path: pathlib.Path):
    token = tmp_path / "token"
    token.write_text(SECRET + "\n")  # written with echo: the newline is not part of the secret
    settings = {"dsn": "env:DB", "headers": {"Authorization": f"file:{token}"}, "timeout": 5}
    resolved = resolve_settings(settings, {"DB": "postgresql://app:db-pw-123@h/shop"}, lambda p: pathlib.Path(p).read_text())
    assert resolved.settings == {"dsn": "postgresql://app:db-pw-123@h/shop", "headers": {"Authorization": SECRET},
                                 "timeout": 5}
    assert resolved.secrets == {"postgresql://app:db-pw-123@h/shop", "db-pw-123", SECRET}
    assert settings["dsn"] == "env:DB" and parse_ref(settings["dsn"]).text == "env:DB"


def test_an_unset_variable_or_unreadable_file_names_the_reference_never_a_value():
    with pytest.raises(SecretUnavailable, match=r"'dsn' references env:NOPE, which is not set"):
        resolve_settings({"dsn": "env:NOPE"}, {}, lambda p: "")
    with pytest.raises(SecretUnavailable, match=r"references file:/nonexistent/x, which cannot be read"):
        resolve_settings({"password": "file:/nonexistent/x"}, {}, lambda p: pathlib.Path(p).read_text())


def test_the_redactor_removes_values_and_passwords_inside_urls_and_dsns():
    redactor = Redactor({SECRET, "ab"})  # too short a value is not searched for (it would blank out words)
    text = (f"token {SECRET} failed; connecting to postgresql://app:other-pw@db/shop and "
            "host=db password='quoted pw' port=5432 and https://u:p@x.test/feed; about ab")
    assert redactor.redact(text) == (
        "token *** failed; connecting to postgresql://app:***@db/shop and "
        "host=db password=*** port=5432 and https://u:***@x.test/feed; about ab")


def test_the_redactor_masks_token_like_query_parameters_of_a_feed_url():
    # An activity's error (worker log, activity failure in history) names the feed without its token.
    text = "feed http://127.0.0.1:9/feed.xml?page=2&token=tok-9f8e&api_key=k1;sig=s2#x could not be fetched"
    assert redact(text) == "feed http://127.0.0.1:9/feed.xml?page=2&token=***&api_key=***;sig=***#x could not be fetched"


def test_inline_secret_problems_walks_nested_settings():
    assert inline_secret_problems({"a": {"b": {"client_secret": "x"}}, "ok": 1})[0].startswith("'a.b.client_secret'")


# --- the binding: references are identity, values are not ------------------------------------------

WORKFILE = """
name: {name}
on:
  sql.row_inserted: {{table: orders, column: id}}
  as: row
"""


def spec_for(tmp_path: pathlib.Path, name: str, **connection):
    return make_spec(tmp_path, WORKFILE.format(name=name), task_queue="tq",
                     connections={"db": {"connector": "sql", **connection}})


def test_a_changed_reference_or_setting_is_a_new_activation_and_a_rotated_value_is_not(tmp_path, monkeypatch):
    # proves: INIT-3, INIT-4
    name = unique("secrets")
    monkeypatch.setenv("SHOP_DSN", "postgresql://app:first@db/shop")
    base = spec_for(tmp_path, name, dsn="env:SHOP_DSN")
    monkeypatch.setenv("SHOP_DSN", "postgresql://app:rotated@db/shop")
    rotated = spec_for(tmp_path, name, dsn="env:SHOP_DSN")
    other_ref = spec_for(tmp_path, name, dsn="env:SHOP_DSN_2")
    other_setting = spec_for(tmp_path, name, dsn="env:SHOP_DSN", application_name="wfi")
    assert rotated.activation_id == base.activation_id, "a rotated secret needs no re-activation"
    assert len({base.activation_id, other_ref.activation_id, other_setting.activation_id}) == 3
    assert base.entries[0].connection_settings == {"connector": "sql", "dsn": "env:SHOP_DSN"}
    assert "first" not in base.model_dump_json() and "rotated" not in rotated.model_dump_json()


def test_a_named_connection_of_another_connector_is_refused(tmp_path):
    with pytest.raises(DiagnosticError) as caught:
        make_spec(tmp_path, "name: w\non:\n  sql.row_inserted: {table: t, column: id, connection: blog}\n",
                  task_queue="tq", connections={"blog": {"connector": "rss"}})
    (diagnostic,) = caught.value.diagnostics
    assert diagnostic.code == "DEPLOY-CONNECTION-MISMATCH" and "serves 'rss'" in diagnostic.message
