"""An activation at capacity stays healthy and says so (issue 21 item 0), on a real server.

The attack of the issue: unique ids suppressed by ``when`` until what the activation carries is at
its capacity. Then new ids are deferred (``refuse``) while known ids are answered, the activation
keeps continuing as new (its history never grows past a run's limits, no update is refused by the
server's caps), the summary and the error list say so, and once retention lets ids go it takes new
ones again. Under ``shed_oldest`` it keeps taking new ids and records what it shed.
"""

from __future__ import annotations

import asyncio
import gc
import pathlib

import pytest
from temporalio.worker import ExecuteWorkflowInput, Worker

from tests.support.activation import make_spec, unique
from tests.support.hostile import HOOK, errors_of, histories, hook, still_serves, task_failures
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import _intake, _ledger
from wf_initiation.core.engine._ledger import KEEP_LIVE_RELEASED
from wf_initiation.core.limits import BYTES_PER_LIVE_RECORD, STATE_BASE_BYTES
from wf_initiation.plugin import WfiPlugin

SMALL = STATE_BASE_BYTES + 300 * BYTES_PER_LIVE_RECORD  # about 300 retained ids


@pytest.fixture
def small_capacity(monkeypatch: pytest.MonkeyPatch) -> None:
    # The engine is passed through the workflow sandbox: patching its module patches the activation.
    monkeypatch.setattr(_intake, "CAPACITY_BYTES", SMALL)


async def _fill(wfi: WfiClient, name: str, start: int, n: int) -> list[str]:
    out = []
    for i in range(start, start + n, 50):
        results = await wfi.deliver_many(name, [(None, hook(f"id-{j}", go=False)) for j in range(i, min(i + 50, start + n))])
        out += [r.disposition.value for r in results]
    return out


async def test_at_capacity_new_ids_are_deferred_the_activation_carries_on_and_says_so(
    dev_env, task_queue: str, tmp_path: pathlib.Path, small_capacity: None,
) -> None:
    # proves: EXT-3, EXT-7, INIT-7
    client = dev_env.client
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        name = unique("full")
        await wfi.activate(make_spec(tmp_path, HOOK.format(name=name, extra='  when: "{{ hook.body.go }}"'),
                                     task_queue=task_queue, dedup_retention="20s", max_history_events=300))
        dispositions = await _fill(wfi, name, 0, 600)
        assert "deferred" in dispositions and dispositions[0] == "suppressed"
        summary = await wfi.summary(name)
        assert summary["capacity"]["fill"] >= 0.95 and summary["capacity"]["policy"] == "refuse"
        (warning,) = await errors_of(wfi, name, "capacity_warning")
        assert "of its capacity" in warning["message"]
        deferred = await wfi.deliver(name, hook("one-more", go=True))
        assert deferred.disposition.value == "deferred" and "at capacity" in deferred.message
        known = await wfi.deliver_many(name, [(None, hook("id-0", go=False))])
        assert known[0].disposition.value == "duplicate", "known ids are still answered"
        for i in range(70):  # one update each: a history past max_history_events, so it continues as new
            assert (await wfi.deliver(name, hook(f"more-{i}", go=False))).disposition.value == "deferred"
        assert len(await histories(client, name)) >= 2, "continue-as-new is never stopped by capacity"
        assert await errors_of(wfi, name, "carry_over_limit") == []
        assert await task_failures(client, name) == []

        async def room_again() -> None:  # retention over: the ids are let go
            assert (await wfi.deliver(name, hook(unique("later"), go=False))).disposition.value == "suppressed"

        await assert_eventually(room_again, timeout=90, interval=2)
        await still_serves(wfi, client, name, go=True)


async def test_shed_oldest_keeps_taking_new_ids_and_records_it(
    dev_env, task_queue: str, tmp_path: pathlib.Path, small_capacity: None,
) -> None:
    # proves: EXT-3
    client = dev_env.client
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        name = unique("shed")
        await wfi.activate(make_spec(tmp_path, HOOK.format(name=name, extra='  when: "{{ hook.body.go }}"'),
                                     task_queue=task_queue, at_capacity="shed_oldest"))
        assert set(await _fill(wfi, name, 0, 800)) == {"suppressed"}
        summary = await wfi.summary(name)
        assert summary["counters"]["dedup_shed"] > 0 and summary["capacity"]["shed_through"] is not None
        assert await errors_of(wfi, name, "capacity_shed")
        again = await wfi.deliver_many(name, [(None, hook("id-0", go=False))])
        assert again[0].disposition.value == "suppressed", "a shed id is taken as new"
        await still_serves(wfi, client, name, go=True)


async def test_a_run_taking_bulk_deliveries_continues_as_new_to_retire_their_records_and_loses_no_id(
    dev_env, task_queue: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: EXT-3, EXT-5
    # A full record costs the worker ~20 times a retired id: a run adds at most RECORDS_PER_RUN of
    # them (100 here) past the KEEP_LIVE_RELEASED (500) it carries, however few history events its deliveries take.
    monkeypatch.setattr(_ledger, "RECORDS_PER_RUN", 100)
    client = dev_env.client
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        name = unique("bulk")
        await wfi.activate(make_spec(tmp_path, HOOK.format(name=name, extra='  when: "{{ hook.body.go }}"'),
                                     task_queue=task_queue))
        ids = [f"id-{i}" for i in range(KEEP_LIVE_RELEASED + 500)]
        for i in range(0, len(ids), 500):  # five updates: a few dozen history events, far from any other limit
            results = await wfi.deliver_many(name, [(None, hook(ident, go=False)) for ident in ids[i:i + 500]])
            assert {r.disposition.value for r in results} == {"suppressed"}

        async def continued_as_new() -> None:  # decided once the last update's task has ended
            assert len(await histories(client, name)) >= 2, "the run continued as new to retire its records"

        await assert_eventually(continued_as_new, timeout=60)
        summary = await wfi.summary(name)
        assert summary["dedup_entries"] == len(ids) and summary["dedup_retired"] > 0, "every id kept across it"
        again = await wfi.deliver_many(name, [(None, hook(ids[0], go=False)), (None, hook(ids[-1], go=False))])
        assert [r.disposition.value for r in again] == ["duplicate", "duplicate"]
        assert await task_failures(client, name) == []
        await still_serves(wfi, client, name, go=True)


async def test_continue_as_new_is_not_put_off_by_senders_keeping_deliver_many_updates_in_flight(
    dev_env, task_queue: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: EXT-3
    # Continue-as-new waits until every handler finished and the inbox is empty; four senders that
    # always have an update of 500 in flight kept it waiting until they stopped (the run's history
    # and memory growing meanwhile). Now updates are refused while it waits, and retried on the next run.
    monkeypatch.setattr(_ledger, "RECORDS_PER_RUN", 100)
    client = dev_env.client
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        name = unique("busy")
        await wfi.activate(make_spec(tmp_path, HOOK.format(name=name, extra='  when: "{{ hook.body.go }}"'),
                                     task_queue=task_queue))

        async def sender(k: int) -> None:
            for i in range(3):
                ids = [f"s{k}-{i}-{j}" for j in range(500)]
                results = await wfi.deliver_many(name, [(None, hook(ident, go=False)) for ident in ids])
                assert {r.disposition.value for r in results} == {"suppressed"}

        await asyncio.gather(*(sender(k) for k in range(4)))
        runs = len(await histories(client, name))
        assert runs >= 4, f"{runs} run(s) for 6,000 ids at most 2,100 full records a run: continue-as-new waited for the senders"
        assert (await wfi.summary(name))["dedup_entries"] == 6000, "no id lost or taken twice across the runs"
        assert await task_failures(client, name) == []
        await still_serves(wfi, client, name, go=True)


async def test_a_cached_activation_holds_no_copy_of_the_state_it_was_started_with(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-3
    # The SDK keeps a run's decoded arguments for the run's life (workflows/_start_input.py): the
    # carried state (~15 bytes per retained id) is replaced by None once the workflow object read it.
    client = dev_env.client
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        name = unique("carried")
        workfile = HOOK.format(name=name, extra='  when: "{{ hook.body.go }}"')
        await wfi.activate(make_spec(tmp_path, workfile, task_queue=task_queue, max_history_events=1000))
        results = await wfi.deliver_many(name, [(None, hook(f"id-{i}", go=False)) for i in range(200)])
        assert {r.disposition.value for r in results} == {"suppressed"}
        await wfi.activate(make_spec(tmp_path, workfile, task_queue=task_queue, max_history_events=1200))  # a rebinding

        async def continued_as_new() -> None:
            assert len(await histories(client, name)) >= 2
            assert (await wfi.summary(name))["dedup_entries"] == 200, "the new run holds every id"

        await assert_eventually(continued_as_new, timeout=60)
        inputs = [o for o in gc.get_objects() if isinstance(o, ExecuteWorkflowInput)
                  and getattr(o.type, "__name__", "") == "ActivationWorkflow"]
        assert len(inputs) >= 2, "the SDK keeps each cached run's input (the first run's and the new one's)"
        assert all(o.args[1] is None for o in inputs), [type(o.args[1]) for o in inputs]
        again = await wfi.deliver_many(name, [(None, hook("id-0", go=False))])
        assert again[0].disposition.value == "duplicate", "what the state carried is the engine's"
        await still_serves(wfi, client, name, go=True)
