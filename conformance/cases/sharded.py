"""A sharded activation checked from outside (deployment ``scale: {shards: N}``; docs/limits.md).

The activation runs as N Temporal workflows, each taking the deliveries whose id routes to it (the
rule docs/wire.md publishes); every guarantee of one activation holds across them. These cases drive it only
through ``wfi activate``, ``wfi deliver``, ``wfi state`` and ``wfi deactivate`` (the kit's cleanup),
so a sharded deployment is proved the way an operator would use it. Operator actions (pause,
resume, poll_now, set_cursor, backfill, ...) name schedule and poll entries, which shard 0 alone
runs, so they need no fan-out; a deactivation reaches every shard with one action id.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from wf_initiation.conformance.cases.composition import REPLIES
from wf_initiation.conformance.kit import EXTERNAL, CaseFailed, Target, WorkfilePair, case, check, eventually
from wf_initiation.wire import (
    ECHO_RUN_RELEASE_SIGNAL,
    ECHO_RUN_WORKFLOW,
    ROUTING_QUERY,
    WAIT_FOR_EXAMPLE_WORKFLOW,
    WaitRequest,
    workflow_id_for,
)

SHARDS = 4
HOOK = """name: {name}
on:
  http.request: {{path: /hooks/{name}}}
  as: hook
  when: "{{{{ hook.body.go }}}}"
steps:
  - id: handle
"""


# Each key's events are queued and run by the key's shard (core.sharding, lanes).
KEYED = """name: {name}
on:
  http.request: {{path: /hooks/{name}}}
  as: hook
  queue_by: "{{{{ hook.body.key }}}}"
steps:
  - id: handle
"""


def _pair(target: Target, shards: int = SHARDS, workfile: str = HOOK) -> WorkfilePair:
    name = target.unique("sharded")
    run = {"workflow_type": ECHO_RUN_WORKFLOW, "task_queue": target.deployment.temporal.task_queue}
    return target.write_pair(name, workfile.format(name=name), {"run": run, "scale": {"shards": shards}})


async def _routed_shards(target: Target, workflow: str) -> int:
    """How many shards the activation spreads its deliveries over: shard 0's ``routing`` query."""
    routing = await (await target.client()).get_workflow_handle(workflow_id_for(workflow)).query(ROUTING_QUERY)
    return int(routing["shards"])


def _published_shard(entry: str, delivery_id: str, shards: int) -> int:
    """The shard that takes a delivery id, by the rule docs/wire.md publishes for bridges in any
    language ("Routing for a sharded activation"), computed here as such a bridge would."""
    digest = hashlib.sha256(f"{entry}\x1f{delivery_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


async def _deliver(target: Target, pair: WorkfilePair, ident: str, **body: Any) -> dict[str, Any]:
    payload = {"delivery_id": ident, "method": "POST", "body": {"go": True, **body}}
    result = await target.wfi("deliver", "--payload", json.dumps(payload), "--update-id", target.unique("u"),
                              "--workflow", pair.workflow, "--deployment", str(pair.deployment), "--json")
    check(result.code in (0, 1) and result.stdout.strip(), f"`wfi deliver` failed:\n{result.describe()}")
    return result.json()


@case(capability=EXTERNAL, clauses=["EXT-3", "EXT-4", "EXT-8", "EXT-1", "TRIG-13"])
async def a_sharded_activation_deduplicates_and_records_conflicts_across_its_shards(target: Target) -> None:
    pair = _pair(target)
    await target.activate(pair)
    idents = [f"s{i}" for i in range(12)]
    first = {i: await _deliver(target, pair, i) for i in idents}
    check(all(r["disposition"] == "accepted" for r in first.values()), f"each new id is accepted: {first}")
    for ident in idents:
        again = await _deliver(target, pair, ident)
        check(again["disposition"] == "duplicate" and again["run_key"] == first[ident]["run_key"],
              f"{ident} delivered again: a duplicate naming the first run, got {again}")
    for ident in idents[:3]:
        changed = await _deliver(target, pair, ident, extra="changed")
        check(changed["disposition"] == "conflict", f"{ident} with another payload: a conflict, got {changed}")
    quiet = await _deliver(target, pair, "q0", go=False)
    check(quiet["disposition"] == "suppressed", f"`when` false: suppressed, got {quiet}")
    for ident in idents:
        if await target.run_started(first[ident]["run_key"]) is None:
            raise CaseFailed(f"the run of {ident} ({first[ident]['run_key']}) was never started")
    state = await target.state(pair, events=True)
    summary = state["summary"]
    parts = summary.get("shards") or []
    check(len(parts) == SHARDS, f"the summary shows each of the {SHARDS} shards: {parts}")
    busy = [p for p in parts if p.get("dedup_entries")]
    check(len(busy) >= 2, f"12 ids spread over more than one shard: {parts}")
    check(summary.get("dedup_entries") == len(idents) + 1, f"the whole activation holds 13 entries: {summary}")
    check(sum(1 for e in state["errors"] if e["kind"] == "conflict") == 3, "each conflict is an initiation error")
    keys = {f"hook\x1f{i}" for i in (*idents, "q0")}
    check(keys <= set(state["events"]), f"every shard's entries are listed: missing {sorted(keys - set(state['events']))}")
    check(all(state["events"][f"hook\x1f{i}"]["run_key"] == first[i]["run_key"] for i in idents),
          "the first payload's run stands")


@case(capability=EXTERNAL, clauses=["INIT-3", "INIT-4", "EXT-3"])
async def a_sharded_activation_is_activated_once_and_splits_into_more_shards_keeping_its_ids(target: Target) -> None:
    pair = _pair(target)
    first = await target.activate(pair)
    again = await target.activate(pair)
    check(again["activation_id"] == first["activation_id"] and again["outcome"] == "unchanged",
          f"activating the same sharded Workfile twice changes nothing: {again}")
    idents = [f"r{i}" for i in range(8)]
    accepted = {i: await _deliver(target, pair, i) for i in idents}
    check(all(a["disposition"] == "accepted" for a in accepted.values()), f"deliveries are accepted: {accepted}")
    run = {"run": {"workflow_type": ECHO_RUN_WORKFLOW, "task_queue": target.deployment.temporal.task_queue}}
    grown = target.write_pair(pair.workflow, pair.workfile.read_text(), {**run, "scale": {"shards": SHARDS * 2}})
    split = await target.wfi("activate", str(grown.workfile), "--deployment", str(grown.deployment), "--json")
    check(split.code == 0, f"a live activation is split into more shards:\n{split.describe()}")
    check("split from" in split.stdout, f"the answer says it was split:\n{split.describe()}")
    for i in idents:  # whichever shard an id routes to now, it answers with the id's first run
        after = await _deliver(target, grown, i)
        check(after["disposition"] == "duplicate" and after["run_key"] == accepted[i]["run_key"],
              f"{i} keeps its first run across the split: {after}")
    fewer = target.write_pair(pair.workflow, pair.workfile.read_text(), {**run, "scale": {"shards": SHARDS}})
    refused = await target.wfi("activate", str(fewer.workfile), "--deployment", str(fewer.deployment), "--json")
    check(refused.code != 0, f"merging a live activation into fewer shards is refused:\n{refused.describe()}")
    check("fewer" in (refused.stdout + refused.stderr), f"the refusal names the reason:\n{refused.describe()}")
    check(len((await target.state(grown))["summary"].get("shards") or []) == SHARDS * 2, "on its new shards")


@case(capability=EXTERNAL, clauses=["EXT-11", "EXT-3", "EXT-4", "TRIG-12"])
async def a_sharded_activation_runs_each_queue_key_in_order_whatever_shard_its_ids_are_on(target: Target) -> None:
    pair = _pair(target, workfile=KEYED)
    await target.activate(pair)
    keys = ("alpha", "beta", "gamma")
    # Each key's first run is held (until released below), so the next two wait behind it.
    def event(n: int) -> dict[str, Any]:
        return {"sleep_seconds": 0.3} if n else {"hold": True}

    answers = {k: [await _deliver(target, pair, f"{k}-{n}", key=k, **event(n)) for n in range(3)] for k in keys}
    for key, some in answers.items():
        check([a["disposition"] for a in some] == ["accepted", "queued", "queued"],
              f"key {key}: the first event starts its run, the next wait behind it: {some}")
    moved = await _deliver(target, pair, "alpha-0", key="delta", hold=True)
    check(moved["disposition"] == "conflict", f"the same id with another key is a conflict: {moved}")
    again = await _deliver(target, pair, "alpha-0", key="alpha", hold=True)
    check(again["disposition"] == "duplicate" and again["run_key"] == answers["alpha"][0]["run_key"],
          f"the same event again is a duplicate of its run: {again}")
    client = await target.client()

    async def release(run_key: str) -> bool:
        try:
            await client.get_workflow_handle(run_key).signal(ECHO_RUN_RELEASE_SIGNAL)
        except Exception:  # its run not started yet  # noqa: BLE001
            return False
        return True

    for first in (some[0] for some in answers.values()):
        await eventually(functools.partial(release, first["run_key"]), bool,
                         f"the held run of {first['delivery_id']} released", timeout=60)

    async def spans() -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {}
        for key, some in answers.items():
            out[key] = []
            for a in some:
                try:
                    desc = await client.get_workflow_handle(a["run_key"]).describe()
                except Exception:  # not started yet  # noqa: BLE001
                    out[key].append(None)
                else:
                    out[key].append((desc.start_time, desc.close_time))
        return out

    ran = await eventually(spans, lambda s: all(x is not None and x[1] is not None for v in s.values() for x in v),
                           "every run of every key ended", timeout=60, describe=str)
    for key, times in ran.items():
        for (_, closed), (started, _) in zip(times, times[1:]):
            check(started >= closed, f"key {key}: each run starts after the one before it ended: {times}")
    routed = sum(p.get("counters", {}).get("routed", 0) for p in (await target.state(pair))["summary"].get("shards") or [])
    check(routed >= 1, "some events were judged on their id's shard and run on their key's")


@case(capability=EXTERNAL, clauses=["INIT-8", "INIT-10"])
async def a_run_waiting_on_a_sharded_entry_gets_its_event_whatever_shard_its_id_is_on(target: Target) -> None:
    name = target.unique("sharded-replies")
    queue = target.deployment.temporal.task_queue
    pair = target.write_pair(name, REPLIES.format(name=name),
                             {"run": {"workflow_type": ECHO_RUN_WORKFLOW, "task_queue": queue}, "scale": {"shards": SHARDS}})
    await target.activate(pair)
    client = await target.client()
    waiter = await client.start_workflow(WAIT_FOR_EXAMPLE_WORKFLOW, WaitRequest(workflow=name, trigger="reply",
                                         match={"body.thread": "t1"}), id=target.unique("waiter"), task_queue=queue,
                                         result_type=dict)

    async def copies() -> list[dict[str, Any]]:
        return (await target.state(pair))["summary"].get("shards") or []

    await eventually(copies, lambda parts: len(parts) == SHARDS and all(
        p.get("counters", {}).get("subscription_copies", 0) >= 1 for p in parts[1:]),
        "every shard holds a copy of the waiting run's subscription", timeout=60, describe=str)
    shards = await _routed_shards(target, name)
    away = next(i for i in (f"r-{n}" for n in range(100)) if _published_shard("reply", i, shards) != 0)
    payload = {"delivery_id": away, "method": "POST", "body": {"thread": "t1"}}
    result = await target.wfi("deliver", "--payload", json.dumps(payload), "--entry", "reply", "--workflow", name,
                              "--deployment", str(pair.deployment), "--json")
    check(result.code in (0, 1) and result.stdout.strip(), f"`wfi deliver` failed:\n{result.describe()}")
    check(result.json()["disposition"] == "delivered", f"the event of another shard reaches the waiting run: {result.json()}")
    outcome = await waiter.result()
    check(outcome["received"] == [payload], f"the run received {outcome['received']}")


CASES = (
    a_sharded_activation_deduplicates_and_records_conflicts_across_its_shards,
    a_sharded_activation_is_activated_once_and_splits_into_more_shards_keeping_its_ids,
    a_sharded_activation_runs_each_queue_key_in_order_whatever_shard_its_ids_are_on,
    a_run_waiting_on_a_sharded_entry_gets_its_event_whatever_shard_its_id_is_on,
)
