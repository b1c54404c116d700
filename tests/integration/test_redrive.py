"""Re-drive against a real activation (issue 36 item 3): an event that did not run is kept, its cause
is fixed, and an operator offers it again; it runs once, keeps its original delivery id, and a second
re-drive of it is refused.

Each cause is fixed the way an operator would: an invalid delivery and a quarantined poll item by a
connector version whose schema takes them (a new binding), a start fault by a worker that can start
the run again, a deferred signal by room in the activation again. Each test ends with a normal
delivery accepted and its run started. The pure engine's side: tests/core/test_redrive_engine.py.
"""

from __future__ import annotations

import json
import pathlib
import sqlite3
import textwrap
import uuid
from typing import Any

import pytest
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from tests.support.activation import unique
from tests.support.cli import MAIL_WORKFILE, Pair, mail
from tests.support.cli import wfi as cli
from tests.support.hostile import HOOK, histories, hook, run_started, still_serves
from tests.support.replay import assert_replays
from tests.support.waits import assert_eventually
from wf_initiation.activities.runs import RunActivities, StartedRun, StartRunsRequest
from wf_initiation.client import WfiClient, build_spec
from wf_initiation.core._catalog import Catalog, Manifest, parse_manifest
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.deployment import parse_deployment
from wf_initiation.core.engine import _intake
from wf_initiation.core.limits import CAPACITY_BYTES, STATE_BASE_BYTES
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import Redrive, workflow_id_for

FAST_POLL = {"interval": "200ms", "backoff_initial": "200ms", "backoff_max": "1s", "limit": 50}


def spec_with(tmp_path: pathlib.Path, workfile: str, catalog: Catalog, task_queue: str, **settings: Any) -> ActivationSpec:
    """The activation spec of ``workfile`` resolved against ``catalog`` (the connector versions installed)."""
    path = tmp_path / f"{uuid.uuid4().hex[:6]}.workfile.yaml"
    path.write_text(textwrap.dedent(workfile))
    name = next(line.split(":", 1)[1].strip() for line in path.read_text().splitlines() if line.startswith("name:"))
    deployment = parse_deployment({"temporal": {"task_queue": task_queue}, "connections": settings.pop("connections", {}),
                                   "workflows": {name: {"run": {"workflow_type": "wfi.EchoRun", "task_queue": task_queue},
                                                        **settings}}}, base_dir=str(tmp_path))
    return build_spec(path, deployment, catalog)


def builtins(*replaced: Manifest) -> Catalog:
    names = {m.name for m in replaced}
    return Catalog([*(m for m in Catalog.default(third_party=False).manifests() if m.name not in names), *replaced])


def orders(version: str, amount: dict[str, Any]) -> Manifest:
    """``acme.order_placed``, a third-party webhook connector, at one of its versions."""
    return parse_manifest({
        "name": "acme.order_placed", "version": version, "kind": "external", "binds": "order",
        "input_schema": {"type": "object", "additionalProperties": False, "properties": {"connection": {"type": "string"}}},
        "payload_schema": {"type": "object", "required": ["order_id", "amount"],
                           "properties": {"order_id": {"type": "string", "minLength": 1}, "amount": amount}},
        "delivery_id": "order_id",
    })


CENTS_ONLY = orders("1.0.0", {"type": "integer"})
DECIMALS_TOO = orders("1.1.0", {"type": ["integer", "string"], "pattern": "^[0-9]+([.][0-9]{2})?$"})
ORDERS = "name: {name}\non:\n  acme.order_placed: {{}}\n  as: order\n"


async def test_an_invalid_delivery_is_redriven_once_its_connector_takes_it_and_runs_once(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-3, EXT-9, EXT-10, INIT-5
    client = dev_env.client
    name = unique("redrive-inv")
    await wfi.activate(spec_with(tmp_path, ORDERS.format(name=name), builtins(CENTS_ONLY), task_queue))
    bad = await wfi.deliver(name, {"order_id": "o-1", "amount": "12.50"})
    assert bad.disposition.value == "invalid" and "amount" in (bad.message or ""), bad
    [listed] = [e async for e in wfi.redrivable(name)]
    assert (listed["kind"], listed["entry"], listed["delivery_id"], listed["shard"]) == ("invalid", "order", "o-1", 0)
    assert listed["kept_until"] and "payload" not in listed, listed

    fixed = await wfi.activate(spec_with(tmp_path, ORDERS.format(name=name), builtins(DECIMALS_TOO), task_queue))
    assert fixed.outcome == "rebound", fixed
    result = await wfi.redrive(name, Redrive(delivery_id="o-1", action_id="fix-amounts", note="connector 1.1 takes decimals"))
    assert result.ok and result.action_id == "fix-amounts", result
    [event] = result.redriven or []
    assert (event.kind, event.delivery_id, event.outcome) == ("invalid", "o-1", "accepted"), event
    await run_started(client, event.run_key)
    record = await wfi.delivery(name, "order", "o-1")
    page = f"fix-amounts#{listed['number']}-{listed['number']}"  # the action id of the one page it took
    assert record is not None and (record["delivery_id"], record["redriven_by"]) == ("o-1", page), record
    state = await wfi.state(name)
    assert [(a["action"], a["action_id"]) for a in state["operator_log"]] == [("redrive", page)]

    again = await wfi.redrive(name, Redrive(delivery_id="o-1"))
    assert not again.ok and f"re-driven already, by operator action '{page}': accepted" in again.message, again
    assert [e async for e in wfi.redrivable(name)] == []
    redelivered = await wfi.deliver(name, {"order_id": "o-1", "amount": "12.50"}, update_id="sent-again")
    assert redelivered.disposition.value == "duplicate", "one run for the event (EXT-3)"
    normal = await wfi.deliver(name, {"order_id": "o-2", "amount": "7.00"})
    assert normal.disposition.value == "accepted", normal
    await run_started(client, normal.run_key)
    await assert_replays(client, workflow_id_for(name))


async def _until_continued_as_new(wfi: WfiClient, client: Any, name: str) -> None:
    """Unrelated traffic (a known id, answered duplicate) until the activation has continued as new."""
    runs = len(await histories(client, name))
    for i in range(400):
        await wfi.deliver(name, {"order_id": "known", "amount": 1}, update_id=f"again-{uuid.uuid4().hex}")
        if i % 20 == 19 and len(await histories(client, name)) > runs:
            return
    raise AssertionError("the activation did not continue as new")


async def test_a_kept_event_and_the_action_that_redrove_it_are_carried_across_continue_as_new(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: INIT-7, EXT-3
    client = dev_env.client
    name = unique("redrive-can")
    workfile = ORDERS.format(name=name)
    await wfi.activate(spec_with(tmp_path, workfile, builtins(CENTS_ONLY), task_queue, max_history_events=200))
    assert (await wfi.deliver(name, {"order_id": "known", "amount": 1})).disposition.value == "accepted"
    assert (await wfi.deliver(name, {"order_id": "o-1", "amount": "3.10"})).disposition.value == "invalid"
    await _until_continued_as_new(wfi, client, name)
    [kept] = [e async for e in wfi.redrivable(name)]  # carried by the new run
    assert (kept["kind"], kept["delivery_id"]) == ("invalid", "o-1"), kept

    await wfi.activate(spec_with(tmp_path, workfile, builtins(DECIMALS_TOO), task_queue, max_history_events=200))
    result = await wfi.redrive(name, Redrive(delivery_id="o-1", action_id="after-can"))
    [event] = result.redriven or []
    assert event.outcome == "accepted", result
    await run_started(client, event.run_key)
    await _until_continued_as_new(wfi, client, name)
    # The same action sent again (a retry from a plain client, after continue-as-new: Temporal's own
    # update-id dedup no longer holds): applied once, by its action id in the carried state.
    page = Redrive(delivery_id="o-1", first=kept["number"], last=kept["number"],
                   action_id=f"after-can#{kept['number']}-{kept['number']}")
    repeat = await client.get_workflow_handle(workflow_id_for(name)).execute_update(
        "operate", page, id=uuid.uuid4().hex, result_type=dict)
    assert (repeat["ok"], repeat["message"]) == (True, "already applied"), repeat
    normal = await wfi.deliver(name, {"order_id": "o-2", "amount": 200})
    assert normal.disposition.value == "accepted", normal
    await run_started(client, normal.run_key)
    await assert_replays(client, workflow_id_for(name))


async def test_a_sharded_activation_redrives_every_shards_kept_events_in_one_call(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-3, EXT-10
    client = dev_env.client
    name = unique("redrive-shards")
    workfile = ORDERS.format(name=name)
    await wfi.activate(spec_with(tmp_path, workfile, builtins(CENTS_ONLY), task_queue, scale={"shards": 2}))
    for i in range(8):
        assert (await wfi.deliver(name, {"order_id": f"o-{i}", "amount": f"{i}.50"})).disposition.value == "invalid"
    listed = [e async for e in wfi.redrivable(name)]
    assert sorted(e["delivery_id"] for e in listed) == [f"o-{i}" for i in range(8)]
    assert {e["shard"] for e in listed} == {0, 1}, "each shard keeps the events it was sent"
    assert (await wfi.summary(name))["redrive"]["kept"] == 8

    await wfi.activate(spec_with(tmp_path, workfile, builtins(DECIMALS_TOO), task_queue, scale={"shards": 2}))
    result = await wfi.redrive(name, Redrive(all_events=True, action_id="fix-all"))
    assert result.ok and result.message.startswith("re-drive in 2 actions"), result
    assert sorted((e.delivery_id, e.outcome) for e in result.redriven or []) == [(f"o-{i}", "accepted") for i in range(8)]
    for event in result.redriven or []:
        await run_started(client, event.run_key)
    again = await wfi.redrive(name, Redrive(delivery_id="o-3"))  # asked of the shard its id belongs to
    assert not again.ok and "re-driven already, by operator action 'fix-all#" in again.message, again
    normal = await wfi.deliver(name, {"order_id": "o-9", "amount": "1.00"})
    assert normal.disposition.value == "accepted", normal
    await run_started(client, normal.run_key)


SQL_WORKFILE = "name: {name}\non:\n  sql.row_inserted: {{table: items, column: seq, id_column: item_id}}\n  as: row\n"


def sql_version(version: str, kinds: list[str] | None) -> Manifest:
    """``sql.row_inserted`` as an older release had it: rows of the listed kinds only."""
    shipped = Catalog.default(third_party=False).get("sql.row_inserted")
    assert shipped is not None
    schema = json.loads(json.dumps(shipped.payload_schema))
    if kinds is not None:
        schema["properties"]["row"] = {"type": "object", "properties": {"kind": {"enum": kinds}}}
    return parse_manifest({**shipped.model_dump(), "version": version, "payload_schema": schema})


def insert(db: pathlib.Path, *rows: tuple[str, str]) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS items (seq INTEGER PRIMARY KEY AUTOINCREMENT, item_id TEXT, kind TEXT)")
        conn.executemany("INSERT INTO items (item_id, kind) VALUES (?, ?)", rows)


async def test_a_quarantined_poll_item_is_redriven_once_its_connector_takes_it_and_runs_once(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: POLL-11, POLL-5, EXT-3
    client = dev_env.client
    db = tmp_path / "orders.db"
    insert(db, ("a", "plain"), ("b", "rush"), ("c", "plain"))
    name = unique("redrive-poll")
    settings: dict[str, Any] = {"connections": {"db": {"connector": "sql", "sqlite": str(db)}}, "poll": FAST_POLL}
    await wfi.activate(spec_with(tmp_path, SQL_WORKFILE.format(name=name), builtins(sql_version("0.9.0", ["plain"])),
                                 task_queue, **settings))

    async def quarantined() -> dict[str, Any]:
        state = await wfi.state(name)
        assert state["polls"]["row"]["cursor"] == "3" and state["error_counts"].get("quarantined") == 1, state["polls"]
        [kept] = [e async for e in wfi.redrivable(name)]
        return kept

    kept = await assert_eventually(quarantined, timeout=60)
    assert (kept["kind"], kept["entry"], kept["delivery_id"]) == ("quarantined", "row", "b"), kept
    assert await wfi.delivery(name, "row", "b") is None, "a quarantined item leaves its id unconsumed (EXT-10)"

    await wfi.activate(spec_with(tmp_path, SQL_WORKFILE.format(name=name), builtins(), task_queue, **settings))
    result = await wfi.redrive(name, Redrive(kind="quarantined", action_id="rush-orders"))
    [event] = result.redriven or []
    assert result.ok and (event.delivery_id, event.outcome) == ("b", "accepted"), result
    await run_started(client, event.run_key)
    assert (await wfi.state(name))["polls"]["row"]["cursor"] == "3", "the cursor stays where it was"
    again = await wfi.redrive(name, Redrive(entry="row", delivery_id="b"))
    assert not again.ok and "re-driven already" in again.message, again

    insert(db, ("d", "rush"))  # a normal item, polled and run under the connector that takes it

    async def polled() -> str:
        record = await wfi.delivery(name, "row", "d")
        assert record is not None and record["disposition"] == "accepted", record
        return record["run_key"]

    await run_started(client, await assert_eventually(polled, timeout=60))
    assert (await wfi.delivery(name, "row", "b"))["redriven_by"] == f"rush-orders#{kept['number']}-{kept['number']}"
    await assert_replays(client, workflow_id_for(name))


class Switch:
    """What the test fixes: while ``broken``, a start of a run whose key holds ``poison`` fails for good."""

    broken = True


class BrokenStarts(RunActivities):
    """Our start activity with an injected cause: the run's start request cannot be decoded (as on a
    worker without the team's codec) until the switch is fixed."""

    def __init__(self, client: Any, switch: Switch) -> None:
        super().__init__(client)
        self._switch = switch

    @activity.defn(name="wfi.start_runs")
    async def start_runs(self, req: StartRunsRequest) -> list[StartedRun]:
        if self._switch.broken and any("poison" in r.run_key for r in req.runs):
            raise ApplicationError("Failed decoding arguments (injected by the test)", non_retryable=True)
        return await super().start_runs(req)


class BrokenStartsPlugin(WfiPlugin):
    def __init__(self, switch: Switch) -> None:
        super().__init__(sample_runs=True)
        self._switch = switch

    def configure_worker(self, config):  # type: ignore[no-untyped-def]
        config = super().configure_worker(config)
        kept = [a for a in config["activities"] if getattr(a, "__name__", "") != "start_runs"]
        config["activities"] = [*kept, BrokenStarts(config["client"], self._switch).start_runs]
        return config


async def test_a_start_fault_is_started_again_once_its_cause_is_fixed_and_runs_once(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-3, EXT-8, INIT-7
    client = dev_env.client
    switch = Switch()
    async with Worker(client, task_queue=task_queue, plugins=[BrokenStartsPlugin(switch)]):
        wfi = WfiClient(client, task_queue=task_queue)
        name = unique("redrive-start")
        await wfi.activate(spec_with(tmp_path, HOOK.format(name=name, extra=""), Catalog.default(), task_queue))
        accepted = await wfi.deliver(name, hook("poison-1"))
        assert accepted.disposition.value == "accepted", accepted

        async def faulted() -> dict[str, Any]:
            record = await wfi.delivery(name, "hook", "poison-1")
            assert record is not None and record["disposition"] == "start_fault", record
            [kept] = [e async for e in wfi.redrivable(name)]
            return kept

        kept = await assert_eventually(faulted, timeout=90)
        assert (kept["kind"], kept["run_key"], kept["delivery_id"]) == ("start_fault", accepted.run_key, "poison-1")

        switch.broken = False  # the worker can start it now
        result = await wfi.redrive(name, Redrive(kind="start_fault"))
        [event] = result.redriven or []
        assert result.ok and (event.outcome, event.run_key) == ("accepted", accepted.run_key), result
        await run_started(client, accepted.run_key)

        record = await wfi.delivery(name, "hook", "poison-1")
        assert record is not None and record["disposition"] == "accepted", record
        assert record["redriven_by"] == f"{result.action_id}#{kept['number']}-{kept['number']}", record
        again = await wfi.redrive(name, Redrive(delivery_id="poison-1"))
        assert not again.ok and "re-driven already" in again.message, again
        await still_serves(wfi, client, name)
        await assert_replays(client, workflow_id_for(name))


async def test_wfi_operate_redrive_delivers_a_deferred_signal_again_and_refuses_it_a_second_time(
    worker, dev_env, task_queue: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: EXT-8, EXT-3
    name = unique("redrive-sig")
    pair = Pair(name, tmp_path / f"{name}.yaml", tmp_path / "deployment.yaml")
    pair.workfile.write_text(MAIL_WORKFILE.format(name=name))
    pair.write_deployment(dev_env.client.service_client.config.target_host, task_queue)
    dep = pair.target
    assert (await cli("activate", str(pair.workfile), "--deployment", str(pair.deployment))).code == 0
    monkeypatch.setattr(_intake, "CAPACITY_BYTES", STATE_BASE_BYTES)  # the in-process worker has no room for new ids
    assert (await cli("deliver", *dep, "--signal", "--payload", mail("m1"))).code == 0

    async def listed() -> list[dict[str, Any]]:
        out = await cli("state", *dep, "--redrivable", "--json")
        assert out.code == 0 and [(e["kind"], e["delivery_id"]) for e in out.json()] == [("deferred_signal", "m1")], out
        return out.json()

    [kept] = await assert_eventually(listed, timeout=60)
    shown = await cli("state", *dep, "--redrivable")
    assert f"#{kept['number']} deferred_signal message/m1" in shown.stdout, shown.stdout
    monkeypatch.setattr(_intake, "CAPACITY_BYTES", CAPACITY_BYTES)  # room again

    nothing = await cli("operate", *dep, "redrive")
    assert nothing.code == 2 and "name the events to re-drive" in nothing.stderr, nothing
    out = await cli("operate", *dep, "redrive", "--delivery-id", "m1", "--action-id", "ops-1", "--note", "room again")
    assert out.code == 0 and f"#{kept['number']} deferred_signal message/m1: accepted  run=" in out.stdout, out
    again = await cli("operate", *dep, "redrive", "--delivery-id", "m1", "--json")
    assert again.code == 1 and "re-driven already, by operator action 'ops-1#" in again.json()["message"], again
    alias = await cli("deliver", *dep, "--redrive", "m1")
    assert alias.code == 1 and "lists no deferred signal" in alias.stderr, alias
    normal = await cli("deliver", *dep, "--payload", mail("m2", thread="t2"), "--json")
    assert normal.code == 0 and normal.json()["disposition"] == "accepted", normal
    await run_started(dev_env.client, normal.json()["run_key"])
