"""Scheduled initiation checked from outside (SCHED-*, BATCH-8): ``time.schedule`` Workfiles.

Each case writes a Workfile with a ``time.schedule`` trigger (short intervals, so a case takes
seconds), activates it with ``wfi activate``, reads it with ``wfi state --json`` (the schedule's
policy, bound, occurrence records, skipped and overflow ranges, errors) and steers it with
``wfi operate``. Runs go to a task queue no worker needs to serve: a case checks that each run was
*started* (``describe`` of its run key, its input read from the start event), not what it did.
Every case pauses its schedule when done. ``wfi schedule preview`` checks the sequence itself.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from wf_initiation.conformance.kit import SCHEDULED, CaseFailed, Target, WorkfilePair, case, check, eventually
from wf_initiation.wire import ECHO_RUN_WORKFLOW

WAIT_S = 60.0


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _pair(target: Target, config: str, extra: str = "", **settings: Any) -> WorkfilePair:
    name = target.unique("sched")
    workfile = f"name: {name}\non:\n  time.schedule: {config}\n{extra}steps:\n  - id: handle\n"
    section = {"run": {"workflow_type": ECHO_RUN_WORKFLOW, "task_queue": target.unique("conformance-runs")}, **settings}
    return target.write_pair(name, workfile, section)


async def _activate(target: Target, pair: WorkfilePair) -> None:
    await target.activate(pair)


async def _state(target: Target, pair: WorkfilePair) -> dict[str, Any]:
    return await target.state(pair)


async def _operate(target: Target, pair: WorkfilePair, *args: str) -> dict[str, Any]:
    return await target.operate(pair, *args)


def _schedule(state: dict[str, Any]) -> dict[str, Any]:
    (sched,) = state["schedules"].values()
    return sched


def _log(state: dict[str, Any], *dispositions: str) -> list[dict[str, Any]]:
    return [o for o in _schedule(state)["occurrences"] if not dispositions or o["disposition"] in dispositions]


async def _until(target: Target, pair: WorkfilePair, what: str, test: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The first state for which ``test(state)`` holds, within WAIT_S; CaseFailed naming ``what``."""
    return await eventually(lambda: target.state(pair), test, what, timeout=WAIT_S,
                            describe=lambda s: json.dumps(s.get("schedules"), default=str)[:800])


async def _run_input(target: Target, run_key: str) -> tuple[datetime, dict[str, Any]]:
    """(start time, input) of a started run, read from its first history event."""
    found = await target.run_started(run_key)
    if found is None:
        raise CaseFailed(f"run {run_key} does not exist")
    return found


def _binding(run_input: dict[str, Any]) -> dict[str, Any]:
    return run_input["bindings"][run_input["trigger"]["name"]]


@case(capability=SCHEDULED, clauses=["SCHED-2"])
async def the_preview_is_reproducible_and_shifts_a_time_lost_to_daylight_saving(target: Target) -> None:
    pair = _pair(target, '{cron: "30 2 * * *", timezone: Europe/Berlin, dst: {gap: shift}}')
    args = ("schedule", "preview", str(pair.workfile), "--from", "2027-03-26T12:00:00Z", "--count", "3", "--json")
    first, second = await target.wfi(*args), await target.wfi(*args)
    check(first.code == 0 and first.stdout == second.stdout, f"two previews differ:\n{first.describe()}\n{second.describe()}")
    rows = first.json()
    got = [r["scheduled_at"] for r in rows]
    check(got == ["2027-03-27T02:30:00+01:00", "2027-03-28T03:00:00+02:00", "2027-03-29T02:30:00+02:00"],
          f"02:30 does not exist on 2027-03-28 in Berlin: expected it shifted to 03:00+02:00, got {got}")
    check(all(r.get("tzdata_version") for r in rows), f"each instant names its tz database version: {rows}")


@case(capability=SCHEDULED, clauses=["SCHED-3"])
async def an_unevaluable_cron_or_zone_is_refused_at_activation_with_a_diagnostic(target: Target) -> None:
    for config, fragment in (('{cron: "61 * * * *"}', "61"), ('{cron: "0 9 * * *", timezone: Mars/Olympus}', "Mars/Olympus")):
        pair = _pair(target, config)
        result = await target.wfi("activate", str(pair.workfile), "--deployment", str(pair.deployment), "--json")
        said = result.stdout + result.stderr
        check(result.code == 1 and fragment in said and "Traceback" not in said,
              f"expected exit 1 with a diagnostic naming {fragment!r}:\n{result.describe()}")
        state = await target.wfi("state", "--workflow", pair.workflow, "--deployment", str(pair.deployment), "--json")
        check(state.code != 0, f"a refused activation must not exist:\n{state.describe()}")


@case(capability=SCHEDULED, clauses=["SCHED-4"])
async def a_schedule_with_no_future_occurrence_is_installed_but_inactive(target: Target) -> None:
    pair = _pair(target, '{cron: "0 9 * * *", end: "2020-01-01T00:00:00Z"}')
    await _activate(target, pair)
    state = await _state(target, pair)
    sched = _schedule(state)
    check(state["summary"]["status"] == "inactive" and sched["active"] is False and sched["inactive_reason"],
          f"expected an installed, inactive activation saying why: {json.dumps(state['summary'], default=str)[:600]}")


@case(capability=SCHEDULED, clauses=["SCHED-1", "SCHED-5", "SCHED-6", "SCHED-7", "SCHED-11", "SCHED-12", "SCHED-13"])
async def each_occurrence_starts_one_run_no_earlier_than_its_instant_with_both_times(target: Target) -> None:
    pair = _pair(target, "{interval: 1s}", late_after="30s")
    await _activate(target, pair)
    state = await _until(target, pair, "four admitted occurrences", lambda s: len(_log(s, "admitted")) >= 4)
    await _operate(target, pair, "pause")
    admitted = _log(state, "admitted")
    instants = [_parse(o["scheduled_at"]) for o in admitted]
    steps = {b - a for a, b in zip(instants, instants[1:])}
    check(steps == {timedelta(seconds=1)}, f"instants stay on the 1 s grid whatever the delay: {instants}")
    keys = [o["run_key"] for o in admitted]
    check(len(set(keys)) == len(keys) and all(keys), f"one distinct run per occurrence: {keys}")
    for o, key in zip(admitted, keys):
        start, run_input = await _run_input(target, key)
        payload = _binding(run_input)
        scheduled, fired = _parse(payload["scheduled_at"]), _parse(payload["fired_at"])
        check(scheduled == _parse(o["scheduled_at"]) and fired >= scheduled and start >= scheduled,
              f"run {key}: scheduled_at {scheduled}, fired_at {fired}, started {start}")
        check("delivery_id" not in payload, f"a scheduled occurrence has no delivery id: {payload}")


@case(capability=SCHEDULED, clauses=["SCHED-5", "SCHED-8", "SCHED-9"])
async def occurrences_while_paused_are_skipped_and_a_backfill_admits_each_once(target: Target) -> None:
    pair = _pair(target, "{interval: 1s}", late_after="1m", missed={"policy": "skip"})
    await _activate(target, pair)
    await _until(target, pair, "a first admitted occurrence", lambda s: len(_log(s, "admitted")) >= 1)
    await _operate(target, pair, "pause")
    await asyncio.sleep(3.5)  # the paused stretch under test
    await _operate(target, pair, "resume")
    state = await _until(target, pair, "the paused occurrences recorded as skipped", lambda s: len(_log(s, "skipped_missed")) >= 3)
    await _operate(target, pair, "pause")
    sched = _schedule(state)
    check(sched["policy"] == "skip" and sched["missed_ranges"], f"policy and skipped range recorded: {sched}")
    skipped = [o["scheduled_at"] for o in _log(state, "skipped_missed")]
    args = ("backfill", "--entry", "schedule", "--start", skipped[0], "--end", skipped[-1])
    first = await _operate(target, pair, *args)
    again = await _operate(target, pair, *args, "--action-id", target.unique("again"))
    check(str(first.get("message", "")).startswith(f"{len(skipped)} admitted")
          and str(again.get("message", "")).startswith("0 admitted"), f"backfill twice: {first} then {again}")
    state = await _state(target, pair)
    keys = [o["run_key"] for o in _log(state, "backfilled")]
    check(len(keys) == len(skipped) == len(set(keys)), f"one run per backfilled occurrence: {keys}")
    for key in keys:
        await _run_input(target, key)


@case(capability=SCHEDULED, clauses=["SCHED-8", "SCHED-9", "SCHED-10", "SCHED-12"])
async def catch_up_beyond_its_bound_records_the_omitted_range_for_an_operator(target: Target) -> None:
    pair = _pair(target, "{interval: 1s}", late_after="1m", missed={"policy": "catch_up", "bound": 1})
    await _activate(target, pair)
    await _until(target, pair, "a first admitted occurrence", lambda s: len(_log(s, "admitted")) >= 1)
    await _operate(target, pair, "pause")
    await asyncio.sleep(4)  # the paused stretch under test
    await _operate(target, pair, "resume")
    state = await _until(target, pair, "one caught-up occurrence and an overflow range",
                         lambda s: bool(_log(s, "caught_up") and _schedule(s)["overflow"]))
    await _operate(target, pair, "pause")
    sched = _schedule(state)
    (rng,) = sched["overflow"]
    caught = _log(state, "caught_up")
    check(sched["policy"] == "catch_up" and sched["bound"] == 1 and len(caught) == 1, f"bound 1 recorded and kept: {sched}")
    check(rng["status"] == "awaiting_operator" and rng["count"] >= 2 and _parse(rng["first"]) > _parse(caught[0]["scheduled_at"]),
          f"the omitted range waits for an operator and follows the caught-up one: {rng}")
    check(state["summary"]["status"] == "needs_operator", f"status: {state['summary']['status']}")
    _, run_input = await _run_input(target, caught[0]["run_key"])
    payload = _binding(run_input)
    check(_parse(payload["fired_at"]) > _parse(payload["scheduled_at"]), f"a caught-up run keeps its instant: {payload}")
    decided = await _operate(target, pair, "decide_overflow", "--range-id", rng["range_id"], "--choice", "skip")
    state = await _state(target, pair)
    check(_schedule(state)["overflow"][0]["status"] == "skipped", f"decision recorded: {decided}, {_schedule(state)['overflow']}")


@case(capability=SCHEDULED, clauses=["BATCH-8", "SCHED-14"])
async def a_faulting_guard_suppresses_the_occurrence_and_is_recorded_apart_from_a_false_one(target: Target) -> None:
    guard = "{{ {'0': true, '2': false}[schedule.scheduled_at[18:19]] }}"  # last digit of the second
    pair = _pair(target, "{interval: 1s}", extra=f'  when: "{guard}"\n', late_after="30s")
    await _activate(target, pair)
    state = await _until(target, pair, "an admitted, a suppressed and a faulted occurrence",
                         lambda s: all(_log(s, d) for d in ("admitted", "suppressed", "guard_fault")))
    await _operate(target, pair, "pause")
    for o in _log(state):
        digit = o["scheduled_at"][18]
        want = {"0": "admitted", "2": "suppressed"}.get(digit, "guard_fault")
        check(o["disposition"] == want, f"{o['scheduled_at']}: expected {want}, got {o['disposition']}")
        check((o["run_key"] is not None) == (want == "admitted"), f"only an admitted occurrence has a run: {o}")
    faults = [e for e in state["errors"] if e["kind"] == "guard_fault"]
    check(len(faults) == len(_log(state, "guard_fault")) and not [e for e in state["errors"] if e["kind"] == "suppressed"],
          f"each fault is an initiation error, a false guard is not: {state['errors']}")


@case(capability=SCHEDULED, clauses=["SCHED-14"])
async def overlap_skip_drops_occurrences_while_a_run_is_open(target: Target) -> None:
    pair = _pair(target, "{interval: 1s}", overlap="skip", late_after="30s")
    await _activate(target, pair)
    state = await _until(target, pair, "one admitted and two skipped occurrences",
                         lambda s: len(_log(s, "admitted")) == 1 and len(_log(s, "skipped")) >= 2)
    await _operate(target, pair, "pause")
    check(all(o["run_key"] is None for o in _log(state, "skipped")), f"skipped ones start no run: {_log(state, 'skipped')}")


CASES = (
    the_preview_is_reproducible_and_shifts_a_time_lost_to_daylight_saving,
    an_unevaluable_cron_or_zone_is_refused_at_activation_with_a_diagnostic,
    a_schedule_with_no_future_occurrence_is_installed_but_inactive,
    each_occurrence_starts_one_run_no_earlier_than_its_instant_with_both_times,
    occurrences_while_paused_are_skipped_and_a_backfill_admits_each_once,
    catch_up_beyond_its_bound_records_the_omitted_range_for_an_operator,
    a_faulting_guard_suppresses_the_occurrence_and_is_recorded_apart_from_a_false_one,
    overlap_skip_drops_occurrences_while_a_run_is_open,
)
