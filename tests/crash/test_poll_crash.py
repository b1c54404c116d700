"""Crash test of polling: a real worker process is SIGKILLed while it polls a SQLite table.

The table receives 3,000 rows in bursts while the activation polls it: about 5% have no identity
(invalid: quarantined), about 5% re-send an earlier identity with another row (a conflict: no
second run), and an operator rewinds the cursor once so a stretch of rows is fetched again
(duplicates across polls). The worker is killed at least three times while rows remain unread.
Runs go to a task queue no worker serves: what is checked is that each was *started* exactly once.
"""

from __future__ import annotations

import asyncio
import pathlib
import random
import sqlite3
from typing import Any

from tests.support.activation import make_spec, unique
from tests.support.replay import assert_replays, diagnose
from tests.support.waits import assert_eventually
from tests.support.worker_proc import WorkerProcess
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import payload_digest
from wf_initiation.errors import WfiError
from wf_initiation.wire import OperatorRequest

ROWS = 3000
BURSTS = 6
KILLS = 3


def source_rows(seed: int = 5) -> list[tuple[str | None, str]]:
    """(item_id, note) in insertion order: ~5% without identity, ~5% re-sending an earlier id."""
    rng = random.Random(seed)
    rows: list[tuple[str | None, str]] = []
    for i in range(ROWS):
        roll = rng.random()
        if roll < 0.05:
            rows.append((None if rng.random() < 0.5 else "", f"invalid {i}"))
        elif roll < 0.10 and i > 10:
            rows.append((f"item-{rng.randrange(i // 2)}", f"resent {i}"))
        else:
            rows.append((f"item-{i}", f"row {i}"))
    return rows


def create_table(path: pathlib.Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE items (seq INTEGER PRIMARY KEY AUTOINCREMENT, item_id TEXT, note TEXT)")


def insert(path: pathlib.Path, rows: list[tuple[str | None, str]]) -> None:
    with sqlite3.connect(path) as db:
        db.executemany("INSERT INTO items (item_id, note) VALUES (?, ?)", rows)


def payload_of(seq: int, item_id: str | None, note: str) -> dict[str, Any]:
    """What sql.row_inserted returns for a row (to name quarantine records by digest)."""
    return {"row_id": item_id or "", "table": "items", "row": {"seq": seq, "item_id": item_id, "note": note}}


class Expectation:
    """What the source holds: first occurrences of valid ids, invalid rows, by sequence number."""

    def __init__(self, rows: list[tuple[str | None, str]]) -> None:
        self.rows = rows
        seen: set[str] = set()
        self.first: list[tuple[int, str]] = []
        self.invalid: list[tuple[int, str]] = []
        for seq, (item_id, note) in enumerate(rows, start=1):
            if not item_id:
                self.invalid.append((seq, "quarantine:" + payload_digest(payload_of(seq, item_id, note))))
            elif item_id not in seen:
                seen.add(item_id)
                self.first.append((seq, item_id))

    def check_not_ahead(self, state: dict[str, Any]) -> int:
        """Every row at or before the cursor has a retained disposition (POLL-8, POLL-9)."""
        cursor = int(state["polls"]["row"]["cursor"] or 0)
        recorded = {r["delivery_id"] for r in state["events"].values()} | {
            k.split("\x1f", 1)[1] for k in state["events"]}
        missing = [i for s, i in self.first if s <= cursor and i not in recorded]
        missing += [q for s, q in self.invalid if s <= cursor and q not in recorded]
        assert not missing, f"cursor {cursor} is ahead of undisposed items {missing[:5]}"
        return cursor


async def test_killing_the_worker_while_polling_starts_each_valid_item_once_in_source_order(
    dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: POLL-9, POLL-8, POLL-6, POLL-11, POLL-5
    db = tmp_path / "source.db"
    create_table(db)
    rows = source_rows()
    expect = Expectation(rows)
    name = unique("pollcrash")
    spec = make_spec(
        tmp_path, f"""
        name: {name}
        on:
          sql.row_inserted: {{table: items, column: seq, id_column: item_id}}
          as: row
        """, task_queue=task_queue, connections={"db": {"connector": "sql", "sqlite": str(db)}},
        poll={"interval": "100ms", "backoff_initial": "100ms", "backoff_max": "1s", "limit": 200},
        invalid_items="quarantine",
        run={"workflow_type": "wfi.EchoRun", "task_queue": f"{task_queue}-runs", "execution_timeout": "5m"},
    )
    client = dev_env.client
    wfi = WfiClient(client, task_queue=task_queue)
    worker = WorkerProcess(client.service_client.config.target_host, task_queue)
    await asyncio.to_thread(worker.start)
    samples: list[int] = []
    cursors_at_kill: list[int] = []
    try:
        await wfi.activate(spec)
        sampler = asyncio.create_task(_sample(wfi, name, expect, samples))
        burst = ROWS // BURSTS
        for b in range(BURSTS):
            insert(db, rows[b * burst : (b + 1) * burst])
            try:
                await _until_cursor_passes(sampler, samples, b * burst + burst // 3)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{await diagnose(client, name, 'polls')}") from None
            if b == 2:
                result = await wfi.operate(name, OperatorRequest(action="set_cursor", entry="row",
                                                                 cursor=str(b * burst // 2), note="re-read a stretch"))
                assert result.ok, result.message
            if b in (1, 3, 4) and len(cursors_at_kill) < KILLS:
                cursors_at_kill.append(samples[-1])
                worker.kill()  # SIGKILL while rows remain unread
                await asyncio.to_thread(worker.start)
        state = await assert_eventually(lambda: _drained(wfi, name), timeout=170, interval=0.5)
        if sampler.done():
            sampler.result()
        sampler.cancel()
    finally:
        worker.stop()

    assert len(cursors_at_kill) == KILLS and all(c < ROWS for c in cursors_at_kill), cursors_at_kill
    assert worker.starts == KILLS + 1
    expect.check_not_ahead(state)
    # Checked while polling, not only at the end: states with rows still unread, at least one per
    # burst (a count of all samples said so only while the poll path was slow enough to be sampled
    # more than ten times).
    assert sum(1 for cursor in samples if cursor < ROWS) >= BURSTS, samples
    events = sorted((r for r in state["events"].values() if r["entry"] == "row"), key=lambda r: r["seq"])
    accepted = [r["delivery_id"] for r in events if r["disposition"] in ("accepted", "queued")]
    assert accepted == [i for _, i in expect.first], "acceptance order equals source order"
    quarantined = {k.split("\x1f", 1)[1] for k, r in state["events"].items() if r["disposition"] == "quarantined"}
    assert quarantined == {q for _, q in expect.invalid}, "every invalid row is quarantined"
    assert state["counters"].get("duplicates", 0) > 0 and state["error_counts"].get("conflict", 0) > 0
    expected_runs = sorted(f"{spec.activation_id}/row/{i}" for _, i in expect.first)

    # Every item's run exists (a describe per id: listing thousands pages unreliably on the dev
    # server), then as many executions as distinct items: exactly one run each.
    gate = asyncio.Semaphore(32)

    async def exists(run_key: str) -> None:
        async with gate:
            assert (await client.get_workflow_handle(run_key).describe()).id == run_key

    await asyncio.gather(*(exists(k) for k in expected_runs))
    query = f'WfiActivation = "{spec.activation_id}" AND WorkflowType = "wfi.EchoRun"'

    async def one_run_each() -> None:
        # Visibility is eventually consistent and lags under a burst of thousands of starts (once
        # 976 of 2,695 after 150 s on a loaded 2-core machine, with every run known started).
        count = (await client.count_workflows(query)).count
        assert count == len(expected_runs), (count, len(expected_runs))

    await assert_eventually(one_run_each, timeout=400, interval=2)
    await assert_replays(client, f"wfi-activation:{name}")  # what the crashes wrote replays with this code


async def _sample(wfi: WfiClient, name: str, expect: Expectation, samples: list[int]) -> None:
    """Check the cursor invariant on every state the activation shows while the test runs."""
    while True:
        try:
            state = await wfi.state(name, include_events=True, settle=1)  # state first: the invariant's reading
        except WfiError:
            await asyncio.sleep(0.2)  # the worker is down: nothing to observe
            continue
        samples.append(expect.check_not_ahead(state))
        await asyncio.sleep(0.3)


async def _until_cursor_passes(sampler: asyncio.Task[None], samples: list[int], position: int) -> None:
    async def passed() -> None:
        if sampler.done():
            sampler.result()  # the sampler found the cursor ahead of an undisposed item
        assert samples and samples[-1] >= position, (samples[-1:], position)

    await assert_eventually(passed, timeout=150, interval=0.1)


async def _drained(wfi: WfiClient, name: str) -> dict[str, Any]:
    state = await wfi.state(name, include_events=True)
    assert state["polls"]["row"]["cursor"] == str(ROWS), state["polls"]["row"]["cursor"]
    # The summary's counts cover every run; state["runs"] lists only the oldest 500 (summary.full_state),
    # so with thousands of runs it can show none starting while later ones still are.
    summary = state["summary"]
    assert summary["runs_pending"] == summary["runs_starting"] == 0, (
        f"{summary['runs_starting']} runs starting, {summary['runs_pending']} pending")
    return state
