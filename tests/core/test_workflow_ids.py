"""The activation workflow id format is the wire's (``wf_initiation.wire``); the engine, below the
wire, addresses its sibling shards in the same format, and this pins the two equal (issue 33 item 2)."""

from __future__ import annotations

import pytest

from wf_initiation import wire
from wf_initiation.core.engine import _lanes


@pytest.mark.parametrize(("workflow", "shard"), [("orders", 0), ("orders", 1), ("a:b#c", 7), ("é", 255)])
def test_the_engine_names_a_shard_as_the_wire_does(workflow: str, shard: int) -> None:
    assert _lanes.shard_workflow(workflow, shard) == wire.shard_workflow_id(workflow, shard)


def test_shard_zero_is_the_id_every_sender_knows_and_shard_k_appends_its_number() -> None:
    assert wire.shard_workflow_id("orders", 0) == wire.workflow_id_for("orders") == "wfi-activation:orders"
    assert wire.shard_workflow_id("orders", 3) == "wfi-activation:orders#3"
