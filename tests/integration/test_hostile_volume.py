"""Payload volume against a real activation (issue 11 item 2): a batch of 20 x 150 KB events and 15
concurrent 200 KB signals used to make one workflow task's commands exceed Temporal's payload limit
on every retry. Now no start activity carries more than MAX_START_BYTES, no task schedules more than
MAX_TASK_BYTES, and a batch closes early at MAX_BATCH_BYTES. Each test ends with a normal delivery
accepted and its run started."""

from __future__ import annotations

import asyncio
import json
import pathlib

import pytest

from tests.support.activation import make_spec, unique
from tests.support.hostile import (
    HOOK,
    assert_budgets_kept,
    errors_of,
    histories,
    hook,
    plain_signal,
    run_started,
    scheduled_bytes_per_task,
    still_serves,
    task_failures,
)
from tests.support.replay import assert_replays
from tests.support.waits import assert_eventually
from wf_initiation.client import DeliveryTooLarge, WfiClient
from wf_initiation.core.limits import (
    DELIVERIES_PER_TASK,
    MAX_BATCH_BYTES,
    MAX_BULK,
    MAX_DELIVERY_BYTES,
    json_size,
)
from wf_initiation.wire import WAIT_ACTIVITY, workflow_id_for

KB = 1000
BATCHED = """
name: {name}
on:
  - http.request: {{path: /mails}}
    as: mails
    batch: {{size: 20, max_wait: 2s}}
  - http.request: {{path: /hooks}}
    as: hook
"""


async def test_a_batch_of_twenty_150kb_events_closes_early_by_bytes_and_every_event_gets_its_run(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: BATCH-2, BATCH-4, EXT-6, INIT-7
    client = dev_env.client
    name = unique("batched")
    await wfi.activate(make_spec(tmp_path, BATCHED.format(name=name), task_queue=task_queue))
    body = "m" * (150 * KB)
    for i in range(20):
        result = await wfi.deliver(name, hook(f"mail-{i}", text=body), entry="mails")
        assert result.disposition.value == "batched", result

    async def every_event_has_a_started_run() -> set[str]:
        state = await wfi.state(name, include_events=True)
        keys = {state["events"][f"mails\x1fmail-{i}"]["run_key"] for i in range(20)}
        assert state["summary"]["open_batches"] == 0 and state["summary"]["runs_starting"] == 0, state["summary"]
        return keys

    run_keys = await assert_eventually(every_event_has_a_started_run, timeout=90)
    assert len(run_keys) >= 6, "20 x 150 KB cannot be one run: the batches closed at the byte budget"
    for key in run_keys:
        await run_started(client, key)
        payloads = (await client.get_workflow_handle(key).result())["input"]["bindings"]["mails"]
        assert json_size(payloads) <= MAX_BATCH_BYTES
    assert await task_failures(client, name, slow_retried=True) == []
    assert_budgets_kept(await scheduled_bytes_per_task(client, name))
    await still_serves(wfi, client, name, entry="hook")


async def test_fifteen_concurrent_200kb_signals_all_start_their_runs_within_the_task_budgets(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-8, INIT-7
    client = dev_env.client
    name = unique("volume")
    await wfi.activate(make_spec(tmp_path, HOOK.format(name=name, extra=""), task_queue=task_queue))
    body = "s" * (200 * KB)
    await asyncio.gather(*(wfi.signal_delivery(name, hook(f"sig-{i}", text=body)) for i in range(15)))

    async def all_accepted() -> list[str]:
        state = await wfi.state(name, include_events=True)
        found = [state["events"].get(f"hook\x1fsig-{i}") for i in range(15)]
        assert all(e is not None and e["disposition"] == "accepted" for e in found), found
        return [e["run_key"] for e in found]

    for key in await assert_eventually(all_accepted, timeout=90):
        await run_started(client, key, timeout=90)
    assert await task_failures(client, name, slow_retried=True) == []
    per_task = await scheduled_bytes_per_task(client, name)
    assert_budgets_kept(per_task)
    starts = [s for sizes in per_task.values() for s in sizes if s > 100 * KB]
    assert len(starts) >= 3, "3 MB of run inputs went out in several start activities"
    await still_serves(wfi, client, name)


async def test_a_payload_at_the_byte_limit_is_accepted_and_one_byte_more_is_refused_or_invalid(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-9, EXT-10
    client = dev_env.client
    name = unique("limit")
    await wfi.activate(make_spec(tmp_path, HOOK.format(name=name, extra=""), task_queue=task_queue))
    base = hook("at-limit", text="")
    at_limit = hook("at-limit", text="x" * (MAX_DELIVERY_BYTES - json_size(base)))
    assert json_size(at_limit) == MAX_DELIVERY_BYTES
    accepted = await wfi.deliver(name, at_limit)
    assert accepted.disposition.value == "accepted"
    await run_started(client, accepted.run_key)
    past = hook("past-limit", text="x" * (MAX_DELIVERY_BYTES - json_size(base) + 1 - 2))
    assert json_size(past) == MAX_DELIVERY_BYTES + 1
    with pytest.raises(DeliveryTooLarge, match=f"the limit is {MAX_DELIVERY_BYTES}"):
        await wfi.deliver(name, past)
    await plain_signal(client, name, past)  # a bridge that does not check

    async def recorded() -> None:
        (error,) = await errors_of(wfi, name, "invalid")
        assert f"the limit is {MAX_DELIVERY_BYTES}" in error["message"]

    await assert_eventually(recorded, timeout=60)
    await still_serves(wfi, client, name)


async def test_ten_concurrent_bulk_updates_of_500_are_taken_in_bounded_tasks_in_arrival_order(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: EXT-8, EXT-11
    # The order is read from the dedup records, which keep each id's sequence number until the run
    # retires them into the compact form at continue-as-new (limits.RECORDS_PER_RUN past those it
    # carries, 5,000 here): this test's worker (in-process) keeps them all in one run.
    monkeypatch.setattr("wf_initiation.core.engine._ledger.RECORDS_PER_RUN", 100_000)
    client = dev_env.client
    name = unique("bulk")
    await wfi.activate(make_spec(tmp_path, HOOK.format(name=name, extra='  when: "{{ hook.body.go }}"'),
                                 task_queue=task_queue))
    batches = [[(None, hook(f"b{b}-{i}", go=False)) for i in range(MAX_BULK)] for b in range(10)]
    results = await asyncio.gather(*(wfi.deliver_many(name, batch) for batch in batches))
    assert all(r.disposition.value == "suppressed" for batch in results for r in batch)
    assert await task_failures(client, name, slow_retried=True) == [], "every task completed, a slow one retried"
    # Past a task's budget the rest wait in the inbox; a no-op activity brings each next task.
    yields = [e for h in await histories(client, name) for e in h.events
              if e.HasField("activity_task_scheduled_event_attributes")
              and e.activity_task_scheduled_event_attributes.activity_type.name == WAIT_ACTIVITY]
    assert len(yields) >= (10 * MAX_BULK) // DELIVERIES_PER_TASK - 1, "deliveries past a task's budget waited for the next"
    events = [e async for e in wfi.events(name)]
    for b in range(10):
        seqs = [e["seq"] for e in events if e["delivery_id"].startswith(f"b{b}-")]
        order = [int(e["delivery_id"].split("-")[1]) for e in sorted(
            (e for e in events if e["delivery_id"].startswith(f"b{b}-")), key=lambda e: e["seq"])]
        assert len(seqs) == MAX_BULK and order == list(range(MAX_BULK)), "each update's deliveries in their order"
    await assert_replays(client, workflow_id_for(name))
    await still_serves(wfi, client, name, go=True)


async def test_a_burst_of_signals_past_the_task_budget_is_taken_in_arrival_order(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-8, EXT-11, INIT-7
    # Signals past a task's budget wait in the activation's inbox, and the tasks after take them in
    # the order the server recorded them; a replay (a worker restart) takes them the same way.
    client = dev_env.client
    name = unique("burst")
    await wfi.activate(make_spec(tmp_path, HOOK.format(name=name, extra='  when: "{{ hook.body.go }}"'),
                                 task_queue=task_queue))
    n = 3 * DELIVERIES_PER_TASK
    await asyncio.gather(*(wfi.signal_delivery(name, hook(f"s-{i}", go=False)) for i in range(n)))

    async def all_taken() -> None:
        assert (await wfi.summary(name))["counters"].get("deliveries", 0) >= n

    await assert_eventually(all_taken, timeout=120)
    arrived = [json.loads(e.workflow_execution_signaled_event_attributes.input.payloads[0].data)["payload"]["delivery_id"]
               for h in await histories(client, name) for e in h.events
               if e.HasField("workflow_execution_signaled_event_attributes")]
    taken = [e["delivery_id"] for e in sorted([e async for e in wfi.events(name)], key=lambda e: e["seq"])]
    assert taken == arrived and len(taken) == n, "taken in the order the server recorded them"
    # The dev server hands an updated workflow a signal stream in one task once it pauses: past the budget.
    assert any(e.activity_task_scheduled_event_attributes.activity_type.name == WAIT_ACTIVITY
               for h in await histories(client, name) for e in h.events), "some signals waited for a later task"
    assert await task_failures(client, name, slow_retried=True) == []
    await assert_replays(client, workflow_id_for(name))
    await still_serves(wfi, client, name, go=True)
