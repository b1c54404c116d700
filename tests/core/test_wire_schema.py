"""The wire contract as data (wf_initiation/wire/schema.py, docs/wire.md): versioned, and true to its page."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from tests.support.paths import ROOT
from wf_initiation.cli import main
from wf_initiation.wire import schema

WIRE_MD = ROOT / "docs" / "wire.md"
EXAMPLE = re.compile(r"```json wire:(?P<handler>[\w.]+):(?P<part>\w+)\n(?P<body>.*?)```", re.S)


def test_a_change_of_shape_needs_a_new_contract_version() -> None:
    digest = schema.shape_digest()
    assert schema.SHAPES.get(schema.WIRE_VERSION) == digest, (
        f"the wire contract's shapes changed (digest {digest}) but WIRE_VERSION is still {schema.WIRE_VERSION}: "
        f"set WIRE_VERSION to {schema.WIRE_VERSION + 1}, add {{{schema.WIRE_VERSION + 1}: {digest!r}}} to SHAPES "
        "and a line to docs/wire.md's version list (a new version is for every sender in every language)")
    listed = re.findall(r"^\| (\d+) \|", WIRE_MD.read_text(), re.M)
    assert str(schema.WIRE_VERSION) in listed, "docs/wire.md's version list has no line for the current version"


def test_prose_is_not_shape() -> None:
    document = schema.contract()
    reworded = json.loads(json.dumps(document).replace('"description": "', '"description": "Reworded. '))
    assert schema.shape_digest(reworded) == schema.shape_digest(document)
    reshaped = json.loads(json.dumps(document))
    reshaped["handlers"]["deliver"]["args"][0]["schema"]["required"] = ["entry", "payload"]
    assert schema.shape_digest(reshaped) != schema.shape_digest(document)


def test_every_example_of_the_page_validates_against_its_schema() -> None:
    examples = list(EXAMPLE.finditer(WIRE_MD.read_text()))
    assert len(examples) >= 7
    for found in examples:
        handler = schema.handler_schema(schema.find(found["handler"]))
        if found["part"] == "result":
            target = handler["result"]
        else:
            target = next(arg["schema"] for arg in handler["args"] if arg["name"] == found["part"])
        jsonschema.validate(json.loads(found["body"]), target)


def test_an_example_of_a_wrong_shape_is_refused_by_the_schema() -> None:
    deliver = schema.handler_schema(schema.find("deliver"))["args"][0]["schema"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"entry": "hooks"}, deliver)  # no payload


def test_every_handler_of_the_activation_is_in_the_contract() -> None:
    from wf_initiation.wire import names

    public = {names.DELIVER_UPDATE, names.DELIVER_MANY_UPDATE, names.DELIVER_SIGNAL, names.DELIVERY_QUERY,
              names.OPERATE_UPDATE, names.DEACTIVATE_UPDATE, names.ACTIVATE_UPDATE, names.STATE_QUERY,
              names.SUMMARY_QUERY, names.EVENTS_QUERY, names.ROUTING_QUERY}
    assert public <= {h.name for h in schema.HANDLERS}
    page = WIRE_MD.read_text()
    assert all(f"`{name}`" in page for name in public)


def test_wfi_wire_schema_prints_the_contract_and_one_handler(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["wire", "schema"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["version"] == schema.WIRE_VERSION and "deliver_signal" in document["handlers"]
    assert main(["wire", "schema", "delivery"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["kind"] == "query" and [a["name"] for a in one["args"]] == ["entry", "delivery_id"]
    assert main(["wire", "schema", "nope"]) == 2
    assert "no handler 'nope'" in capsys.readouterr().err
