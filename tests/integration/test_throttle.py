"""The throttle (deployment ``throttle: {runs, per, key}``) in a real activation: N runs start per
window, the rest are accepted and wait in order, each starts when the sliding window has room (the
activation wakes itself at that instant, no poll), and nothing is dropped; on the time-skipping server
with an hour-long window, then on the dev server with a sharded activation, whose throttle shard 0 keeps.

Deliveries on the time-skipping server are minutes apart: the windows then open minutes apart, and
the activation's timers with them (timers a few milliseconds apart trip that server, see
test_batch_activation.py)."""

from __future__ import annotations

import pathlib
from datetime import datetime, timedelta
from typing import Any

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.support.activation import make_spec, unique
from tests.support.hostile import hook, run_started, still_serves
from tests.support.operator_view import pages
from tests.support.replay import assert_replays, assert_replays_history
from tests.support.runs import describe_or_none
from tests.support.waits import until_passed
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import Disposition
from wf_initiation.core.engine._view import utc
from wf_initiation.wire import shard_workflow_id, workflow_id_for

HOOK = "name: {name}\non:\n  http.request: {{}}\n  as: hook\n"
HOUR = timedelta(hours=1)
APART = timedelta(minutes=10)


async def result_of(client: Client, run_key: str) -> dict[str, Any]:
    """A started run's result (``wfi.EchoRun``: its input and the instant it began)."""
    await run_started(client, run_key)
    return await client.get_workflow_handle(run_key).result()


def began(result: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(result["started_at"])


def accepted_at(result: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(result["input"]["initiation"]["accepted_at"])


async def replays(client: Client, name: str) -> None:
    """The activation's history replays (the time-skipping server lists no workflows: one run, fetched)."""
    history = await client.get_workflow_handle(workflow_id_for(name)).fetch_history()
    await assert_replays_history(history, name)


async def not_started(client: Client, *run_keys: str) -> None:
    for key in run_keys:
        assert await describe_or_none(client, key) is None, f"{key} started before its window had room"


async def test_runs_past_the_rate_wait_in_order_and_start_as_the_window_slides_none_dropped(
    ts_wfi: WfiClient, ts_env: WorkflowEnvironment, ts_activate, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-11, EXT-8, INIT-7
    client, wfi, name = ts_env.client, ts_wfi, unique("throttled")
    await ts_activate(make_spec(tmp_path, HOOK.format(name=name), task_queue=task_queue, lifecycle_events=False,
                                throttle={"runs": 3, "per": "1h"}))
    first = [await wfi.deliver(name, hook("e0"))]
    for n in range(1, 3):  # three runs, ten minutes apart: the window's three starts
        await ts_env.sleep(APART)
        first.append(await wfi.deliver(name, hook(f"e{n}")))
    waiting = [await wfi.deliver(name, hook(f"e{n}")) for n in range(3, 8)]
    assert [r.disposition for r in first + waiting] == [Disposition.ACCEPTED] * 3 + [Disposition.QUEUED] * 5
    marks = [accepted_at(await result_of(client, r.run_key)) for r in first]  # started as they were accepted
    await not_started(client, *(r.run_key for r in waiting))
    throttle = (await wfi.summary(name))["throttle"]
    assert (throttle["waiting"], throttle["runs"], throttle["per"]) == (5, 3, "1h")
    assert datetime.fromisoformat(throttle["next_start_at"]) == marks[0] + HOUR, "when e0 leaves the window"

    # Each waiting run starts as the start before it leaves the window: 1h after e0, e1, e2, then e3, e4.
    due = [marks[0] + HOUR, marks[1] + HOUR, marks[2] + HOUR]
    await ts_env.sleep(marks[0] + HOUR + timedelta(minutes=1) - marks[2])  # the server's clock is at marks[2]
    e3 = await result_of(client, waiting[0].run_key)
    assert began(e3) >= due[0]
    await not_started(client, *(r.run_key for r in waiting[1:]))
    await ts_env.sleep(2 * APART)
    later = [await result_of(client, r.run_key) for r in waiting[1:3]]
    assert [began(r) >= d for r, d in zip(later, due[1:], strict=True)] == [True, True]
    await not_started(client, waiting[3].run_key, waiting[4].run_key)
    await ts_env.sleep(HOUR)
    last = [await result_of(client, r.run_key) for r in waiting[3:]]
    assert began(last[0]) >= marks[0] + 2 * HOUR and began(last[1]) >= marks[1] + 2 * HOUR, "after e3's and e4's"
    starts = [began(r) for r in [e3, *later, *last]]
    assert starts == sorted(starts), "in acceptance order"

    summary = await wfi.summary(name)
    assert summary["throttle"]["waiting"] == 0 and summary["counters"]["runs_started"] == 8
    assert "runs_dropped" not in summary["counters"] and summary["runs_pending"] == 0
    await ts_env.sleep(HOUR)  # the window empties: a normal delivery starts its run at once
    await still_serves(wfi, client, name)
    await replays(client, name)


async def test_a_keyed_throttle_holds_each_key_to_its_rate_and_no_key_holds_another(
    ts_wfi: WfiClient, ts_env: WorkflowEnvironment, ts_activate, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-11, TRIG-13
    client, wfi, name = ts_env.client, ts_wfi, unique("per-customer")
    await ts_activate(make_spec(tmp_path, HOOK.format(name=name), task_queue=task_queue, lifecycle_events=False,
                                throttle={"runs": 1, "per": "1h", "key": "{{ hook.body.customer }}"}))
    a0 = await wfi.deliver(name, hook("a0", customer="acme"))
    a1 = await wfi.deliver(name, hook("a1", customer="acme"))
    b0 = await wfi.deliver(name, hook("b0", customer="umbrella"))
    fault = await wfi.deliver(name, hook("no-customer"))
    assert [r.disposition for r in (a0, a1, b0, fault)] == [
        Disposition.ACCEPTED, Disposition.QUEUED, Disposition.ACCEPTED, Disposition.KEY_FAULT]
    await result_of(client, b0.run_key)  # another key's run is not held behind acme's
    await not_started(client, a1.run_key)
    mark = accepted_at(await result_of(client, a0.run_key))
    assert (await wfi.summary(name))["throttle"]["lines"] == [
        {"key": '"acme"', "waiting": 1, "first": a1.run_key, "next_start_at": (mark + HOUR).isoformat()}]
    page = (await pages(client, [name]))[0].markdown
    assert (f"**throttle** 1 run(s) per 1h per key `{{{{ hook.body.customer }}}}` · **1 waiting** (1 key) · "
            f"next start {utc(mark + HOUR)}") in page, page
    await ts_env.sleep(HOUR + timedelta(minutes=1))
    assert began(await result_of(client, a1.run_key)) >= mark + HOUR
    await still_serves(wfi, client, name, customer="initech")
    await replays(client, name)


async def test_a_sharded_activation_keeps_its_throttle_on_shard_zero_and_the_rate_holds_across_shards(
    wfi: WfiClient, dev_env: WorkflowEnvironment, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-11, EXT-8
    client, name, per = dev_env.client, unique("sharded-throttle"), timedelta(seconds=4)
    await wfi.activate(make_spec(tmp_path, HOOK.format(name=name), task_queue=task_queue, lifecycle_events=False,
                                 throttle={"runs": 2, "per": "4s"}, scale={"shards": 2}))
    answers = [await wfi.deliver(name, hook(f"s{n}")) for n in range(5)]
    assert [a.disposition for a in answers] == [Disposition.ACCEPTED] * 2 + [Disposition.QUEUED] * 3
    summary = await wfi.summary(name)
    assert summary["throttle"]["waiting"] == 3, "shard 0 keeps the one window of the whole activation"
    results = [await result_of(client, a.run_key) for a in answers[:2]]
    marks = [accepted_at(r) for r in results]
    results += [await result_of(client, a.run_key) for a in answers[2:]]
    starts = [began(r) for r in results]
    assert starts[2] >= marks[0] + per and starts[3] >= marks[1] + per, "two a window, whatever shard took the id"
    assert starts[4] >= marks[0] + 2 * per, "the fifth once the third's start left the window"
    # the third and fourth are let go together (the first two left the window milliseconds apart) and
    # started side by side: which of them the server started first is not a window's order
    assert max(starts[:2]) <= min(starts[2:]) and max(starts[2:4]) <= starts[4], starts
    await until_passed(starts[4] + per)  # the window empties: a normal delivery starts its run at once
    await still_serves(wfi, client, name, "after-throttle")
    for shard in range(2):
        await assert_replays(client, shard_workflow_id(name, shard))
