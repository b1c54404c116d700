"""Hostile expression input against real activations on a real dev server (issue 11 item 5).

A payload that would make `when` or `queue_by` compute a 10^7-exponent power or a 10^10-character
string ends as a guard_fault / key_fault within a second or two, the activation then accepts a
normal delivery and starts its run, and a second activation on the same worker keeps accepting
deliveries and starting runs meanwhile.
"""

from __future__ import annotations

import asyncio
import pathlib
import time

from tests.support.activation import make_spec, unique
from tests.support.runs import describe_or_none
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import Disposition
from wf_initiation.core.limits import MAX_INT_DIGITS

GUARDED = """
name: {name}
on:
  mail.received: {{inbox: help@acme.com}}
  as: message
  when: "{{{{ (message.base ** message.exp) > 0 }}}}"
  queue_by: "{{{{ message.label * message.qty }}}}"
"""
PLAIN = """
name: {name}
on:
  mail.received: {{inbox: help@acme.com}}
  as: message
"""


def mail(mid: str, **fields: object) -> dict:
    return {"message_id": mid, "from": "a@b.c", "recipient": "help@acme.com", "subject": "hi", **fields}


NORMAL = {"base": 2, "exp": 3, "label": "t", "qty": 2}


async def run_started(client, run_key: str) -> None:
    assert await describe_or_none(client, run_key) is not None, f"run {run_key} not started yet"


async def test_hostile_expression_inputs_fault_fast_and_the_activation_goes_on(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path
) -> None:
    # proves: TRIG-9, TRIG-13, BATCH-6, BATCH-7 (a fault, recorded apart from suppression; no run; id consumed)
    hostile_name, other_name = unique("hostile"), unique("bystander")
    await wfi.activate(make_spec(tmp_path, GUARDED.format(name=hostile_name), task_queue=task_queue))
    await wfi.activate(make_spec(tmp_path, PLAIN.format(name=other_name), task_queue=task_queue))

    async def hostile() -> list[Disposition]:
        started = time.perf_counter()
        power = await wfi.deliver(hostile_name, mail("pow", **{**NORMAL, "base": 3, "exp": 10**7}))
        repeat = await wfi.deliver(hostile_name, mail("mul", **{**NORMAL, "qty": 10**10}))
        long_ = await wfi.deliver(hostile_name, mail("long", **{**NORMAL, "label": "x" * 2000, "qty": 10**6}))
        assert time.perf_counter() - started < 20, "hostile deliveries must not hold the worker"
        return [power.disposition, repeat.disposition, long_.disposition]

    async def bystander() -> list[float]:
        latencies = []
        for i in range(5):
            started = time.perf_counter()
            result = await wfi.deliver(other_name, mail(f"b{i}"))
            latencies.append(time.perf_counter() - started)
            assert result.disposition == Disposition.ACCEPTED
            await assert_eventually(lambda key=result.run_key: run_started(dev_env.client, key), timeout=30)
        return latencies

    dispositions, latencies = await asyncio.gather(hostile(), bystander())
    assert dispositions == [Disposition.GUARD_FAULT, Disposition.KEY_FAULT, Disposition.KEY_FAULT]
    assert max(latencies) < 10, f"the other activation on the worker was held up: {latencies}"

    summary = await wfi.summary(hostile_name)
    assert summary["error_counts"].get("guard_fault") == 1 and summary["error_counts"].get("key_fault") == 2
    state = await wfi.state(hostile_name, include_events=True)
    messages = " ".join(e["message"] for e in state["errors"])
    assert f"{MAX_INT_DIGITS:,} digits" in messages and "larger than" in messages

    ok = await wfi.deliver(hostile_name, mail("after", **NORMAL))
    assert ok.disposition == Disposition.ACCEPTED and ok.run_key
    await assert_eventually(lambda: run_started(dev_env.client, ok.run_key), timeout=30)
