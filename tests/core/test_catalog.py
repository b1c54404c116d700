"""The connector catalog: built-in manifests are sound, broken ones are rejected, and third-party
connectors register through the `wf_initiation.connectors` entry-point group."""

from __future__ import annotations

import pathlib
import sys
import textwrap

import pytest

from wf_initiation.core import CAPABILITY_BY_KIND, Catalog, ManifestError, load_workfile, parse_manifest
from wf_initiation.core._catalog import ENTRY_POINT_GROUP, builtin_manifests, manifest_problems

REQUIRED = {
    "time.schedule": "schedule",
    "http.request": "external",
    "mail.received": "external",
    "rss.item_published": "poll",
    "sheet.row_added": "poll",
    "sql.row_inserted": "poll",
    "http_json.item_added": "poll",
    "workflow.started": "external",
    "workflow.completed": "external",
    "workflow.failed": "external",
}

PING = {
    "name": "acme.ping",
    "version": "0.1.0",
    "kind": "external",
    "binds": "ping",
    "input_schema": {"type": "object", "additionalProperties": False, "properties": {"host": {"type": "string"}}},
    "payload_schema": {"type": "object", "required": ["ping_id"], "properties": {"ping_id": {"type": "string"}}},
    "delivery_id": "ping_id",
}


def test_every_builtin_manifest_is_sound_and_the_required_ones_exist() -> None:
    manifests = {m.name: m for m in builtin_manifests() if m.via is None}
    assert {name: manifests[name].kind for name in REQUIRED} == REQUIRED
    alternatives = {(m.name, m.via): m.kind for m in builtin_manifests() if m.via is not None}
    assert alternatives == {("mail.received", "imap"): "poll"}
    for m in builtin_manifests():
        assert manifest_problems(m) == [], m.name
        assert m.capability == CAPABILITY_BY_KIND[m.kind]
        if m.kind == "schedule":
            assert m.delivery_id is None  # occurrence identity is the instant
        else:
            assert m.delivery_id and m.delivery_id_of({m.delivery_id: "d-1"}) == "d-1"
        if m.kind == "poll":
            assert m.stable_order is not None and m.implementation


def test_a_manifest_without_delivery_id_is_rejected() -> None:
    # proves: CAP-6 (missing delivery identity makes the dependency invalid)
    broken = {k: v for k, v in PING.items() if k != "delivery_id"}
    with pytest.raises(ManifestError, match="delivery_id"):
        parse_manifest(broken)


def test_a_delivery_id_that_is_not_a_required_payload_field_is_rejected() -> None:
    # proves: CAP-6 (invalid payload declaration)
    with pytest.raises(ManifestError, match="required property"):
        parse_manifest({**PING, "delivery_id": "missing"})


def test_an_unknown_kind_is_rejected() -> None:
    # proves: CAP-6 (unknown kind)
    with pytest.raises(ManifestError, match="kind"):
        parse_manifest({**PING, "kind": "stream"})


@pytest.fixture
def fake_distribution(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """An installed distribution on sys.path that registers one good and one broken connector."""
    module = "fake_acme_connectors"
    (tmp_path / f"{module}.py").write_text(
        f"PING = {PING!r}\nBROKEN = {{**PING, 'name': 'acme.broken', 'delivery_id': None}}\n"
    )
    dist = tmp_path / "fake_acme_connectors-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-acme-connectors\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        textwrap.dedent(
            f"""\
            [{ENTRY_POINT_GROUP}]
            acme.ping = {module}:PING
            acme.broken = {module}:BROKEN
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    return tmp_path


def test_a_connector_registered_through_an_entry_point_is_in_the_catalog(fake_distribution: pathlib.Path) -> None:
    catalog = Catalog.default()
    ping = catalog.get("acme.ping")
    assert ping is not None and ping.kind == "external"
    result = load_workfile("name: w\non:\n  acme.ping: {host: example.org}\n", catalog=catalog)
    assert (result.status, result.required_capabilities) == ("valid", ["wf.external-event-initiation"])
    assert Catalog.default(third_party=False).get("acme.ping") is None


def test_a_broken_entry_point_manifest_is_reported_not_raised(fake_distribution: pathlib.Path) -> None:
    # proves: CAP-6 (an entry-point manifest without delivery_id is an invalid dependency)
    catalog = Catalog.default()
    assert catalog.get("acme.broken") is None
    assert "delivery_id" in catalog.broken["acme.broken"]
    result = load_workfile("name: w\non:\n  acme.broken: {}\n", catalog=catalog)
    (found,) = result.diagnostics
    assert (found.code, found.entry, found.line) == ("MANIFEST-INVALID", "acme.broken", 3)


def test_an_unknown_connector_lists_the_catalog() -> None:
    # proves: TRIG-1 (the trigger must come from the catalog)
    result = load_workfile(
        "name: w\non:\n  mail.recieved: {inbox: a@b.co}\n", catalog=Catalog.default(third_party=False)
    )
    (found,) = result.diagnostics
    assert found.code == "TRIG-UNKNOWN-CONNECTOR" and "mail.received" in found.message


def test_the_shipped_manifests_are_read_once_per_process_and_each_caller_gets_its_own_list(
        monkeypatch: pytest.MonkeyPatch) -> None:
    first = builtin_manifests()
    first.clear()  # a caller's list is its own

    def parse_again(data: object) -> None:
        raise AssertionError("the shipped manifests were read and checked again")

    monkeypatch.setattr("wf_initiation.core._catalog.parse_manifest", parse_again)
    again = builtin_manifests()
    assert {m.name for m in again} >= set(REQUIRED)
    assert Catalog.default(third_party=False).get("http.request") is not None
