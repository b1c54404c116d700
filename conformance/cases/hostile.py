"""Hostile input checked from outside: no payload, delivery id or operator action within
the documented limits may wedge an activation, stall it or make an acknowledged delivery disappear.

Each case sends exactly one kind of hostile input, the way a sender would: through ``wfi`` (which
must refuse what it can with a one-line error) and through a plain Temporal client, as a webhook
bridge that does no checking would (signal ``deliver_signal`` or update ``deliver`` on the
activation's workflow id ``wfi-activation:<name>``). Then it proves the activation still accepts a
normal delivery and starts its run. Limits are those of docs/limits.md.
"""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from wf_initiation.conformance.kit import EXTERNAL, POLLING, SCHEDULED, Target, WorkfilePair, case, check, eventually
from wf_initiation.wire import DELIVER_SIGNAL, DELIVER_UPDATE, ECHO_RUN_WORKFLOW, workflow_id_for

from ._feed import FeedServer, rss_document

WAIT_S = 90.0
HOOK = """name: {name}
on:
  http.request: {{path: /hooks/{name}}}
  as: hook
steps:
  - id: handle
"""


def _pair(target: Target) -> WorkfilePair:
    name = target.unique("hostile")
    run = {"workflow_type": ECHO_RUN_WORKFLOW, "task_queue": target.deployment.temporal.task_queue}
    return target.write_pair(name, HOOK.format(name=name), {"run": run})


def _hook(ident: str, **body: Any) -> dict[str, Any]:
    return {"delivery_id": ident, "method": "POST", "body": body}


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


async def _cli_deliver(target: Target, pair: WorkfilePair, payload_text: str) -> Any:
    path = target.write(f"{target.unique('payload')}.json", payload_text)  # 200 KB is past an argv's limit
    return await target.wfi("deliver", "--payload-file", str(path), "--workflow", pair.workflow,
                            "--deployment", str(pair.deployment), "--json")


async def _plain_handle(target: Target, pair: WorkfilePair) -> Any:
    return (await target.client()).get_workflow_handle(workflow_id_for(pair.workflow))


async def _plain_signal(target: Target, pair: WorkfilePair, payload: Any) -> None:
    await (await _plain_handle(target, pair)).signal(DELIVER_SIGNAL, {"entry": None, "payload": payload})


async def _plain_update(target: Target, pair: WorkfilePair, payload: Any) -> dict[str, Any]:
    return await (await _plain_handle(target, pair)).execute_update(
        DELIVER_UPDATE, {"entry": None, "payload": payload}, id=uuid.uuid4().hex, result_type=dict)


def _one_line_refusal(result: Any, fragment: str) -> None:
    said = (result.stdout + result.stderr).strip()
    check(result.code not in (0,) and fragment in said and "Traceback" not in said and len(said.splitlines()) <= 2,
          f"expected a one-line refusal naming {fragment!r}:\n{result.describe()}")


async def _errors(target: Target, pair: WorkfilePair, kind: str) -> list[dict[str, Any]]:
    return [e for e in (await target.state(pair))["errors"] if e["kind"] == kind]


async def _still_serves(target: Target, pair: WorkfilePair, **body: Any) -> None:
    ident = target.unique("normal")
    result = await _cli_deliver(target, pair, json.dumps(_hook(ident, **(body or {"ok": True}))))
    check(result.code == 0 and result.json()["disposition"] == "accepted",
          f"after the hostile input a normal delivery must be accepted:\n{result.describe()}")
    run_key = result.json()["run_key"]
    await eventually(lambda: target.run_started(run_key), lambda found: found is not None,
                     f"the normal delivery's run {run_key} to start", timeout=WAIT_S)


@case(capability=EXTERNAL, clauses=["EXT-2", "EXT-9", "EXT-10", "INIT-7"])
async def a_deeply_nested_body_is_refused_as_invalid_and_later_runs_still_start(target: Target) -> None:
    pair = _pair(target)
    await target.activate(pair)
    _one_line_refusal(await _cli_deliver(target, pair, json.dumps(_hook("deep-cli", x=_nested(200)))), "levels")
    answers = [await _plain_update(target, pair, _hook(f"deep-{i}", x=_nested(100 + 50 * (i % 2)))) for i in range(4)]
    check([a["disposition"] for a in answers] == ["invalid"] * 4 and all(a.get("message") for a in answers),
          f"a body nested past the limit is invalid, with the reason: {answers}")
    await _plain_signal(target, pair, _hook("deep-signal", x=_nested(230)))
    await eventually(lambda: _errors(target, pair, "invalid"), lambda errors: len(errors) >= 5,
                     "the signalled deep body recorded as invalid (never dropped)", timeout=WAIT_S, describe=str)
    await _still_serves(target, pair)


@case(capability=EXTERNAL, clauses=["EXT-8", "INIT-7"])
async def fifteen_concurrent_200kb_deliveries_all_start_their_runs(target: Target) -> None:
    pair = _pair(target)
    await target.activate(pair)
    body = "v" * 200_000
    await asyncio.gather(*(_plain_signal(target, pair, _hook(f"vol-{i}", text=body)) for i in range(15)))

    async def run_keys() -> list[str | None]:
        events = (await target.state(pair, events=True))["events"]
        return [events.get(f"hook\x1fvol-{i}", {}).get("run_key") for i in range(15)]

    found = await eventually(run_keys, lambda ks: all(ks), "all 15 deliveries accepted", timeout=WAIT_S, describe=str)
    for key in [k for k in found if k]:  # all 15: eventually waited for that
        await eventually(functools.partial(target.run_started, key), lambda found: found is not None,
                         f"run {key} to start", timeout=WAIT_S)
    await _still_serves(target, pair)


@case(capability=EXTERNAL, clauses=["EXT-10", "INIT-7"])
async def invalid_deliveries_with_huge_ids_keep_the_state_small(target: Target) -> None:
    pair = _pair(target)
    await target.activate(pair)
    for i in range(12):
        result = await _cli_deliver(target, pair, json.dumps(_hook(f"{i:02d}" + "i" * 200_000)))
        check(result.code == 1 and result.json()["disposition"] == "invalid", f"a 200 KB id is invalid:\n{result.describe()}")
        check(len(result.stdout) < 4_000, "the answer does not echo the 200 KB id")
    state = await target.wfi("state", "--workflow", pair.workflow, "--deployment", str(pair.deployment), "--json")
    check(state.code == 0 and len(state.stdout) < 200_000, f"`wfi state` answers, and small: {len(state.stdout)} bytes")
    await _still_serves(target, pair)


@case(capability=EXTERNAL, clauses=["EXT-9", "EXT-10"])
async def nan_and_infinity_are_refused_before_sending_and_invalid_when_sent(target: Target) -> None:
    pair = _pair(target)
    await target.activate(pair)
    for literal in ("NaN", "Infinity", "-Infinity"):
        text = json.dumps(_hook("n-cli", x=0)).replace('"x": 0', f'"x": {literal}')
        _one_line_refusal(await _cli_deliver(target, pair, text), "JSON number")
    answer = await _plain_update(target, pair, _hook("n-update", x=float("nan")))
    check(answer["disposition"] == "invalid", f"NaN by update is invalid: {answer}")
    await _plain_signal(target, pair, _hook("n-signal", x=float("inf")))
    await eventually(lambda: _errors(target, pair, "invalid"), lambda errors: len(errors) >= 2,
                     "the signalled Infinity recorded as invalid", timeout=WAIT_S, describe=str)
    await _still_serves(target, pair)


GUARDED = """name: {name}
on:
  http.request: {{path: /hooks/{name}}}
  as: hook
  when: "{{{{ hook.body.base ** hook.body.exp > 0 and (hook.body.label * hook.body.qty) != '' }}}}"
steps:
  - id: handle
"""


@case(capability=EXTERNAL, clauses=["BATCH-8", "INIT-7"])
async def payload_controlled_expression_cost_ends_as_a_guard_fault_and_later_runs_still_start(target: Target) -> None:
    # Blocker 5: `base ** exp` with exp 10^7, or `label * qty` with a large qty, once held the worker
    # for minutes and grew it to gigabytes; within the expression budgets each ends at once.
    name = target.unique("hostile-expr")
    run = {"workflow_type": ECHO_RUN_WORKFLOW, "task_queue": target.deployment.temporal.task_queue}
    pair = target.write_pair(name, GUARDED.format(name=name), {"run": run})
    await target.activate(pair)
    bodies = [{"base": 3, "exp": 10**7, "label": "x", "qty": 1}, {"base": 2, "exp": 1, "label": "x", "qty": 10**10}]
    for i, body in enumerate(bodies):
        result = await _cli_deliver(target, pair, json.dumps(_hook(f"cost-{i}", **body)))
        check(result.json().get("disposition") == "guard_fault" and result.json().get("message"),
              f"an over-budget expression is a guard fault with its reason:\n{result.describe()}")
    await _still_serves(target, pair, base=2, exp=3, label="x", qty=2)


TICKS = """name: {name}
on:
  time.schedule: {{cron: "* * * * *", timezone: UTC, end: "{end}"}}
  as: tick
  when: "{{{{ tick.scheduled_at.endswith(':00:00+00:00') }}}}"
steps:
  - id: handle
"""


@case(capability=SCHEDULED, clauses=["SCHED-5", "SCHED-9"])
async def a_backfill_of_3000_minutes_completes_and_a_later_backfill_still_starts_its_run(target: Target) -> None:
    name = target.unique("backfill")
    end = datetime.now(UTC) - timedelta(days=1)
    run = {"workflow_type": ECHO_RUN_WORKFLOW, "task_queue": target.unique("conformance-runs")}
    pair = target.write_pair(name, TICKS.format(name=name, end=end.isoformat()), {"run": run})
    await target.activate(pair)
    first = (end - timedelta(days=5)).replace(second=0, microsecond=0)
    await target.operate(pair, "backfill", "--entry", "tick", "--start", first.isoformat(),
                         "--end", (first + timedelta(minutes=2999)).isoformat())

    async def jobs() -> list[dict[str, Any]]:
        return (await target.state(pair))["schedules"]["tick"].get("jobs", [])

    done = await eventually(jobs, lambda js: bool(js) and js[-1]["status"] == "done",
                            "the 3,000-occurrence backfill to finish", timeout=WAIT_S * 2, describe=str)
    check(done[-1]["total"] == 3000 and done[-1]["admitted"] + done[-1]["other"] == 3000,
          f"every one of the 3,000 occurrences was disposed: {done[-1]}")
    later = first + timedelta(days=3)
    result = await target.operate(pair, "backfill", "--entry", "tick", "--start", later.isoformat(),
                                  "--end", (later + timedelta(minutes=59)).isoformat())
    check(result["ok"] and result["message"].startswith("1 admitted"), f"a later hour's backfill admits its run: {result}")
    state = await target.state(pair)
    admitted = [o for o in state["schedules"]["tick"]["occurrences"] if o["disposition"] == "backfilled"]
    key = admitted[-1]["run_key"]
    await eventually(lambda: target.run_started(key), lambda found: found is not None, f"run {key} to start",
                     timeout=WAIT_S)


FEED = """name: {name}
on:
  rss.item_published: {{feed: "{url}"}}
  as: post
steps:
  - id: handle
"""
FEED_POLL = {"interval": "200ms", "backoff_initial": "200ms", "backoff_max": "1s", "limit": 50, "timeout": "3s"}


def _feed_pair(target: Target, url: str, runs: str) -> WorkfilePair:
    name = target.unique("feed")
    run = {"workflow_type": ECHO_RUN_WORKFLOW, "task_queue": runs}
    return target.write_pair(name, FEED.format(name=name, url=url), {"run": run, "poll": FEED_POLL})


def _posts(state: dict[str, Any]) -> list[dict[str, Any]]:
    events = sorted(state.get("events", {}).values(), key=lambda e: e["seq"])
    return [e for e in events if e["entry"] == "post" and e["disposition"] == "accepted"]


def _cut_at_deadline_twice(state: dict[str, Any]) -> bool:
    poll = state["polls"]["post"]
    return bool(poll["failures"] >= 2 and "deadline" in (poll["last_error"] or ""))


def _accepted_are(guids: list[str], state: dict[str, Any]) -> bool:
    return [e["delivery_id"] for e in _posts(state)] == guids


def _one_post(state: dict[str, Any]) -> bool:
    return len(_posts(state)) == 1


def _polls(state: dict[str, Any]) -> str:
    return json.dumps(state.get("polls"), default=str)[:800]


@case(capability=POLLING, clauses=["POLL-10", "POLL-2"])
async def a_trickling_feed_is_cut_at_its_deadline_and_starves_no_other_poll(target: Target) -> None:
    # The feed sends one byte every 2 s and never finishes. Three activations poll it; each poll must
    # end at its deadline (poll.timeout 3 s) as a recorded failure, and the worker must keep polling
    # another feed on time meanwhile. Once the feed answers, the three recover and start their runs.
    runs = target.unique("conformance-runs")
    with FeedServer() as slow, FeedServer() as fast:
        slow.trickle(2.0)
        stuck = [_feed_pair(target, slow.url, runs) for _ in range(3)]
        other = _feed_pair(target, fast.url, runs)
        for pair in (*stuck, other):
            await target.activate(pair)
        for pair in stuck:
            await eventually(functools.partial(target.state, pair), _cut_at_deadline_twice,
                             f"{pair.workflow}'s polls of the trickling feed to end at their deadline, twice",
                             timeout=WAIT_S, describe=_polls)
        for round_ in range(3):  # the other feed is polled on time, round after round
            guids = [f"post-{i}" for i in range(round_ + 1)]
            fast.serve(rss_document(guids))
            await eventually(functools.partial(target.state, other, events=True), functools.partial(_accepted_are, guids),
                             f"the other feed's items {guids} accepted while the first feed trickles", timeout=45.0,
                             describe=_polls)
        slow.serve(rss_document(["post-1"]))
        for pair in stuck:
            state = await eventually(functools.partial(target.state, pair, events=True), _one_post,
                                     f"{pair.workflow} to recover and accept post-1 once the feed answers",
                                     timeout=WAIT_S, describe=_polls)
            key = _posts(state)[0]["run_key"]
            await eventually(functools.partial(target.run_started, key), lambda found: found is not None, f"run {key} to start",
                             timeout=WAIT_S)


CASES = (
    a_deeply_nested_body_is_refused_as_invalid_and_later_runs_still_start,
    fifteen_concurrent_200kb_deliveries_all_start_their_runs,
    invalid_deliveries_with_huge_ids_keep_the_state_small,
    nan_and_infinity_are_refused_before_sending_and_invalid_when_sent,
    payload_controlled_expression_cost_ends_as_a_guard_fault_and_later_runs_still_start,
    a_backfill_of_3000_minutes_completes_and_a_later_backfill_still_starts_its_run,
    a_trickling_feed_is_cut_at_its_deadline_and_starves_no_other_poll,
)
