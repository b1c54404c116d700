"""A storm of signed webhook redeliveries, duplicates and conflicts through the ingress while the
worker is SIGKILLed and restarted: every 2xx-acknowledged delivery has exactly one run, and every
delivery answered 5xx (or 429) and retried, as senders do, is delivered - none is lost to a retry."""

from __future__ import annotations

import asyncio
import base64
import json
import pathlib
import random
from collections import defaultdict
from datetime import UTC, datetime

import pytest
import standardwebhooks

from tests.support.activation import unique
from tests.support.ingress import activate_all, deployment_with, served
from tests.support.waits import assert_eventually
from tests.support.worker_proc import WorkerProcess
from wf_initiation.client import WfiClient

pytestmark = pytest.mark.crash

DISTINCT = 400
KEYS = 10
SENDERS = 16
SECRET = "whsec_" + base64.b64encode(b"storm-test-signing-key-32-bytes!").decode()
WORKFILE = """
name: {name}
on:
  http.request: {{}}
  queue_by: "{{{{ request.body.key }}}}"
"""


async def test_acknowledged_webhooks_run_once_and_refused_ones_are_delivered_on_retry_across_worker_kills(
    dev_env, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: INIT-7, EXT-3, EXT-4, EXT-8, EXT-11
    monkeypatch.setenv("WFI_TEST_STORM_SECRET", SECRET)
    name, task_queue = unique("storm"), unique("storm-q")
    deployment = deployment_with(
        tmp_path, {name: WORKFILE.format(name=name)}, task_queue=task_queue,
        ingress={"default_auth": {"scheme": "standard", "secrets": ["env:WFI_TEST_STORM_SECRET"]},
                 "delivery_timeout": "2s", "queue_timeout": "2s", "max_waiting": 24, "retry_after": 1},
    )
    worker = WorkerProcess(dev_env.client.service_client.config.target_host, task_queue,
                           log_path=str(tmp_path / "worker.log"))
    worker.start()
    wfi = WfiClient(dev_env.client, task_queue=task_queue, max_attempts=400)
    await activate_all(wfi, deployment)

    rng = random.Random(13)
    plan = [(i, "") for i in range(DISTINCT)]
    plan += [(rng.randrange(DISTINCT), "") for _ in range(DISTINCT * 3 // 10)]  # redeliveries
    plan += [(rng.randrange(DISTINCT), "changed") for _ in range(20)]  # same id, another payload
    rng.shuffle(plan)
    statuses: dict[str, list[int]] = defaultdict(list)
    answers: dict[str, list[dict]] = defaultdict(list)
    signer = standardwebhooks.Webhook(SECRET)
    done = asyncio.Event()

    counts = {"answers": 0, "5xx": 0}

    async def grown(key: str, since: int, by: int) -> None:
        assert done.is_set() or counts[key] >= since + by, f"{key}: {counts[key]}, waiting for {since + by}"

    async with served(deployment, dev_env.client) as s:
        async def send(i: int, variant: str) -> None:
            body = json.dumps({"key": f"k{i % KEYS}", "n": i, "v": variant})
            delivery_id = f"evt-{i}"
            for _ in range(200):  # a sender retries 5xx and 429 (re-signing each attempt), as webhook senders do
                now = datetime.now(UTC)
                response = await s.http.post(f"/hooks/{name}", content=body, headers={
                    "content-type": "application/json", "webhook-id": delivery_id,
                    "webhook-timestamp": str(int(now.timestamp())), "webhook-signature": signer.sign(delivery_id, now, body)})
                statuses[delivery_id].append(response.status_code)
                counts["answers"] += 1
                counts["5xx"] += response.status_code >= 500
                if response.status_code < 500 and response.status_code != 429:
                    answers[delivery_id].append(response.json())
                    return
                await asyncio.sleep(float(response.headers.get("retry-after", "1")) * (0.2 + rng.random() * 0.3))
            pytest.fail(f"{delivery_id} was never acknowledged")

        async def sender(worklist: list[tuple[int, str]]) -> None:
            for i, variant in worklist:
                await send(i, variant)

        async def chaos() -> None:
            for kill in range(4):
                # Each kill after an eighth of the plan was answered since the last restart: while the
                # storm blows, however fast this machine is today.
                await assert_eventually(lambda since=counts["answers"]: grown("answers", since, len(plan) // 8),
                                        timeout=300, interval=0.05)
                if done.is_set():
                    return
                worker.kill()
                if kill % 2:
                    await asyncio.sleep(0.5)  # a short outage under test: requests meet a dead worker
                else:  # a long one: until a request waited past delivery_timeout and was answered 503
                    await assert_eventually(lambda since=counts["5xx"]: grown("5xx", since, 1), timeout=60, interval=0.05)
                worker.start(timeout=60)

        chaos_task = asyncio.create_task(chaos())
        try:
            await asyncio.wait_for(asyncio.gather(*(sender(plan[c::SENDERS]) for c in range(SENDERS))), timeout=400)
            done.set()
            await chaos_task
            if worker.proc is None or worker.proc.poll() is not None:
                worker.start(timeout=60)
            assert worker.starts >= 3, "the worker was killed and restarted during the storm"
            refused_then_retried = {d for d, codes in statuses.items() if any(c >= 500 or c == 429 for c in codes)}
            assert refused_then_retried, "the storm produced 5xx answers (otherwise it proves nothing)"
            await _verify(wfi, dev_env.client, name, answers, refused_then_retried)
        finally:
            chaos_task.cancel()
            worker.stop()


async def _verify(wfi: WfiClient, client, name: str, answers: dict[str, list[dict]], refused_then_retried: set[str]) -> None:
    assert len(answers) == DISTINCT, "every delivery id got a final answer"
    for delivery_id, final in answers.items():
        kinds = {a["disposition"] for a in final}
        assert kinds <= {"accepted", "queued", "duplicate", "conflict"}, (delivery_id, kinds)
        runs = {a["run_key"] for a in final}
        assert len(runs) == 1 and None not in runs, f"{delivery_id}: every answer names its one run"

    async def settled() -> dict:
        state = await wfi.state(name, include_events=True)
        assert not state["runs"], f"{len(state['runs'])} runs not yet terminal"
        return state

    state = await assert_eventually(settled, timeout=240, interval=1.0)
    events = state["events"]
    run_keys = {}
    for delivery_id, final in answers.items():
        record = events[f"request\x1f{delivery_id}"]
        assert record["run_key"] == final[0]["run_key"] and record["released_at"], delivery_id
        run_keys[delivery_id] = record["run_key"]
    assert refused_then_retried <= set(run_keys), "no delivery answered 5xx was lost: its retry was taken"
    assert len(set(run_keys.values())) == DISTINCT
    started: dict[str, object] = {}
    query = f'WfiActivation = "{state["activation_id"]}" AND WorkflowType = "wfi.EchoRun"'
    async for wf in client.list_workflows(query):
        assert wf.id not in started, f"{wf.id} started twice"
        started[wf.id] = wf.start_time
    assert set(started) == set(run_keys.values()), "exactly one run per acknowledged delivery id, and no other"
    conflicts = {d for d, final in answers.items() if any(a["disposition"] == "conflict" for a in final)}
    recorded = {e["delivery_id"] for e in state["errors"] if e["kind"] == "conflict"}
    assert conflicts and conflicts <= recorded, "every conflict answered 409 is recorded as an initiation error"
