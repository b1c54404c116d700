"""A trigger implemented more than one way, chosen by the deployment (``via``): ``mail.received``
pushed by a bridge (the catalog's manifest, kind external) or polled over IMAP (``via: imap``, kind
poll). The Workfile is the same; the resolved implementation decides the kind and the capability."""

from __future__ import annotations

import pytest

from wf_initiation.core import Catalog, load_workfile, parse_manifest
from wf_initiation.core._diagnostics import DiagnosticError
from wf_initiation.core.activation import activation_problems, build_activation, manifest_resolver
from wf_initiation.core.deployment import parse_deployment

WORKFILE = """
name: support
on:
  mail.received: {inbox: support@acme.com}
  as: message
  when: "{{ message.recipient != 'noreply@acme.com' }}"
  queue_by: "{{ message.thread_id }}"
"""
IMAP = {"connector": "mail", "via": "imap", "host": "imap.acme.com", "username": "support@acme.com",
        "password": "env:SUPPORT_IMAP_PASSWORD"}


def deployment(connection: dict | None, capabilities: list[str] | None = None):
    return parse_deployment({
        "connections": {"inbox": connection} if connection is not None else {},
        **({"capabilities": capabilities} if capabilities is not None else {}),
        "workflows": {"support": {"run": {"workflow_type": "Triage", "task_queue": "q"}}},
    })


def workfile(text: str = WORKFILE):
    result = load_workfile(text)
    assert result.workfile is not None, result.diagnostics
    return result.workfile


def test_the_imap_alternative_means_the_same_trigger_and_is_a_poll() -> None:
    catalog = Catalog.default(third_party=False)
    pushed, polled = catalog.get("mail.received"), catalog.resolve("mail.received", "imap")
    assert pushed is not None and polled is not None and catalog.vias("mail.received") == ["imap"]
    assert (pushed.kind, polled.kind, polled.via) == ("external", "poll", "imap")
    for key in ("binds", "input_schema", "payload_schema", "delivery_id"):
        assert getattr(pushed, key) == getattr(polled, key), key
    assert polled.implementation == "wf_initiation.activities.poll.imap:poll_imap" and polled.stable_order


def test_a_connection_with_via_imap_makes_the_same_workfile_a_poll_needing_polling_initiation() -> None:
    # proves: CAP-1, CAP-5, TRIG-6
    catalog = Catalog.default(third_party=False)
    spec = build_activation(workfile(), deployment(IMAP), catalog)
    (entry,) = spec.entries
    assert (entry.connector, entry.kind, entry.connection) == ("mail.received", "poll", "inbox")
    assert entry.implementation == "wf_initiation.activities.poll.imap:poll_imap" and entry.stable_order is True
    assert entry.connection_settings["password"] == "env:SUPPORT_IMAP_PASSWORD", "the reference, never a value"
    resolve = manifest_resolver(deployment(IMAP), catalog)
    assert load_workfile(WORKFILE, resolve=resolve).required_capabilities == ["wf.polling-initiation"]
    assert load_workfile(WORKFILE).required_capabilities == ["wf.external-event-initiation"], "without a deployment"
    pushed = build_activation(workfile(), deployment({"connector": "mail", "token": "env:BRIDGE"}), catalog)
    assert pushed.entries[0].kind == "external" and pushed.entries[0].implementation is None


def test_a_deployment_not_claiming_polling_refuses_the_imap_entry_and_names_it() -> None:
    # proves: CAP-7, CAP-8
    dep = deployment(IMAP, capabilities=["wf.external-event-initiation"])
    with pytest.raises(DiagnosticError) as caught:
        build_activation(workfile(), dep, Catalog.default(third_party=False))
    (diagnostic,) = caught.value.diagnostics
    assert diagnostic.code == "CAP-UNSUPPORTED" and diagnostic.capability == "wf.polling-initiation"
    assert diagnostic.entry == "message"
    result = load_workfile(WORKFILE, claims=dep.capabilities, resolve=manifest_resolver(dep, Catalog.default()))
    assert result.status == "unsupported", "wfi validate --deployment says the same"


def test_an_implementation_the_trigger_does_not_have_is_refused_naming_those_it_has() -> None:
    # proves: CAP-6
    (problem,) = activation_problems(workfile(), deployment({**IMAP, "via": "pop3"}), Catalog.default(third_party=False))
    assert problem.code == "DEPLOY-CONNECTION-VIA" and problem.entry == "message"
    assert "via: pop3" in problem.message and "'imap'" in problem.message
    sql = parse_deployment({"connections": {"db": {"connector": "sql", "via": "imap", "sqlite": "/x.db"}},
                            "workflows": {"s": {"run": {"workflow_type": "T", "task_queue": "q"}}}})
    text = "name: s\non:\n  sql.row_inserted: {table: t, column: id}\n"
    (problem,) = activation_problems(workfile(text), sql, Catalog.default(third_party=False))
    assert problem.code == "DEPLOY-CONNECTION-VIA" and "remove 'via'" in problem.message


def test_via_must_be_a_lower_case_name_and_the_password_a_reference() -> None:
    for bad, expected in (({**IMAP, "via": "IMAP!"}, "'via' names the implementation"),
                          ({**IMAP, "password": "hunter2"}, "secret inline")):
        with pytest.raises(DiagnosticError) as caught:
            deployment(bad)
        assert expected in str(caught.value), caught.value


ALT = {"name": "mail.received", "version": "9.0.0", "kind": "poll", "via": "gmail", "stable_order": True}


def test_an_alternative_that_means_another_trigger_or_a_second_poll_is_reported_broken() -> None:
    # proves: CAP-6
    builtin = Catalog.default(third_party=False)
    pushed = builtin.get("mail.received")
    assert pushed is not None
    same = {k: getattr(pushed, k) for k in ("binds", "input_schema", "payload_schema", "delivery_id")}
    other = parse_manifest({**ALT, **same, "binds": "mail"})
    second = parse_manifest({**ALT, **same})
    catalog = Catalog([*builtin.manifests(), other])
    assert catalog.resolve("mail.received", "gmail") is None
    assert "binds differ" in catalog.broken["mail.received via gmail"]
    catalog = Catalog([*builtin.manifests(), second])
    assert "at most one" in catalog.broken["mail.received via gmail"] and catalog.vias("mail.received") == ["imap"]
    orphan = Catalog([parse_manifest({**ALT, **same})])
    assert "no manifest without 'via'" in orphan.broken["mail.received via gmail"]
    with pytest.raises(Exception, match="lower-case identifier"):
        parse_manifest({**ALT, **same, "via": "Gmail"})


def test_an_http_json_connection_holding_a_secret_names_the_origins_it_may_go_to() -> None:
    with pytest.raises(DiagnosticError) as caught:
        deployment({"connector": "http_json", "bearer_token": "env:API_TOKEN"})
    assert "'bearer_token' holds a secret reference" in str(caught.value) and "origins" in str(caught.value)
    fine = deployment({"connector": "http_json", "bearer_token": "env:API_TOKEN", "origins": ["https://api.acme.com"]})
    assert fine.connections["inbox"].settings()["bearer_token"] == "env:API_TOKEN"
