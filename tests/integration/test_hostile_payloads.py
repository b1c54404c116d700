"""Hostile payloads against a real activation (issue 11 items 1 and 4): deep nesting, NaN and
infinities, a run that cannot start. Each test sends exactly that input, then proves the activation
still accepts a normal delivery and starts its run (tests/support/hostile.still_serves)."""

from __future__ import annotations

import math
import pathlib
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.hostile import HOOK, errors_of, hook, nested, plain_signal, plain_update, run_started, still_serves
from tests.support.waits import assert_eventually
from wf_initiation.activities.runs import RunActivities, StartedRun, StartRunsRequest
from wf_initiation.client import DeliveryRefused, WfiClient
from wf_initiation.core.limits import MAX_PAYLOAD_DEPTH
from wf_initiation.plugin import WfiPlugin


async def activate_hook(wfi: WfiClient, tmp_path: pathlib.Path, task_queue: str, extra: str = "", **settings: Any) -> str:
    name = unique("hostile")
    await wfi.activate(make_spec(tmp_path, HOOK.format(name=name, extra=extra), task_queue=task_queue, **settings))
    return name


async def test_deeply_nested_bodies_are_invalid_with_the_reason_and_later_runs_start(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-2, EXT-9, EXT-10, EXT-8
    client = dev_env.client
    name = await activate_hook(wfi, tmp_path, task_queue)
    with pytest.raises(DeliveryRefused, match=f"more than {MAX_PAYLOAD_DEPTH} levels"):
        await wfi.deliver(name, hook("deep-client", x=nested(200)))  # the client refuses before sending
    results = []
    for i in range(4):  # four of them stopped every later run before
        results.append(await plain_update(client, name, hook(f"deep-{i}", x=nested(200 if i % 2 else 100))))
    assert [r["disposition"] for r in results] == ["invalid"] * 4
    assert f"more than {MAX_PAYLOAD_DEPTH} levels" in results[0]["message"]  # decodable, refused by the engine
    assert "could not be decoded" in results[1]["message"]  # past the data converter's own limit
    await plain_signal(client, name, hook("deep-signal", x=nested(230)))  # the worker used to drop this one

    async def recorded() -> None:
        errors = await errors_of(wfi, name, "invalid")
        assert len(errors) == 5 and any("refused before validation" in e["message"] for e in errors), errors

    await assert_eventually(recorded, timeout=60)
    state = await wfi.state(name)
    assert state["summary"]["runs_starting"] == 0 and not state["runs"], "no run waits on an undecodable start"
    await still_serves(wfi, client, name)
    await still_serves(wfi, client, name, "deep-0")  # an invalid delivery consumed nothing (EXT-10)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
async def test_nan_and_infinity_are_refused_by_the_client_and_invalid_in_every_handler(
    wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path, bad: float,
) -> None:
    # proves: EXT-9, EXT-10
    client = dev_env.client
    name = await activate_hook(wfi, tmp_path, task_queue, extra='  when: "{{ hook.body.score > 0 }}"')
    with pytest.raises(DeliveryRefused, match="not a JSON number"):
        await wfi.deliver(name, hook("n1", score=bad))
    with pytest.raises(DeliveryRefused, match="not a JSON number"):
        await wfi.signal_delivery(name, hook("n1", score=bad))
    by_update = await plain_update(client, name, hook("n1", score=bad))
    assert by_update["disposition"] == "invalid" and "not a JSON number" in by_update["message"]
    await plain_signal(client, name, hook("n2", score=bad))
    many = await client.get_workflow_handle(f"wfi-activation:{name}").execute_update(
        "deliver_many", [{"entry": None, "payload": hook("n3", score=bad)}, {"entry": None, "payload": hook("ok3", score=1)}],
        id=f"many-{name}", result_type=list)
    assert [r["disposition"] for r in many] == ["invalid", "accepted"]

    async def recorded() -> None:
        assert len(await errors_of(wfi, name, "invalid")) == 3

    await assert_eventually(recorded, timeout=60)
    await still_serves(wfi, client, name, score=1)


class PoisonedStarts(RunActivities):
    """Our own start activity with an injected failure: any chunk holding a run whose key contains
    ``poison`` fails for good, as a start request the worker cannot decode did."""

    @activity.defn(name="wfi.start_runs")
    async def start_runs(self, req: StartRunsRequest) -> list[StartedRun]:
        if any("poison" in r.run_key for r in req.runs):
            raise ApplicationError("Failed decoding arguments (injected by the test)", non_retryable=True)
        return await super().start_runs(req)


class PoisonPlugin(WfiPlugin):
    def configure_worker(self, config):  # type: ignore[no-untyped-def]
        config = super().configure_worker(config)
        kept = [a for a in config["activities"] if getattr(a, "__name__", "") != "start_runs"]
        config["activities"] = [*kept, PoisonedStarts(config["client"]).start_runs]
        return config


async def test_a_run_that_cannot_start_is_a_start_fault_and_blocks_no_other_run(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-8, INIT-7, TRIG-11
    client = dev_env.client
    async with Worker(client, task_queue=task_queue, plugins=[PoisonPlugin()]):
        wfi = WfiClient(client, task_queue=task_queue)
        name = await activate_hook(wfi, tmp_path, task_queue, extra='  queue_by: "{{ hook.body.key }}"')
        deliveries = [hook(f"poison-{i}", key="p") for i in range(4)] + [hook(f"fine-{i}", key=f"k{i}") for i in range(6)]
        results = await wfi.deliver_many(name, [(None, d) for d in deliveries])  # one chunk: poisoned and fine together
        assert [r.disposition.value for r in results] == ["accepted"] + ["queued"] * 3 + ["accepted"] * 6
        for r in results[4:]:
            await run_started(client, r.run_key)

        async def faulted() -> None:
            state = await wfi.state(name, include_events=True)
            dispositions = [state["events"][f"hook\x1fpoison-{i}"]["disposition"] for i in range(4)]
            assert dispositions == ["start_fault"] * 4, dispositions
            assert state["summary"]["counters"]["start_faults"] == 4

        await assert_eventually(faulted, timeout=120)
        metadata = await client.get_workflow_handle(f"wfi-activation:{name}").query(
            "__temporal_workflow_metadata", result_type=WorkflowMetadata)
        assert "start faults 4" in metadata.current_details, "the UI shows the start faults"
        await still_serves(wfi, client, name, key="p")  # the queue key the faulted runs held is free
