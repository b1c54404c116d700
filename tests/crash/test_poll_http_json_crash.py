"""Crash test of `http_json.item_added`: a real worker process is SIGKILLed while it pages through a
JSON API on a local socket (tests/support/pollsources.JsonApi).

The API lists 600 items, seven to a page, added in three bursts while the activation polls: about
5% have no id (invalid: quarantined), about 5% re-send an earlier id with another item (a conflict:
no second run), and the API rate-limits once (429 with Retry-After) mid-way. The worker is killed
twice while items remain unread. Runs go to a task queue no worker serves: what is checked is that
each was *started* exactly once, in the API's order, and that the cursor was never ahead of an item
whose disposition was not retained.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import random
from typing import Any

import pytest

from tests.support.activation import make_spec, unique
from tests.support.pollsources import Answer, JsonApi
from tests.support.replay import assert_replays
from tests.support.waits import assert_eventually
from tests.support.worker_proc import WorkerProcess
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import payload_digest
from wf_initiation.errors import WfiError

pytestmark = pytest.mark.crash
ITEMS, BURSTS, KILLS = 600, 3, 2


def source_items(seed: int = 11) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(ITEMS):
        roll = rng.random()
        if roll < 0.05:
            out.append({"n": i, "note": "no id"})
        elif roll < 0.10 and i > 10:
            out.append({"id": f"t-{rng.randrange(i // 2)}", "n": i, "note": "resent"})
        else:
            out.append({"id": f"t-{i}", "n": i})
    return out


class Expectation:
    """First occurrences of valid ids and the invalid items, by position in the listing."""

    def __init__(self, items: list[dict[str, Any]], url: str) -> None:
        seen: set[str] = set()
        self.first: list[tuple[int, str]] = []
        self.invalid: list[tuple[int, str]] = []
        for n, item in enumerate(items):
            if "id" not in item:
                payload = {"item_id": "", "source": url, "item": item}
                self.invalid.append((n, "quarantine:" + payload_digest(payload)))
            elif item["id"] not in seen:
                seen.add(item["id"])
                self.first.append((n, item["id"]))

    def position(self, cursor: str | None) -> int:
        """How many items of the listing the cursor has passed (the API's tokens are offsets)."""
        if cursor is None:
            return 0
        value = json.loads(cursor)
        return int(value["token"] or 0) + value["skip"]

    def check_not_ahead(self, state: dict[str, Any]) -> int:
        passed = self.position(state["polls"]["ticket"]["cursor"])
        recorded = {r["delivery_id"] for r in state["events"].values()} | {
            k.split("\x1f", 1)[1] for k in state["events"]}
        missing = [i for n, i in self.first if n < passed and i not in recorded]
        missing += [q for n, q in self.invalid if n < passed and q not in recorded]
        assert not missing, f"cursor at item {passed} is ahead of undisposed items {missing[:5]}"
        return passed


async def test_killing_the_worker_while_paging_a_json_api_starts_each_valid_item_once_in_order(
    dev_env, task_queue: str, tmp_path: pathlib.Path, json_api: JsonApi
) -> None:
    # proves: POLL-9, POLL-8, POLL-6, POLL-11
    json_api.page_size = 7
    items = source_items()
    expect = Expectation(items, json_api.url)
    name = unique("jsoncrash")
    spec = make_spec(tmp_path, f"""
        name: {name}
        on:
          http_json.item_added:
            url: "{json_api.url}"
            items: data
            id: id
            next: meta.next
            token_param: cursor
            max_pages: 4
          as: ticket
        """, task_queue=task_queue, connections={"api": {"connector": "http_json", "timeout": 10}},
        poll={"interval": "100ms", "backoff_initial": "100ms", "backoff_max": "1s", "limit": 50},
        invalid_items="quarantine",
        run={"workflow_type": "wfi.EchoRun", "task_queue": f"{task_queue}-runs", "execution_timeout": "5m"},
    )
    client = dev_env.client
    wfi = WfiClient(client, task_queue=task_queue)
    worker = WorkerProcess(client.service_client.config.target_host, task_queue)
    await asyncio.to_thread(worker.start)
    samples: list[int] = []
    try:
        await wfi.activate(spec)
        sampler = asyncio.create_task(_sample(wfi, name, expect, samples))
        burst = ITEMS // BURSTS
        for b in range(BURSTS):
            json_api.add(*items[b * burst:(b + 1) * burst])
            await _until_passed(sampler, samples, b * burst + burst // 3)
            if b == 1:
                json_api.script(Answer(429, {"Retry-After": "1"}))
            if b < KILLS:
                worker.kill()  # SIGKILL while items remain unread
                await asyncio.to_thread(worker.start)
        state = await assert_eventually(lambda: _drained(wfi, name, expect), timeout=170,
                                        interval=0.5)
        if sampler.done():
            sampler.result()
        sampler.cancel()
    finally:
        worker.stop()

    assert worker.starts == KILLS + 1 and 429 in json_api.statuses()
    assert sum(1 for passed in samples if passed < ITEMS) >= BURSTS, samples
    events = sorted((r for r in state["events"].values() if r["entry"] == "ticket"), key=lambda r: r["seq"])
    accepted = [r["delivery_id"] for r in events if r["disposition"] in ("accepted", "queued")]
    assert accepted == [i for _, i in expect.first], "acceptance order equals the API's order"
    quarantined = {k.split("\x1f", 1)[1] for k, r in state["events"].items() if r["disposition"] == "quarantined"}
    assert quarantined == {q for _, q in expect.invalid}, "every item without an id is quarantined"
    assert state["error_counts"].get("conflict", 0) > 0
    query = f'WfiActivation = "{spec.activation_id}" AND WorkflowType = "wfi.EchoRun"'

    async def one_run_each() -> None:
        count = (await client.count_workflows(query)).count
        assert count == len(expect.first), (count, len(expect.first))

    await assert_eventually(one_run_each, timeout=300, interval=2)
    await assert_replays(client, f"wfi-activation:{name}")


async def _sample(wfi: WfiClient, name: str, expect: Expectation, samples: list[int]) -> None:
    while True:
        try:
            state = await wfi.state(name, include_events=True, settle=1)
        except WfiError:
            await asyncio.sleep(0.2)  # the worker is down: nothing to observe
            continue
        samples.append(expect.check_not_ahead(state))
        await asyncio.sleep(0.3)


async def _until_passed(sampler: asyncio.Task[None], samples: list[int], position: int) -> None:
    async def passed() -> None:
        if sampler.done():
            sampler.result()  # the sampler found the cursor ahead of an undisposed item
        assert samples and samples[-1] >= position, (samples[-1:], position)

    await assert_eventually(passed, timeout=150, interval=0.1)


async def _drained(wfi: WfiClient, name: str, expect: Expectation) -> dict[str, Any]:
    state = await wfi.state(name, include_events=True)
    assert expect.position(state["polls"]["ticket"]["cursor"]) == ITEMS, state["polls"]["ticket"]
    summary = state["summary"]
    assert summary["runs_pending"] == summary["runs_starting"] == 0, summary
    return state
