"""Signalled deliveries are never dropped silently (issue 18 item 1): a signal's sender was told
it is durable and hears no disposition. When the activation's held-bytes budget has no room, a
signalled delivery waits in the activation and is taken later in arrival order (updates arriving
meanwhile are answered at once, a new id deferred so it cannot pass them); past what the activation
can keep waiting, it is recorded as ``deferred_signal`` for the operator. Each test ends with a
normal delivery accepted and its run started."""

from __future__ import annotations

import pathlib

import pytest
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.hostile import HOOK, errors_of, hook, plain_update, still_serves, task_failures
from tests.support.replay import assert_replays
from tests.support.waits import assert_eventually
from wf_initiation import _redrive
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import _intake
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import workflow_id_for
from wf_initiation.workflows import _inbox

TEN_KB = "x" * 10_000


@pytest.fixture
def small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    # The engine is passed through the workflow sandbox: patching its module patches the activation.
    monkeypatch.setattr(_intake, "MAX_HELD_BYTES", 25_000)  # two queued 10 KB events fit, a third does not


async def _held_queue(wfi: WfiClient, client, tmp_path: pathlib.Path, task_queue: str) -> tuple[str, str]:
    """An activation whose queue ``q`` holds two 10 KB events behind a run that waits for ``release``."""
    name = unique("sigwait")
    await wfi.activate(make_spec(tmp_path, HOOK.format(name=name, extra='  queue_by: "{{ hook.body.key }}"'),
                                 task_queue=task_queue))
    head = await wfi.deliver(name, hook("head", key="q", hold=True))
    assert head.disposition.value == "accepted"
    for i in range(2):
        assert (await wfi.deliver(name, hook(f"u{i}", key="q", text=TEN_KB))).disposition.value == "queued"
    return name, head.run_key


async def test_a_signal_without_room_waits_and_is_taken_later_in_arrival_order(
    dev_env, task_queue: str, tmp_path: pathlib.Path, small_budget: None,
) -> None:
    # proves: EXT-8, EXT-11, INIT-7
    client = dev_env.client
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        name, head = await _held_queue(wfi, client, tmp_path, task_queue)
        for i in range(3):  # 20 KB held: the first 10 KB signal has no room, the others stay behind it
            await wfi.signal_delivery(name, hook(f"s{i}", key="q", text=TEN_KB))

        async def waiting() -> None:
            assert (await wfi.summary(name))["inbox"]["waiting_signals"] == 3

        await assert_eventually(waiting, timeout=30)
        passing = await wfi.deliver(name, hook("new-by-update", key="other"))
        assert passing.disposition.value == "deferred" and "waiting ahead" in passing.message, passing
        again = await plain_update(client, name, hook("head", key="q", hold=True))  # a fresh update id
        assert again["disposition"] == "duplicate", "a known id is answered as usual"
        assert await errors_of(wfi, name, "deferred_signal") == []

        await client.get_workflow_handle(head).signal("release")  # the queue moves: room again

        async def taken() -> list[str]:
            events = sorted([e async for e in wfi.events(name)], key=lambda e: e["seq"])
            ids = [e["delivery_id"] for e in events if e["delivery_id"].startswith("s")]
            assert len(ids) == 3, ids
            return ids

        assert await assert_eventually(taken, timeout=90) == ["s0", "s1", "s2"], "in the order they arrived"
        assert (await wfi.summary(name))["inbox"]["waiting_signals"] == 0
        assert await errors_of(wfi, name, "deferred_signal") == []
        assert await task_failures(client, name) == []
        await assert_replays(client, workflow_id_for(name))
        await still_serves(wfi, client, name, key="fresh")


async def test_past_what_the_activation_keeps_waiting_a_signal_is_recorded_for_the_operator(
    dev_env, task_queue: str, tmp_path: pathlib.Path, small_budget: None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: EXT-8, INIT-7
    monkeypatch.setattr(_inbox, "MAX_WAITING_SIGNALS", 2)  # passed through the sandbox, like the engine
    client = dev_env.client
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        name, head = await _held_queue(wfi, client, tmp_path, task_queue)
        for i in range(3):
            await wfi.signal_delivery(name, hook(f"s{i}", key="q", text=TEN_KB))

        async def recorded() -> list[dict]:
            errors = await errors_of(wfi, name, "deferred_signal")
            assert errors, "the oldest signal past the bound is recorded"
            return errors

        (error,) = await assert_eventually(recorded, timeout=30)
        assert error["delivery_id"] == "s0" and "--redrive" in error["message"]
        summary = await wfi.summary(name)
        assert summary["inbox"]["waiting_signals"] == 2 and summary["counters"]["deferred_signals"] == 1
        assert summary["signals"]["deferred_listed"] == 1
        record = await wfi.delivery(name, "hook", "s0")  # listed, with the run whose history holds the signal
        assert record is not None and record["disposition"] == "deferred_signal", record
        assert [(shard, s["delivery_id"]) async for shard, s in _redrive.deferred_signals(wfi, name)] == [(0, "s0")]
        await client.get_workflow_handle(head).signal("release")

        async def rest_taken() -> None:
            ids = {e["delivery_id"] async for e in wfi.events(name)}
            assert {"s1", "s2"} <= ids, ids

        await assert_eventually(rest_taken, timeout=90)

        async def redriven() -> object:  # its payload read back from history, delivered by update (deferred while q is full)
            result = await _redrive.redrive(wfi, name, "s0")
            assert result.disposition.value in ("accepted", "queued"), result
            return result

        again = await assert_eventually(redriven, timeout=90)
        assert (await wfi.delivery(name, "hook", "s0"))["disposition"] == again.disposition.value
        assert (await wfi.summary(name))["signals"]["deferred_listed"] == 0, "disposed: listed no more"
        assert await task_failures(client, name) == []
        await still_serves(wfi, client, name, key="fresh")
