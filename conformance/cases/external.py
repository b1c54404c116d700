"""External-event initiation checked from outside (EXT-*, INIT-*, TRIG-8..14): webhook deliveries.

Each case writes an ``http.request`` Workfile and a deployment, activates it with ``wfi activate``,
delivers with ``wfi deliver --json`` (exit 0 for an acceptance-like disposition, 1 otherwise; the
result is printed either way), reads the activation with ``wfi state --events --json`` and, where a
run has to be suspended or ended, uses the Temporal client on the run's workflow id (the run key).
Runs are ``wfi.EchoRun`` on the deployment's own task queue (its worker registers that workflow):
a payload body with ``hold: true`` suspends a run until its ``release`` signal.
"""

from __future__ import annotations

import json
from typing import Any

from wf_initiation.conformance.kit import EXTERNAL, CaseFailed, Target, WorkfilePair, case, check, eventually
from wf_initiation.wire import ECHO_RUN_RELEASE_SIGNAL, ECHO_RUN_WORKFLOW

WAIT_S = 60.0
HOOK = """name: {name}
inputs:
  team: {{default: blue}}
on:
  http.request: {{path: /hooks/{name}}}
  as: hook
  when: "{{{{ hook.body.go }}}}"
  queue_by: "{{{{ hook.body.key }}}}"
steps:
  - id: handle
"""


def _pair(target: Target, **settings: Any) -> WorkfilePair:
    name = target.unique("hook")
    run = {"workflow_type": ECHO_RUN_WORKFLOW, "task_queue": target.deployment.temporal.task_queue}
    return target.write_pair(name, HOOK.format(name=name), {"run": run, **settings})


async def _deliver(target: Target, pair: WorkfilePair, payload: dict[str, Any]) -> dict[str, Any]:
    result = await target.wfi("deliver", "--payload", json.dumps(payload), "--update-id", target.unique("u"),
                              "--workflow", pair.workflow, "--deployment", str(pair.deployment), "--json")
    check(result.code in (0, 1) and result.stdout.strip(), f"`wfi deliver` failed:\n{result.describe()}")
    return result.json()


def _hook(ident: str, **body: Any) -> dict[str, Any]:
    return {"delivery_id": ident, "method": "POST", "body": {"go": True, "key": "k", **body}}


async def _expect(target: Target, pair: WorkfilePair, payload: dict[str, Any], disposition: str) -> dict[str, Any]:
    got = await _deliver(target, pair, payload)
    check(got["disposition"] == disposition, f"{payload['delivery_id']}: expected {disposition}, got {got}")
    return got


async def _start_time(target: Target, run_key: str) -> Any:
    found = await target.run_started(run_key)
    if found is None:
        raise CaseFailed(f"run {run_key} does not exist")
    return found[0]


async def _run_status(target: Target, run_key: str) -> str | None:
    found = await target.run_started(run_key)
    if found is None:
        return None
    desc = await (await target.client()).get_workflow_handle(run_key).describe()
    return desc.status.name if desc.status else None


@case(capability=EXTERNAL, clauses=["EXT-1", "EXT-2", "EXT-3", "EXT-4", "EXT-9", "EXT-10", "EXT-12", "TRIG-8",
                                    "TRIG-9", "TRIG-13", "INIT-6"])
async def every_disposition_of_a_delivery_is_returned_and_recorded(target: Target) -> None:
    pair = _pair(target)
    await target.activate(pair)
    first = await _expect(target, pair, _hook("a1"), "accepted")
    again = await _expect(target, pair, _hook("a1"), "duplicate")
    check(again["run_key"] == first["run_key"], "a duplicate names the first delivery's run")
    await _expect(target, pair, _hook("a1", extra="changed"), "conflict")
    await _expect(target, pair, _hook("s1", go=False), "suppressed")
    await _expect(target, pair, {"delivery_id": "g1", "method": "POST", "body": {"key": "k"}}, "guard_fault")
    await _expect(target, pair, {"delivery_id": "k1", "method": "POST", "body": {"go": True}}, "key_fault")
    await _expect(target, pair, {"delivery_id": "v1", "body": {}}, "invalid")
    await _expect(target, pair, _hook("v1", key="other"), "accepted")  # an invalid delivery consumed nothing
    state = await target.state(pair, events=True)
    kinds = [e["kind"] for e in state["errors"]]
    for kind in ("conflict", "guard_fault", "key_fault", "invalid"):
        check(kind in kinds, f"a {kind} is recorded as an initiation error; errors: {kinds}")
    check(state["events"]["hook\x1fs1"]["disposition"] == "suppressed", "the suppressed event is recorded")
    check(state["events"]["hook\x1fa1"]["disposition"] == "accepted", "the first payload stands")


@case(capability=EXTERNAL, clauses=["EXT-11", "TRIG-11", "TRIG-14", "EXT-5"])
async def equal_keys_run_one_at_a_time_in_acceptance_order_and_a_suspended_run_holds_its_key(target: Target) -> None:
    pair = _pair(target)
    await target.activate(pair)
    held = await _expect(target, pair, _hook("q1", hold=True), "accepted")
    second = await _expect(target, pair, _hook("q2", hold=True), "queued")
    third = await _expect(target, pair, _hook("q3"), "queued")
    await eventually(lambda: _run_status(target, held["run_key"]), lambda s: s == "RUNNING", "the first run to run",
                     timeout=WAIT_S, describe=str)
    check(await _run_status(target, second["run_key"]) is None, "a suspended run keeps its key: q2 has not started")
    client = await target.client()
    await client.get_workflow_handle(held["run_key"]).signal(ECHO_RUN_RELEASE_SIGNAL)
    await eventually(lambda: _run_status(target, second["run_key"]), lambda s: s == "RUNNING",
                     "q2 to start once q1 completed", timeout=WAIT_S, describe=str)
    await client.get_workflow_handle(second["run_key"]).terminate("conformance: a terminated run releases its key")
    await eventually(lambda: _run_status(target, third["run_key"]), lambda s: s == "COMPLETED",
                     "q3 to run once q2 was terminated", timeout=WAIT_S, describe=str)
    starts = [await _start_time(target, r["run_key"]) for r in (held, second, third)]
    check(starts == sorted(starts), f"runs of one key start in acceptance order: {starts}")
    state = await target.state(pair, events=True)
    check(state["events"]["hook\x1fq2"]["released_at"] is not None, "retention starts at the terminal outcome")


@case(capability=EXTERNAL, clauses=["EXT-13", "EXT-12"])
async def overlap_skip_consumes_the_delivery_and_leaves_it_deduplicated(target: Target) -> None:
    pair = _pair(target, overlap="skip")
    await target.activate(pair)
    held = await _expect(target, pair, _hook("o1", key="a", hold=True), "accepted")
    await _expect(target, pair, _hook("o2", key="b", go=False), "suppressed")  # `when` comes before overlap
    await _expect(target, pair, _hook("o3", key="c"), "skipped")
    again = await _expect(target, pair, _hook("o3", key="c"), "duplicate")
    check(again.get("retained") == "skipped", f"a skipped delivery stays deduplicated: {again}")
    await (await target.client()).get_workflow_handle(held["run_key"]).signal(ECHO_RUN_RELEASE_SIGNAL)


@case(capability=EXTERNAL, clauses=["INIT-3", "INIT-4", "INIT-5"])
async def a_changed_input_is_a_new_activation_that_keeps_what_the_old_one_accepted(target: Target) -> None:
    pair = _pair(target)
    first = await target.activate(pair)
    check((await target.activate(pair))["activation_id"] == first["activation_id"], "activating twice: same id")
    held = await _expect(target, pair, _hook("r1", hold=True), "accepted")
    waiting = await _expect(target, pair, _hook("r2"), "queued")
    changed = target.write_pair(pair.workflow, pair.workfile.read_text(),
                                {"run": {"workflow_type": ECHO_RUN_WORKFLOW, "task_queue": target.deployment.temporal.task_queue},
                                 "inputs": {"team": "red"}})
    second = await target.activate(changed)
    check(second["activation_id"] != first["activation_id"], "a changed deployment input is a new activation")
    await (await target.client()).get_workflow_handle(held["run_key"]).signal(ECHO_RUN_RELEASE_SIGNAL)
    await eventually(lambda: _run_status(target, waiting["run_key"]), lambda s: s == "COMPLETED",
                     "the queued run accepted by the old activation to run", timeout=WAIT_S, describe=str)
    result = await (await target.client()).get_workflow_handle(waiting["run_key"]).result()
    check(result["input"]["initiation"]["activation_id"] == first["activation_id"],
          "the old activation's accepted event keeps its binding")
    again = await _expect(target, changed, _hook("r2"), "duplicate")
    check(again["run_key"] == waiting["run_key"], "the new activation does not re-run it")


CASES = (
    every_disposition_of_a_delivery_is_returned_and_recorded,
    equal_keys_run_one_at_a_time_in_acceptance_order_and_a_suspended_run_holds_its_key,
    overlap_skip_consumes_the_delivery_and_leaves_it_deduplicated,
    a_changed_input_is_a_new_activation_that_keeps_what_the_old_one_accepted,
)
