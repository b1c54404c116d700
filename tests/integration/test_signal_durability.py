"""A signal told it is in the activation's history is kept until it is disposed (issue 32 item 3).

The attacks of the issue, through the real signal path: a burst of 2,200 signals into an activation
whose held-bytes budget has no room (the inbox keeps 1,000 waiting, the rest are deferred and each
listed with its signal), continue-as-new caused by unrelated update traffic while signals wait
(they are carried by reference and taken by the next run, in order), and 1,500 signals at capacity
(each deferred one listed, ``WfiClient.delivery`` says ``deferred_signal``, and all are delivered
again from history once there is room). Each test ends with a normal delivery accepted and its run
started.
"""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.cli import MAIL_WORKFILE, Pair, mail
from tests.support.cli import wfi as cli
from tests.support.hostile import HOOK, errors_of, histories, hook, plain_signal, plain_update, still_serves, task_failures
from tests.support.replay import assert_replays
from tests.support.waits import assert_eventually
from wf_initiation import _redrive
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import _intake
from wf_initiation.core.limits import BYTES_PER_LIVE_RECORD, CAPACITY_BYTES, STATE_BASE_BYTES
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import workflow_id_for

SPEC = HOOK.format(name="{name}", extra='  when: "{{ hook.body.go }}"\n  queue_by: "{{ hook.body.key }}"')
TEXT = "x" * 1000


@pytest.fixture
def no_room(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two queued 1 KB events fill it: a signal of 500 bytes more waits (the engine is passed through
    # the workflow sandbox: patching its module patches the activation).
    monkeypatch.setattr(_intake, "MAX_HELD_BYTES", 2_500)


async def _gather(n: int, send: Callable[[int], Awaitable[Any]], concurrency: int = 50) -> list[Any]:
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> Any:
        async with gate:
            return await send(i)

    return await asyncio.gather(*(one(i) for i in range(n)))


async def _held(wfi: WfiClient, tmp_path: pathlib.Path, task_queue: str, **settings: Any) -> tuple[str, str]:
    """An activation whose queue ``q`` holds two 1 KB events behind a run that waits for ``release``."""
    name = unique("durable")
    await wfi.activate(make_spec(tmp_path, SPEC.replace("{name}", name), task_queue=task_queue, **settings))
    head = await wfi.deliver(name, hook("head", key="q", go=True, hold=True))
    assert head.disposition.value == "accepted", head
    for i in range(2):
        assert (await wfi.deliver(name, hook(f"u{i}", key="q", go=True, text=TEXT))).disposition.value == "queued"
    return name, head.run_key


def _signal(i: int) -> dict[str, Any]:
    return hook(f"s{i}", key=f"k{i}", go=False, text="y" * 500)  # suppressed once taken: no run to wait for


async def _kept(wfi: WfiClient, name: str) -> int:
    """Signals the activation holds: waiting (in memory or carried) and deferred (listed)."""
    s = await wfi.summary(name)
    return s["inbox"]["waiting_signals"] + s["signals"]["waiting_carried"] + s["signals"]["deferred_listed"]


async def _dispositions(wfi: WfiClient, name: str, n: int) -> dict[str, str]:
    found = {e["delivery_id"]: e["disposition"] async for e in wfi.events(name) if e["delivery_id"].startswith("s")}
    assert len(found) == n, f"{len(found)} of {n} signals disposed"
    return found


async def test_a_burst_of_2200_signals_without_room_is_kept_waiting_or_listed_and_all_are_disposed(
    dev_env, task_queue: str, tmp_path: pathlib.Path, no_room: None,
) -> None:
    # proves: EXT-8, INIT-7
    client = dev_env.client
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        name, head = await _held(wfi, tmp_path, task_queue)
        await _gather(2200, lambda i: plain_signal(client, name, _signal(i)))  # a bridge's raw signals, concurrently

        async def all_kept() -> None:
            assert await _kept(wfi, name) == 2200

        await assert_eventually(all_kept, timeout=180, interval=1.0)
        summary = await wfi.summary(name)
        assert summary["signals"]["deferred_unlisted"] == 0 and summary["signals"]["deferred_listed"] >= 1200, summary
        listed = {s["delivery_id"] async for _, s in _redrive.deferred_signals(wfi, name)}
        assert len(listed) == summary["signals"]["deferred_listed"]
        answers = await _gather(2200, lambda i: wfi.delivery(name, "hook", f"s{i}"))
        assert all(a is not None for a in answers), "every signal has an answer"
        by_id = {a["delivery_id"]: a["disposition"] for a in answers}
        assert {i for i, d in by_id.items() if d == "deferred_signal"} == listed
        assert set(by_id.values()) <= {"deferred_signal", "waiting_signal"}

        await client.get_workflow_handle(head).signal("release")  # room again: the waiting ones are taken
        redriven = await _redrive.redrive_all(wfi, name)
        assert len(redriven) == len(listed)

        async def redrive_rest() -> None:  # deferred again while the queue still held payloads: again
            await _redrive.redrive_all(wfi, name)
            assert (await wfi.summary(name))["signals"]["deferred_listed"] == 0

        await assert_eventually(redrive_rest, timeout=120, interval=2.0)
        dispositions = await assert_eventually(lambda: _dispositions(wfi, name, 2200), timeout=180, interval=2.0)
        assert set(dispositions.values()) == {"suppressed"}, "each signal disposed once, none dropped"
        assert await task_failures(client, name, slow_retried=True) == []
        await still_serves(wfi, client, name, key="fresh", go=True)


async def test_waiting_signals_survive_continue_as_new_caused_by_unrelated_updates(
    dev_env, task_queue: str, tmp_path: pathlib.Path, no_room: None,
) -> None:
    # proves: EXT-8, EXT-11, INIT-7
    client = dev_env.client
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        name, head = await _held(wfi, tmp_path, task_queue, max_history_events=300)
        for i in range(400):  # in order: the order they must be taken in
            await wfi.signal_delivery(name, _signal(i))

        async def waiting() -> None:
            assert await _kept(wfi, name) == 400

        await assert_eventually(waiting, timeout=90)
        runs = len(await histories(client, name))
        for _ in range(200):  # unrelated traffic: a known id, answered duplicate, grows the history
            assert (await plain_update(client, name, hook("head", key="q", go=True, hold=True)))["disposition"] == "duplicate"
        assert len(await histories(client, name)) > runs, "the updates made the activation continue as new"
        summary = await wfi.summary(name)
        assert summary["signals"]["deferred_listed"] == 0 and summary["counters"].get("deferred_signals", 0) == 0, summary
        assert await _kept(wfi, name) == 400, "every waiting signal was carried"
        record = await wfi.delivery(name, "hook", "s0")
        assert record is not None and record["disposition"] == "waiting_signal", record

        await client.get_workflow_handle(head).signal("release")
        await assert_eventually(lambda: _dispositions(wfi, name, 400), timeout=180, interval=2.0)
        events = sorted([e async for e in wfi.events(name) if e["delivery_id"].startswith("s")], key=lambda e: e["seq"])
        assert [e["delivery_id"] for e in events] == [f"s{i}" for i in range(400)], "taken in the order they arrived"
        assert await errors_of(wfi, name, "deferred_signal") == []
        assert await task_failures(client, name, slow_retried=True) == []
        await assert_replays(client, workflow_id_for(name))  # the recovery from history included
        await still_serves(wfi, client, name, key="fresh", go=True)


async def test_at_capacity_every_deferred_signal_is_listed_and_delivered_again_from_history(
    dev_env, task_queue: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: EXT-7, EXT-8, INIT-7
    monkeypatch.setattr(_intake, "CAPACITY_BYTES", STATE_BASE_BYTES + 300 * BYTES_PER_LIVE_RECORD)  # ~300 ids
    client = dev_env.client
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        name = unique("fullsig")
        await wfi.activate(make_spec(tmp_path, SPEC.replace("{name}", name), task_queue=task_queue))
        for i in range(0, 600, 100):
            await wfi.deliver_many(name, [(None, hook(f"id-{j}", key="f", go=False)) for j in range(i, i + 100)])
        assert (await wfi.deliver(name, hook("one-more", key="f", go=False))).disposition.value == "deferred"
        await _gather(1500, lambda i: wfi.signal_delivery(name, _signal(i)))

        async def listed() -> None:
            assert (await wfi.summary(name))["signals"]["deferred_listed"] == 1500

        await assert_eventually(listed, timeout=180, interval=1.0)
        answers = await _gather(1500, lambda i: wfi.delivery(name, "hook", f"s{i}"))
        assert all(a is not None and a["disposition"] == "deferred_signal" for a in answers), "each one says so"
        assert (await wfi.summary(name))["signals"]["deferred_unlisted"] == 0

        monkeypatch.setattr(_intake, "CAPACITY_BYTES", CAPACITY_BYTES)  # room again (as when retention lets ids go)

        async def redriven() -> None:
            await _redrive.redrive_all(wfi, name)
            assert (await wfi.summary(name))["signals"]["deferred_listed"] == 0

        await assert_eventually(redriven, timeout=180, interval=3.0)
        dispositions = await _dispositions(wfi, name, 1500)
        assert set(dispositions.values()) == {"suppressed"}
        assert await task_failures(client, name, slow_retried=True) == []
        await still_serves(wfi, client, name, key="fresh", go=True)


async def test_the_cli_lists_a_deferred_signal_and_delivers_it_again(
    worker, dev_env, task_queue: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: EXT-8
    name = unique("clisig")
    pair = Pair(name, tmp_path / f"{name}.yaml", tmp_path / "deployment.yaml")
    pair.workfile.write_text(MAIL_WORKFILE.format(name=name))
    pair.write_deployment(dev_env.client.service_client.config.target_host, task_queue)
    dep = ("--deployment", str(pair.deployment), "--workflow", name)
    assert (await cli("activate", str(pair.workfile), "--deployment", str(pair.deployment))).code == 0
    monkeypatch.setattr(_intake, "CAPACITY_BYTES", STATE_BASE_BYTES)  # the in-process worker has no room for new ids
    sent = await cli("deliver", *dep, "--signal", "--payload", mail("m1"))
    assert sent.code == 0 and "kept until disposed or listed as deferred" in sent.stdout, sent.stdout + sent.stderr

    async def listed() -> list[dict[str, Any]]:
        out = await cli("state", *dep, "--deferred-signals", "--json")
        assert out.code == 0 and [s["delivery_id"] for s in out.json()] == ["m1"], out.stdout + out.stderr
        return out.json()

    [signal] = await assert_eventually(listed, timeout=60)
    assert signal["entry"] == "message" and signal["run_id"] and "capacity" in signal["reason"]
    monkeypatch.setattr(_intake, "CAPACITY_BYTES", CAPACITY_BYTES)
    again = await cli("deliver", *dep, "--redrive", "m1", "--json")
    assert (again.code, again.json()["disposition"]) == (0, "accepted"), again.stdout + again.stderr
    missing = await cli("deliver", *dep, "--redrive", "m1")
    assert missing.code == 1 and "lists no deferred signal" in missing.stderr, missing.stdout + missing.stderr
    assert (await cli("state", *dep, "--deferred-signals", "--json")).json() == []
