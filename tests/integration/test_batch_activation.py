"""Batches in a real activation on the time-skipping server: closed by size and by `max_wait`, across
a worker SIGKILL and across a continue-as-new while a batch is open; each batch run's payload list
is checked against what was delivered.

Time skipping only advances while this client awaits a workflow result or calls ``ts_env.sleep``,
so a batch deadline of an hour passes in well under a second, and never before the test asks.

Two batch deadlines a few milliseconds apart make the time-skipping server refuse the activation's
workflow-task completion ("invalid history builder state for action": a timer of a few ms started
right after the previous one fired) and the second batch never starts there; the dev server is not
affected. The tests keep concurrent deadlines minutes apart.
"""

from __future__ import annotations

import pathlib
from datetime import datetime, timedelta
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from tests.support.activation import make_spec, unique
from tests.support.waits import assert_eventually
from tests.support.worker_proc import WorkerProcess
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import Disposition
from wf_initiation.wire import workflow_id_for

WAIT = timedelta(hours=1)
APART = timedelta(minutes=10)

BATCHED = """
name: {name}
on:
  http.request: {{path: /orders}}
  as: order
  batch: {{size: {size}, max_wait: 1h, partition_by: "{{{{ order.body.account }}}}"}}
"""


def order(ident: str, account: str = "acme", **body: Any) -> dict[str, Any]:
    return {"delivery_id": ident, "method": "POST", "body": {"account": account, **body}}


@pytest.fixture
def wfi(ts_wfi: WfiClient) -> WfiClient:
    """This module's activations run on the test's time-skipping server."""
    return ts_wfi


async def batch_result(client: Client, run_key: str) -> dict[str, Any]:
    """The batch run's result; awaiting it lets the server skip time up to the run's start."""

    async def started() -> dict[str, Any]:
        try:
            return await client.get_workflow_handle(run_key).result()
        except RPCError as exc:
            raise AssertionError(f"batch run {run_key} not started yet: {exc}") from exc

    return await assert_eventually(started)


def delivered_ids(result: dict[str, Any]) -> list[str]:
    payloads = result["input"]["bindings"]["order"]
    assert [p["delivery_id"] for p in payloads] == result["input"]["initiation"]["delivery_ids"]
    return [p["delivery_id"] for p in payloads]


def waited(result: dict[str, Any]) -> timedelta:
    """How long after the first event's acceptance the batch run began."""
    started = datetime.fromisoformat(result["started_at"])
    return started - datetime.fromisoformat(result["input"]["initiation"]["accepted_at"])


async def test_batches_close_by_size_at_once_and_by_max_wait_never_earlier(
    wfi: WfiClient, ts_env: WorkflowEnvironment, ts_activate, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: BATCH-1, BATCH-2, BATCH-3, BATCH-4, TRIG-15, TRIG-16, EXT-6, EXT-11
    name = unique("orders")
    await ts_activate(make_spec(tmp_path, BATCHED.format(name=name, size=3), task_queue=task_queue))
    results = [await wfi.deliver(name, order(f"o{i}", account="acme" if i != 2 else "umbrella")) for i in range(4)]
    # Ten minutes apart, the two open batches' deadlines need separate timers (see the module docstring).
    await ts_env.sleep(APART)
    results += [await wfi.deliver(name, order(f"o{i}")) for i in range(4, 6)]
    assert {r.disposition for r in results} == {Disposition.BATCHED}
    acme = [r.run_key for r in results if r.delivery_id != "o2"]
    assert acme[:3] == [acme[0]] * 3 and acme[3:] == [acme[3]] * 2 and acme[0] != acme[3]

    full = await batch_result(ts_env.client, acme[0])
    assert delivered_ids(full) == ["o0", "o1", "o3"], "size 3 closes the batch; one partition; acceptance order"
    assert waited(full) < WAIT, "closed by size, not by max_wait"
    summary = await wfi.summary(name)
    assert sorted(b["events"] for b in summary["batches"]) == [1, 2], "the other batches stay open"

    await ts_env.sleep(WAIT + timedelta(seconds=1))
    other = await batch_result(ts_env.client, results[2].run_key)
    await ts_env.sleep(APART)
    rest = await batch_result(ts_env.client, acme[3])
    assert delivered_ids(rest) == ["o4", "o5"] and delivered_ids(other) == ["o2"]
    assert waited(rest) >= WAIT and waited(other) >= WAIT, "BATCH-3: never before max_wait"
    again = await wfi.deliver(name, order("o4"), update_id="resend-o4")
    assert (again.disposition, again.run_key) == (Disposition.DUPLICATE, acme[3]), "EXT-6: the batch's run"
    assert (await wfi.summary(name))["counters"]["batches_closed"] == 3


async def test_an_open_batch_and_its_deadline_survive_a_worker_sigkill(
    ts_env: WorkflowEnvironment, ts_activate, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: POLL-13, BATCH-3, BATCH-4, INIT-7
    name = unique("killed")
    address = ts_env.client.service_client.config.target_host
    wfi = WfiClient(ts_env.client, task_queue=task_queue)
    # No workflow cache: the time-skipping server never moves a task off a dead worker's sticky queue,
    # and replaying the whole history on every task is the stronger determinism check anyway.
    async with WorkerProcess(address, task_queue, max_cached_workflows=0) as proc:
        await ts_activate(make_spec(tmp_path, BATCHED.format(name=name, size=10), task_queue=task_queue))
        first = [await wfi.deliver(name, order(f"k{i}")) for i in range(3)]
        proc.kill()
        proc.start()
        later = [await wfi.deliver(name, order(f"k{i}")) for i in range(3, 5)]
        assert {r.run_key for r in first + later} == {first[0].run_key}
        assert (await wfi.summary(name))["batches"][0]["events"] == 5
        proc.kill()
        proc.start()
        await ts_env.sleep(WAIT + timedelta(seconds=1))
        result = await batch_result(ts_env.client, first[0].run_key)
    assert delivered_ids(result) == ["k0", "k1", "k2", "k3", "k4"]
    assert waited(result) >= WAIT


async def test_an_open_batch_and_its_deadline_survive_continue_as_new(
    wfi: WfiClient, ts_env: WorkflowEnvironment, ts_activate, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: POLL-13, BATCH-3, BATCH-4, INIT-7, EXT-11
    name = unique("carried")
    spec = make_spec(tmp_path, BATCHED.format(name=name, size=100), task_queue=task_queue, max_history_events=200)
    await ts_activate(spec)
    handle = ts_env.client.get_workflow_handle(workflow_id_for(name))
    first_run = (await handle.describe()).run_id
    ids = []
    for i in range(60):
        ids.append(f"c{i:02d}")
        result = await wfi.deliver(name, order(ids[-1]))
        assert result.disposition == Disposition.BATCHED

    async def continued() -> None:
        assert (await handle.describe()).run_id != first_run, "no continue-as-new yet"

    await assert_eventually(continued)
    summary = await wfi.summary(name)
    assert [b["events"] for b in summary["batches"]] == [60], "the open batch was carried"
    await ts_env.sleep(WAIT + timedelta(seconds=1))
    batch = await batch_result(ts_env.client, result.run_key)
    assert delivered_ids(batch) == ids
    assert waited(batch) >= WAIT
