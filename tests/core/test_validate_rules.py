"""One invalid Workfile per trigger-syntax rule: each is rejected with its code, entry and line.

Every Workfile text starts with `name:` on line 1, so the expected line numbers can be read off
the text. Clauses are the rules of docs/specification.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from wf_initiation.core import Catalog, Diagnostic, Manifest, ValidationResult, classify, load_workfile, required_capabilities


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.default(third_party=False)


@dataclass(frozen=True)
class Case:
    clause: str
    code: str
    entry: str | None
    line: int
    text: str
    path: str | None = None


def only(result: ValidationResult, code: str) -> Diagnostic:
    found = [d for d in result.diagnostics if d.code == code]
    assert found, f"expected {code}, got {[d.render() for d in result.diagnostics]}"
    return found[0]


CASES = [
    # proves: TRIG-1 (on names a trigger from the catalog; exactly one per entry)
    Case("TRIG-1", "TRIG-ON-MISSING", None, 1, "name: w\nsteps: []\n"),
    Case("TRIG-1", "TRIG-ON-TYPE", None, 2, "name: w\non: mail.received\n"),
    Case("TRIG-1", "TRIG-ON-EMPTY", None, 2, "name: w\non: []\n"),
    Case("TRIG-1", "TRIG-UNKNOWN-CONNECTOR", "nope.event", 3, "name: w\non:\n  nope.event: {}\n", 'on["nope.event"]'),
    Case("TRIG-1", "TRIG-CONNECTOR-MISSING", "message", 3, "name: w\non:\n  as: message\n  when: '{{ true }}'\n"),
    Case(
        "TRIG-1",
        "TRIG-CONNECTOR-MULTIPLE",
        "on[0]",
        4,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  http.request: {}\n",
    ),
    Case("TRIG-1", "TRIG-ENTRY-TYPE", "on[1]", 5, "name: w\non:\n  - http.request: {}\n    as: a\n  - 7\n", "on[1]"),
    Case(
        "TRIG-1",
        "TRIG-ENTRY-UNKNOWN-KEY",
        "mail.received",
        4,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  queu_by: '{{ message.thread_id }}'\n",
        "on.queu_by",
    ),
    # proves: TRIG-2 (configuration keys checked against the manifest's input schema), CAP-6
    Case(
        "TRIG-2",
        "TRIG-CONFIG-UNKNOWN-KEY",
        "mail.received",
        5,
        "name: w\non:\n  mail.received:\n    inbox: a@b.co\n    folder: INBOX\n",
        'on["mail.received"].folder',
    ),
    Case("TRIG-2", "TRIG-CONFIG-MISSING", "mail.received", 3, "name: w\non:\n  mail.received: {connection: c}\n"),
    Case(
        "TRIG-2",
        "TRIG-CONFIG-INVALID",
        "record",
        6,
        "name: w\non:\n  sql.row_inserted:\n    table: orders\n    column: id\n    batch_limit: lots\n  as: record\n",
        'on["sql.row_inserted"].batch_limit',
    ),
    Case(
        "TRIG-2",
        "TRIG-CONFIG-INVALID",
        "mail.received",
        4,
        "name: w\non:\n  mail.received:\n    inbox: not-an-address\n",
    ),
    Case("TRIG-2", "TRIG-CONFIG-MISSING", "time.schedule", 3, "name: w\non:\n  time.schedule: {timezone: UTC}\n"),
    Case("TRIG-2", "TRIG-CONFIG-TYPE", "time.schedule", 3, "name: w\non:\n  time.schedule: '@daily'\n"),
    Case(
        "TRIG-2",
        "TRIG-CONFIG-SCOPE",
        "mail.received",
        4,
        "name: w\non:\n  mail.received:\n    inbox: '{{ message.recipient }}'\n",
    ),
    # proves: TRIG-3 (`as` overrides the default: the default name is then not in scope)
    Case(
        "TRIG-3",
        "TRIG-WHEN-SCOPE",
        "mail",
        5,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  as: mail\n  when: '{{ message.subject == \"hi\" }}'\n",
    ),
    # proves: TRIG-4, TRIG-18 (every entry of a list requires its own `as`)
    Case(
        "TRIG-4",
        "TRIG-AS-REQUIRED",
        "sheet.row_added",
        5,
        "name: w\non:\n  - rss.item_published: {feed: 'https://x.example/f'}\n    as: item\n"
        "  - sheet.row_added: {sheet: Cal}\n",
        'on[1]["sheet.row_added"]',
    ),
    Case("TRIG-18", "TRIG-AS-REQUIRED", "mail.received", 3, "name: w\non:\n  - mail.received: {inbox: a@b.co}\n"),
    # proves: TRIG-5 (default binding collides with a step id: rejected, never resolved silently)
    Case(
        "TRIG-5",
        "TRIG-AS-COLLISION",
        "mail.received",
        3,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\nsteps:\n  - id: message\n",
    ),
    Case(
        "TRIG-5",
        "TRIG-AS-STEP-COLLISION",
        "reply",
        4,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  as: reply\nsteps:\n  - id: reply\n",
        "on.as",
    ),
    Case(
        "TRIG-3",
        "TRIG-AS-RESERVED",
        "mail.received",
        4,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  as: inputs\n",
    ),
    Case(
        "TRIG-3",
        "TRIG-AS-INVALID",
        "mail.received",
        4,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  as: my-mail\n",
    ),
    Case(
        "TRIG-18",
        "TRIG-AS-DUPLICATE",
        "m",
        6,
        "name: w\non:\n  - mail.received: {inbox: a@b.co}\n    as: m\n  - mail.received: {inbox: c@d.co}\n    as: m\n",
        "on[1].as",
    ),
    # proves: TRIG-6 (connection is a credential binding name)
    Case(
        "TRIG-6",
        "TRIG-CONNECTION-INVALID",
        "mail.received",
        5,
        "name: w\non:\n  mail.received:\n    inbox: a@b.co\n    connection: [a, b]\n",
    ),
    # proves: TRIG-8 (when may reference only the binding and inputs)
    Case(
        "TRIG-8",
        "TRIG-WHEN-SCOPE",
        "mail.received",
        4,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  when: '{{ classify.ok }}'\nsteps:\n  - id: classify\n",
        "on.when",
    ),
    Case(
        "TRIG-8",
        "TRIG-WHEN-SCOPE",
        "mail.received",
        4,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  when: '{{ trigger.name == \"x\" }}'\n",
    ),
    Case(
        "TRIG-8",
        "TRIG-INPUT-UNKNOWN",
        "mail.received",
        4,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  when: '{{ inputs.vip }}'\n",
    ),
    Case(
        "TRIG-8",
        "TRIG-EXPR-SYNTAX",
        "mail.received",
        4,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  when: '{{ message. }}'\n",
    ),
    Case(
        "TRIG-8", "TRIG-EXPR-TYPE", "mail.received", 4, "name: w\non:\n  mail.received: {inbox: a@b.co}\n  when: true\n"
    ),
    # proves: TRIG-10 (queue_by has the scope of when)
    Case(
        "TRIG-10",
        "TRIG-QUEUE-BY-SCOPE",
        "mail.received",
        4,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  queue_by: '{{ item.thread_id }}'\n",
        "on.queue_by",
    ),
    # proves: TRIG-15 (batch: size, max_wait, partition_by)
    Case(
        "TRIG-15",
        "TRIG-BATCH-SIZE",
        "mail.received",
        4,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  batch: {size: 0}\n",
        "on.batch.size",
    ),
    Case(
        "TRIG-15",
        "TRIG-BATCH-SIZE",
        "mail.received",
        5,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  batch:\n    size: true\n",
    ),
    Case(
        "TRIG-15",
        "TRIG-BATCH-MAX-WAIT",
        "mail.received",
        4,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  batch: {max_wait: soon}\n",
    ),
    Case(
        "TRIG-15",
        "TRIG-BATCH-MAX-WAIT",
        "mail.received",
        4,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  batch: {max_wait: 0s}\n",
    ),
    Case(
        "TRIG-15",
        "TRIG-BATCH-UNKNOWN-KEY",
        "mail.received",
        6,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  batch:\n    size: 10\n    order_by: '{{ message.at }}'\n",
        "on.batch.order_by",
    ),
    Case(
        "TRIG-15",
        "TRIG-BATCH-EMPTY",
        "mail.received",
        4,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  batch: {partition_by: '{{ message.account_id }}'}\n",
    ),
    Case(
        "TRIG-15",
        "TRIG-BATCH-TYPE",
        "mail.received",
        4,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  batch: 10\n",
    ),
    # proves: TRIG-16 (partition_by is evaluated over the single event: only its binding and inputs)
    Case(
        "TRIG-16",
        "TRIG-PARTITION-BY-SCOPE",
        "mail.received",
        4,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  batch: {size: 5, partition_by: '{{ summarise.key }}'}\n",
        "on.batch.partition_by",
    ),
    # proves: TRIG-17
    Case(
        "TRIG-17",
        "TRIG-BATCH-QUEUE-BY",
        "mail.received",
        5,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  queue_by: '{{ message.thread_id }}'\n  batch: {size: 10}\n",
        "on.batch",
    ),
    # proves: TRIG-19 (into is evaluated over the firing entry's payload only)
    Case(
        "TRIG-19",
        "TRIG-INTO-SCOPE",
        "row",
        9,
        "name: w\non:\n  - rss.item_published: {feed: 'https://x.example/f'}\n    as: item\n    into: {title: '{{ item.title }}'}\n"
        "  - sheet.row_added: {sheet: Cal}\n    as: row\n    into:\n      title: '{{ item.title }}'\n",
        "on[1].into.title",
    ),
    Case(
        "TRIG-19",
        "TRIG-INTO-COLLISION",
        "item",
        5,
        "name: w\non:\n  - rss.item_published: {feed: 'https://x.example/f'}\n    as: item\n    into: {publish: '{{ item.title }}'}\n"
        "  - sheet.row_added: {sheet: Cal}\n    as: row\n    into: {publish: '{{ row.title }}'}\nsteps:\n  - id: publish\n",
    ),
    Case(
        "TRIG-19",
        "TRIG-INTO-TYPE",
        "row",
        8,
        "name: w\non:\n  - rss.item_published: {feed: 'https://x.example/f'}\n    as: item\n    into: {t: '{{ item.title }}'}\n"
        "  - sheet.row_added: {sheet: Cal}\n    as: row\n    into: '{{ row }}'\n",
    ),
    # proves: TRIG-20 (all entries declare into, with the same names and nested keys)
    Case(
        "TRIG-20",
        "TRIG-INTO-MISSING",
        "row",
        6,
        "name: w\non:\n  - rss.item_published: {feed: 'https://x.example/f'}\n    as: item\n    into: {title: '{{ item.title }}'}\n"
        "  - sheet.row_added: {sheet: Cal}\n    as: row\n",
    ),
    Case(
        "TRIG-20",
        "TRIG-INTO-SHAPE",
        "row",
        8,
        "name: w\non:\n  - rss.item_published: {feed: 'https://x.example/f'}\n    as: item\n"
        "    into: {post: {title: '{{ item.title }}', link: '{{ item.url }}'}}\n"
        "  - sheet.row_added: {sheet: Cal}\n    as: row\n    into:\n"
        "      post: {title: '{{ row.title }}', href: '{{ row.link }}'}\n",
        "on[1].into",
    ),
    # proves: TRIG-21
    Case(
        "TRIG-21",
        "TRIG-INTO-SINGLE",
        "mail.received",
        4,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  into: {subject: '{{ message.subject }}'}\n",
        "on.into",
    ),
    Case(
        "TRIG-21",
        "TRIG-INTO-SINGLE",
        "m",
        5,
        "name: w\non:\n  - mail.received: {inbox: a@b.co}\n    as: m\n    into: {subject: '{{ m.subject }}'}\n",
    ),
    # proves: CAP-2 (a Workfile must not declare its capability requirements itself)
    Case(
        "CAP-2",
        "CAP-DECLARED",
        None,
        2,
        "name: w\nrequires: [wf.external-event-initiation]\non:\n  mail.received: {inbox: a@b.co}\n",
    ),
    Case(
        "CAP-2",
        "CAP-DECLARED",
        None,
        4,
        "name: w\non:\n  mail.received: {inbox: a@b.co}\ncapabilities: [wf.polling-initiation]\n",
    ),
    # document shape and YAML (not a numbered clause)
    Case("shape", "WF-NAME-MISSING", None, 1, "on:\n  mail.received: {inbox: a@b.co}\n"),
    Case("shape", "WF-NAME-INVALID", None, 1, "name: [a]\non:\n  mail.received: {inbox: a@b.co}\n"),
    Case("shape", "WF-STEP-ID-DUPLICATE", None, 6, "name: w\non:\n  http.request: {}\nsteps:\n  - id: a\n  - id: a\n"),
    Case("shape", "WF-STEP-ID-MISSING", None, 5, "name: w\non:\n  http.request: {}\nsteps:\n  - value: 1\n"),
    Case("shape", "WF-INPUT-NAME", None, 3, "name: w\ninputs:\n  bad-name: 1\non:\n  http.request: {}\n"),
    Case("shape", "WF-NOT-MAPPING", None, 1, "- name: w\n"),
    Case("shape", "YAML-DUPLICATE-KEY", None, 3, "name: w\non: {http.request: {}}\nname: v\n"),
    Case("shape", "YAML-SYNTAX", None, 3, "name: w\non: [\n"),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.clause}-{c.code}-{i}" for i, c in enumerate(CASES)])
def test_each_invalid_workfile_is_rejected_with_its_code_entry_and_line(case: Case, catalog: Catalog) -> None:
    result = load_workfile(case.text, catalog=catalog)
    assert result.status == "invalid"
    assert result.workfile is None
    found = only(result, case.code)
    assert (found.entry, found.line) == (case.entry, case.line), found
    if case.path is not None:
        assert found.path == case.path


def test_every_problem_of_a_file_is_reported_at_once(catalog: Catalog) -> None:
    text = (
        "name: w\n"
        "requires: [x]\n"
        "on:\n"
        "  - mail.received: {inbox: a@b.co, folder: x}\n"
        "    queue_by: '{{ message.thread_id }}'\n"
        "    batch: {size: 0}\n"
        "  - nope.event: {}\n"
        "    as: n\n"
    )
    codes = {d.code for d in load_workfile(text, catalog=catalog).diagnostics}
    assert codes >= {
        "CAP-DECLARED",
        "TRIG-AS-REQUIRED",
        "TRIG-CONFIG-UNKNOWN-KEY",
        "TRIG-BATCH-QUEUE-BY",
        "TRIG-BATCH-SIZE",
        "TRIG-UNKNOWN-CONNECTOR",
    }


def test_diagnostics_come_in_line_order(catalog: Catalog) -> None:
    text = "name: w\non:\n  - mail.received: {inbox: a@b.co}\n  - nope.event: {}\n    as: n\n"
    lines = [d.line or 0 for d in load_workfile(text, catalog=catalog).diagnostics]
    assert lines == sorted(lines) and len(lines) >= 2


# --------------------------------------------------------------------------- valid forms


def test_the_default_binding_is_the_manifests_binds_name(catalog: Catalog) -> None:
    # proves: TRIG-3, TRIG-7 (trigger.name is the `as` name, or the manifest default without one)
    text = "name: w\non:\n  mail.received: {inbox: a@b.co}\n  when: '{{ message.subject != \"\" }}'\n"
    wf = load_workfile(text, catalog=catalog).workfile
    assert wf is not None
    (entry,) = wf.entries
    assert (entry.as_name, entry.binding, entry.name) == (None, "message", "message")


def test_an_explicit_as_names_the_binding_and_trigger_name(catalog: Catalog) -> None:
    # proves: TRIG-3, TRIG-7
    text = "name: w\non:\n  - mail.received: {inbox: a@b.co}\n    as: mail\n  - http.request: {}\n    as: hook\n"
    wf = load_workfile(text, catalog=catalog).workfile
    assert wf is not None
    assert [(e.name, e.as_name, e.index) for e in wf.entries] == [("mail", "mail", 0), ("hook", "hook", 1)]
    assert wf.multi


def test_an_explicit_as_resolves_the_collision_with_a_step_id(catalog: Catalog) -> None:
    # proves: TRIG-5 (the explicit `as` is the one accepted resolution)
    text = "name: w\non:\n  mail.received: {inbox: a@b.co}\n  as: mail\nsteps:\n  - id: message\n"
    result = load_workfile(text, catalog=catalog)
    assert result.status == "valid", result.diagnostics


def test_a_missing_connection_is_left_to_the_deployment(catalog: Catalog) -> None:
    # proves: TRIG-6 (connection may be omitted; resolving it is a deployment concern)
    wf = load_workfile("name: w\non:\n  mail.received: {inbox: a@b.co}\n", catalog=catalog).workfile
    assert wf is not None and wf.entries[0].connection is None
    with_conn = load_workfile("name: w\non:\n  mail.received: {inbox: a@b.co, connection: acme}\n", catalog=catalog)
    assert with_conn.workfile is not None
    assert with_conn.workfile.entries[0].connection == "acme"
    assert "connection" not in with_conn.workfile.entries[0].config


def test_configuration_may_take_expressions_over_inputs_without_format_checks(catalog: Catalog) -> None:
    # proves: TRIG-2 (expression-valued configuration is checked for scope, not for format or type)
    text = (
        "name: w\ninputs:\n  inbox: a@b.co\n  limit: 10\non:\n  sql.row_inserted:\n"
        "    table: t\n    column: id\n    batch_limit: '{{ inputs.limit }}'\n"
    )
    assert load_workfile(text, catalog=catalog).status == "valid"
    mail = "name: w\ninputs:\n  inbox: a@b.co\non:\n  mail.received: {inbox: '{{ inputs.inbox }}'}\n"
    assert load_workfile(mail, catalog=catalog).status == "valid"


def test_guards_keys_and_batches_are_kept_in_the_model(catalog: Catalog) -> None:
    # proves: TRIG-8, TRIG-10, TRIG-15, TRIG-16 (validator side: parsed and kept per entry)
    text = (
        "name: w\ninputs: {vip: x}\non:\n  - mail.received: {inbox: a@b.co}\n    as: m\n"
        "    when: '{{ m.from == inputs.vip }}'\n    queue_by: '{{ m.thread_id }}'\n"
        "  - mail.received: {inbox: c@d.co}\n    as: n\n"
        "    batch: {size: 100, max_wait: 1m30s, partition_by: '{{ n.account_id }}'}\n"
    )
    wf = load_workfile(text, catalog=catalog).workfile
    assert wf is not None
    m, n = wf.entries
    assert (m.when, m.queue_by, m.batch) == ("{{ m.from == inputs.vip }}", "{{ m.thread_id }}", None)
    assert n.batch is not None
    assert (n.batch.size, n.batch.max_wait_seconds, n.batch.partition_by) == (100, 90.0, "{{ n.account_id }}")


def test_a_list_may_give_several_entries_a_queue_by(catalog: Catalog) -> None:
    # proves: TRIG-11 (validator side: queue_by is optional per entry, absent means no ordering key)
    # proves: TRIG-12 (validator side: entries of one list may each declare queue_by; runtime shares equal keys)
    text = (
        "name: w\non:\n  - mail.received: {inbox: a@b.co}\n    as: m\n    queue_by: '{{ m.thread_id }}'\n"
        "  - http.request: {}\n    as: h\n    queue_by: '{{ h.body.thread }}'\n  - http.request: {path: /x}\n    as: plain\n"
    )
    wf = load_workfile(text, catalog=catalog).workfile
    assert wf is not None
    assert [e.queue_by for e in wf.entries] == ["{{ m.thread_id }}", "{{ h.body.thread }}", None]


def test_into_projections_with_equal_shapes_are_accepted(catalog: Catalog) -> None:
    # proves: TRIG-19, TRIG-20
    text = (
        "name: w\non:\n  - rss.item_published: {feed: 'https://x.example/f'}\n    as: item\n"
        "    into: {post: {title: '{{ item.title }}', tags: ['{{ item.feed }}']}}\n"
        "  - sheet.row_added: {sheet: Cal}\n    as: row\n    into: {post: {title: '{{ row.title }}', tags: []}}\n"
    )
    wf = load_workfile(text, catalog=catalog).workfile
    assert wf is not None
    assert wf.entries[1].into == {"post": {"title": "{{ row.title }}", "tags": []}}


# --------------------------------------------------------------------------- manifests (CAP-5, CAP-6)


def _without_delivery_id() -> Manifest:
    base = Catalog.default(third_party=False).get("mail.received")
    assert base is not None
    # model_construct skips the contract check, as a hand-built or stale manifest object would
    return Manifest.model_construct(**{**base.model_dump(), "name": "acme.mail", "delivery_id": None})


def test_a_manifest_without_delivery_identity_makes_the_workfile_invalid() -> None:
    # proves: CAP-6 (missing delivery identity is an invalid dependency)
    catalog = Catalog([*Catalog.default(third_party=False)._by_name.values(), _without_delivery_id()])
    result = load_workfile("name: w\non:\n  acme.mail: {inbox: a@b.co}\n", catalog=catalog)
    found = only(result, "MANIFEST-INVALID")
    assert (found.entry, found.line, result.status) == ("acme.mail", 3, "invalid")
    assert "delivery_id" in found.message


def test_a_connector_whose_manifest_failed_to_load_is_named_as_invalid() -> None:
    # proves: CAP-6 (an invalid manifest is an invalid dependency, not an unknown name)
    catalog = Catalog([], broken={"acme.thing": "a external manifest must declare delivery_id"})
    result = load_workfile("name: w\non:\n  acme.thing: {}\n", catalog=catalog)
    assert only(result, "MANIFEST-INVALID").line == 3


def test_validation_ignores_target_support_until_claims_are_given(catalog: Catalog) -> None:
    # proves: CAP-5 (syntax and manifest contract first, without regard to target support)
    text = "name: w\non:\n  time.schedule: {cron: '0 9 * * *'}\n"
    assert load_workfile(text, catalog=catalog).status == "valid"
    assert load_workfile(text, catalog=catalog, claims=[]).status == "unsupported"
    broken = "name: w\non:\n  time.schedule: {cron: '0 9 * * *', every: 1}\n"
    assert load_workfile(broken, catalog=catalog, claims=[]).status == "invalid"


# --------------------------------------------------------------------------- capabilities


@pytest.mark.parametrize(
    ("connector", "config", "capability"),
    [
        ("time.schedule", "{cron: '0 9 * * *'}", "wf.scheduled-initiation"),
        ("http.request", "{}", "wf.external-event-initiation"),
        ("mail.received", "{inbox: a@b.co}", "wf.external-event-initiation"),
        ("workflow.completed", "{workflow: w}", "wf.external-event-initiation"),
        ("rss.item_published", "{feed: 'https://x.example/f'}", "wf.polling-initiation"),
        ("sheet.row_added", "{sheet: Cal}", "wf.polling-initiation"),
        ("sql.row_inserted", "{table: t, column: id}", "wf.polling-initiation"),
    ],
)
def test_each_entry_requires_the_capability_of_its_manifest_kind(
    connector: str, config: str, capability: str, catalog: Catalog
) -> None:
    # proves: CAP-1
    result = load_workfile(f"name: w\non:\n  {connector}: {config}\n", catalog=catalog)
    assert result.status == "valid", result.diagnostics
    assert result.required_capabilities == [capability]
    assert result.workfile is not None
    binding = result.workfile.entries[0].binding
    assert required_capabilities(result.workfile, catalog) == {capability: [binding]}


MIXED = (
    "name: w\non:\n"
    "  - time.schedule: {cron: '0 * * * *'}\n    as: tick\n"  # line 3
    "  - http.request: {}\n    as: hook\n"  # line 5
    "  - rss.item_published: {feed: 'https://x.example/f'}\n    as: feed\n"  # line 7
    "  - mail.received: {inbox: a@b.co}\n    as: mail\n"  # line 9
)


def test_a_multi_trigger_workflow_requires_the_union_of_its_entries(catalog: Catalog) -> None:
    # proves: CAP-3 (the union, even for an entry that rarely or never fires)
    result = load_workfile(MIXED, catalog=catalog)
    assert result.required_capabilities == [
        "wf.external-event-initiation",
        "wf.polling-initiation",
        "wf.scheduled-initiation",
    ]
    assert result.workfile is not None
    assert required_capabilities(result.workfile, catalog)["wf.external-event-initiation"] == ["hook", "mail"]


def test_batching_queueing_and_guards_do_not_change_the_required_capability(catalog: Catalog) -> None:
    # proves: CAP-4
    plain = load_workfile("name: w\non:\n  mail.received: {inbox: a@b.co}\n", catalog=catalog)
    dressed = load_workfile(
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  when: '{{ message.subject != \"\" }}'\n"
        "  batch: {size: 10, max_wait: 5s, partition_by: '{{ message.account_id }}'}\n",
        catalog=catalog,
    )
    queued = load_workfile(
        "name: w\non:\n  mail.received: {inbox: a@b.co}\n  queue_by: '{{ message.thread_id }}'\n", catalog=catalog
    )
    assert plain.required_capabilities == dressed.required_capabilities == queued.required_capabilities
    assert plain.required_capabilities == ["wf.external-event-initiation"]


def test_a_valid_workfile_lacking_a_claim_is_unsupported_and_names_each_capability_and_entry(catalog: Catalog) -> None:
    # proves: CAP-7, CAP-8
    result = load_workfile(MIXED, catalog=catalog, claims=["wf.polling-initiation"])
    assert result.status == "unsupported"
    assert result.workfile is not None  # the model is kept: it is valid, just not supported here
    found = {d.capability: d for d in result.diagnostics}
    assert set(found) == {"wf.external-event-initiation", "wf.scheduled-initiation"}
    assert all(d.code == "CAP-UNSUPPORTED" for d in result.diagnostics)
    external = found["wf.external-event-initiation"]
    assert (external.entry, external.path, external.line) == ("hook, mail", "on[1]", 5)
    assert "hook" in external.message and "mail" in external.message
    assert found["wf.scheduled-initiation"].entry == "tick"


def test_claiming_every_required_capability_makes_a_workfile_supported(catalog: Catalog) -> None:
    # proves: CAP-7
    claims = ["wf.scheduled-initiation", "wf.external-event-initiation", "wf.polling-initiation", "wf.other"]
    result = load_workfile(MIXED, catalog=catalog, claims=claims)
    assert (result.status, result.diagnostics) == ("valid", [])
    assert result.workfile is not None
    assert classify(result.workfile, catalog, claims) == []


def test_an_invalid_workfile_is_invalid_whatever_the_claims(catalog: Catalog) -> None:
    # proves: CAP-5, CAP-6 (an invalid combination of trigger keys is invalid, not unsupported)
    text = "name: w\non:\n  mail.received: {inbox: a@b.co}\n  queue_by: '{{ message.thread_id }}'\n  batch: {size: 2}\n"
    result = load_workfile(text, catalog=catalog, claims=[])
    assert result.status == "invalid"
    assert [d.code for d in result.diagnostics] == ["TRIG-BATCH-QUEUE-BY"]
