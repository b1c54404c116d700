"""The webhook ingress over real HTTP: a uvicorn server on a loopback port, httpx as the sender, a real
dev server and worker behind it. Every HTTP status the ingress answers, and what each one means."""

from __future__ import annotations

import asyncio
import json
import pathlib

import pytest
from temporalio.worker import Worker

from tests.support.activation import unique
from tests.support.ingress import activate_all, deployment_with, served
from tests.support.runs import describe_or_none
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.plugin import WfiPlugin

TOKEN = "tok-" + "s3cr3t" * 4
AUTH = {"Authorization": f"Bearer {TOKEN}"}

ORDERS = """
name: {name}
on:
  http.request: {{path: /hooks/{name}-orders}}
  when: "{{{{ request.body.kind != 'ping' }}}}"
  queue_by: "{{{{ request.body.customer }}}}"
"""

SKIPPING = """
name: {name}
on:
  http.request: {{}}
"""

RELAYED = """
name: {name}
on:
  workflow.completed: {{workflow: upstream-build}}
  as: upstream
"""


def order(n: int, customer: str = "c1", **extra) -> dict:
    return {"kind": "order", "customer": customer, "n": n, **extra}


def post_json(body, key: str | None = None, **headers) -> dict:
    h = {**AUTH, "content-type": "application/json", **headers}
    if key is not None:
        h["Idempotency-Key"] = f'"{key}"'
    return {"content": json.dumps(body).encode(), "headers": h}


async def test_every_disposition_is_answered_with_its_http_status(
    dev_env, wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: EXT-2, EXT-3, EXT-4, EXT-8, EXT-9, EXT-13, TRIG-8, COMP-6
    monkeypatch.setenv("WFI_TEST_INGRESS_TOKEN", TOKEN)
    orders, skipping, relayed = unique("orders"), unique("skipping"), unique("relayed")
    deployment = deployment_with(
        tmp_path, {orders: ORDERS.format(name=orders), skipping: SKIPPING.format(name=skipping),
                   relayed: RELAYED.format(name=relayed)},
        task_queue=task_queue, settings={skipping: {"overlap": "skip"}, relayed: {"max_causation_depth": 3}},
        ingress={"default_auth": {"scheme": "token", "secrets": ["env:WFI_TEST_INGRESS_TOKEN"]}, "max_json_depth": 8},
    )
    await activate_all(wfi, deployment)
    async with served(deployment, dev_env.client) as s:
        hook = f"/hooks/{orders}-orders"  # the path the Workfile declares
        accepted = await s.http.post(hook, **post_json(order(1, hold=True), "o-1"))
        assert accepted.status_code == 202, accepted.text
        first = accepted.json()
        assert first["disposition"] == "accepted" and first["run_key"] and first["delivery_id"] == "o-1"

        queued = await s.http.post(f"/hooks/{orders}/request", **post_json(order(2), "o-2"))
        assert (queued.status_code, queued.json()["disposition"]) == (202, "queued")

        again = await s.http.post(f"/hooks/{orders}", **post_json(order(1, hold=True), "o-1"))
        assert again.status_code == 200, again.text
        assert again.json()["disposition"] == "duplicate" and again.json()["retained"] == "accepted"
        assert again.json()["run_key"] == first["run_key"]

        conflict = await s.http.post(hook, **post_json(order(1, changed=True), "o-1"))
        assert conflict.status_code == 409 and conflict.json()["disposition"] == "conflict"
        assert "first payload stands" in conflict.json()["reason"]

        suppressed = await s.http.post(hook, **post_json({"kind": "ping", "customer": "c1"}, "p-1"))
        assert suppressed.status_code == 202 and suppressed.json()["disposition"] == "suppressed"
        assert "when" in suppressed.json()["reason"]

        invalid = await s.http.post(hook, **post_json(order(3), "x" * 513))
        assert invalid.status_code == 422 and invalid.json()["disposition"] == "invalid"
        assert "512" in invalid.json()["reason"] or "long" in invalid.json()["reason"]

        held = await s.http.post(f"/hooks/{skipping}", **post_json({"hold": True}, "s-1"))
        assert held.json()["disposition"] == "accepted"
        skipped = await s.http.post(f"/hooks/{skipping}", **post_json({"n": 2}, "s-2"))
        assert skipped.status_code == 202 and skipped.json()["disposition"] == "skipped"
        assert "overlap" in skipped.json()["reason"]

        relay = {"event_id": "e-1", "workflow": "upstream-build", "workflow_id": "wf-9", "transition": "completed",
                 "outcome": "completed", "causation": {"depth": 3, "chain": ["a", "b", "c"]}}
        refused = await s.http.post(f"/hooks/{relayed}/upstream", **post_json(relay))
        assert refused.status_code == 409 and refused.json()["disposition"] == "refused"
        assert "cycle guard" in refused.json()["reason"]

        # Refused at the edge: nothing reaches the activation.
        assert (await s.http.post(f"/hooks/{orders}/nope", **post_json(order(4), "o-4"))).status_code == 404
        assert (await s.http.post(f"/hooks/{unique('absent')}", **post_json(order(4), "o-4"))).status_code == 404
        assert (await s.http.post("/somewhere/else", **post_json(order(4), "o-4"))).status_code == 404
        wrong_method = await s.http.put(hook, **post_json(order(4), "o-4"))
        assert wrong_method.status_code == 405 and "POST" in wrong_method.headers["allow"]
        missing_id = await s.http.post(hook, **post_json(order(4)))
        assert missing_id.status_code == 400 and "Idempotency-Key" in missing_id.json()["message"]
        bad_json = await s.http.post(hook, content=b"{not json", headers={**AUTH, "content-type": "application/json",
                                                                           "Idempotency-Key": "o-5"})
        assert bad_json.status_code == 400 and bad_json.json()["error"] == "bad_json"
        deep: object = "leaf"
        for _ in range(9):
            deep = [deep]
        too_deep = await s.http.post(hook, **post_json({"deep": deep}, "o-6"))
        assert too_deep.status_code == 400 and too_deep.json()["error"] == "json_too_deep"
        unauthenticated = await s.http.post(hook, **post_json(order(7), "o-7", Authorization="Bearer wrong"))
        assert unauthenticated.status_code == 401

        state = await wfi.state(orders, include_events=True)
        ids = {e["delivery_id"] for e in state["events"].values()}
        assert {"o-4", "o-5", "o-6", "o-7"}.isdisjoint(ids), "edge refusals never reach the activation"
        assert [e["kind"] for e in state["errors"]].count("conflict") == 1

        # The activation still accepts a normal delivery and starts its run.
        normal = await s.http.post(hook, **post_json(order(8, customer="c2"), "o-8"))
        assert normal.status_code == 202 and normal.json()["disposition"] == "accepted"
        result = await _run_result(dev_env.client, normal.json()["run_key"])
        assert result["input"]["bindings"]["request"]["body"]["n"] == 8


async def test_a_body_at_the_limit_is_delivered_and_one_byte_more_is_413(
    dev_env, wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-2
    name = unique("sized")
    limit = 4096
    deployment = deployment_with(tmp_path, {name: SKIPPING.format(name=name)}, task_queue=task_queue,
                                 ingress={"default_auth": {"scheme": "none"}, "max_body_bytes": limit})
    await activate_all(wfi, deployment)
    async with served(deployment, dev_env.client) as s:
        def body(size: int) -> bytes:
            prefix = b'{"pad": "'
            return prefix + b"x" * (size - len(prefix) - 2) + b'"}'

        at_limit = await s.http.post(f"/hooks/{name}", content=body(limit),
                                     headers={"content-type": "application/json", "Idempotency-Key": "big-1"})
        assert at_limit.status_code == 202, at_limit.text
        over = await s.http.post(f"/hooks/{name}", content=body(limit + 1),
                                 headers={"content-type": "application/json", "Idempotency-Key": "big-2"})
        assert over.status_code == 413 and over.json()["error"] == "body_too_large"

        async def chunks():  # no Content-Length: the limit holds while streaming too
            for _ in range(limit // 512 + 1):
                yield b" " * 512
        streamed = await s.http.post(f"/hooks/{name}", content=chunks(), headers={"Idempotency-Key": "big-3"})
        assert streamed.status_code == 413
        after = await s.http.post(f"/hooks/{name}", json={"n": 1}, headers={"Idempotency-Key": "small-1"})
        assert after.status_code == 202 and after.json()["disposition"] == "accepted"


async def test_in_flight_pressure_is_answered_429_or_503_with_retry_after_and_a_retry_is_delivered_once(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-3, EXT-8
    name = unique("pressure")
    deployment = deployment_with(
        tmp_path, {name: SKIPPING.format(name=name)}, task_queue=task_queue,
        ingress={"default_auth": {"scheme": "none"}, "group_deliveries": False, "updates_per_workflow": 1, "max_waiting": 1,
                 "queue_timeout": "1s", "delivery_timeout": "60s", "retry_after": 3},
    )
    wfi = WfiClient(dev_env.client, task_queue=task_queue)
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        await activate_all(wfi, deployment)
    # No worker now: the first delivery holds the workflow's only slot until one comes back.
    async with served(deployment, dev_env.client) as s:
        url = f"/hooks/{name}"
        first = asyncio.create_task(s.http.post(url, json={"n": 1}, headers={"Idempotency-Key": "p-1"}))
        await assert_eventually(lambda: _in_flight(s, 1))
        waiting = asyncio.create_task(s.http.post(url, json={"n": 2}, headers={"Idempotency-Key": "p-2"}))
        await assert_eventually(lambda: _waiting(s, name, 1))
        full = await s.http.post(url, json={"n": 3}, headers={"Idempotency-Key": "p-3"})
        assert full.status_code == 429 and full.headers["retry-after"] == "3"
        timed_out = await waiting
        assert timed_out.status_code == 503 and timed_out.headers["retry-after"] == "3"
        async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
            done = await first
            assert done.status_code == 202 and done.json()["disposition"] == "accepted"
            retried = [await s.http.post(url, json={"n": n}, headers={"Idempotency-Key": f"p-{n}"}) for n in (2, 3)]
            assert [r.status_code for r in retried] == [202, 202], "the refused deliveries are taken on retry"
            state = await wfi.state(name, include_events=True)
            assert sorted(e["delivery_id"] for e in state["events"].values()) == ["p-1", "p-2", "p-3"]
            assert len({e["run_key"] for e in state["events"].values()}) == 3


async def _run_result(client, run_key: str) -> dict:
    async def started() -> None:
        assert await describe_or_none(client, run_key) is not None, "202 accepted: its run is being started"

    await assert_eventually(started)
    return await client.get_workflow_handle(run_key).result()


async def _in_flight(s, n: int) -> None:
    assert s.ingress.metrics.in_flight._value.get() == n


async def _waiting(s, workflow: str, n: int) -> None:
    assert s.ingress.metrics.waiting.labels(workflow)._value.get() == n


async def test_no_activation_and_no_worker_are_503_and_a_retry_after_recovery_is_one_run(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-8, INIT-7
    name = unique("late")
    deployment = deployment_with(tmp_path, {name: SKIPPING.format(name=name)}, task_queue=task_queue,
                                 ingress={"default_auth": {"scheme": "none"}, "delivery_timeout": "2s"})
    wfi = WfiClient(dev_env.client, task_queue=task_queue)
    async with served(deployment, dev_env.client) as s:
        url = f"/hooks/{name}"
        none_yet = await s.http.post(url, json={"n": 1}, headers={"Idempotency-Key": "l-1"})
        assert none_yet.status_code == 503 and none_yet.json()["error"] == "no_activation"
        assert "retry-after" in none_yet.headers
        async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
            await activate_all(wfi, deployment)
        no_worker = await s.http.post(url, json={"n": 1}, headers={"Idempotency-Key": "l-1"})
        assert no_worker.status_code == 503 and no_worker.json()["error"] == "timeout"
        async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
            # The timed-out attempt's update was applied once a worker came back: the retry shares
            # its update id and gets its disposition (or finds the id retained): one run either way.
            # A sender retries a 503: the new worker's first task (a whole-history replay) may take
            # longer than the 2 s timeout on a loaded machine, so a few retries are allowed.
            for _ in range(5):
                retried = await s.http.post(url, json={"n": 1}, headers={"Idempotency-Key": "l-1"})
                if retried.status_code != 503:
                    break
            assert retried.status_code in (200, 202), retried.text
            state = await wfi.state(name, include_events=True)
            assert [e["delivery_id"] for e in state["events"].values()] == ["l-1"]
            assert state["counters"].get("runs_started", 0) <= 1


async def test_health_readiness_and_metrics(dev_env, wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path) -> None:
    active, absent = unique("active"), unique("absent")
    deployment = deployment_with(tmp_path, {active: SKIPPING.format(name=active), absent: SKIPPING.format(name=absent)},
                                 task_queue=task_queue, ingress={"default_auth": {"scheme": "none"}})
    await activate_all(wfi, deployment, [active])
    async with served(deployment, dev_env.client) as s:
        assert (await s.http.get("/healthz")).json() == {"status": "ok"}
        ready = await s.http.get("/readyz")  # ready while it can serve any workflow
        assert ready.status_code == 200, ready.text
        assert ready.json()["activations"] == {active: "running", absent: "missing"}
        assert (await s.http.get(f"/readyz/{absent}")).status_code == 503
        await s.http.post(f"/hooks/{active}", json={"n": 1}, headers={"Idempotency-Key": "m-1"})
        await s.http.post(f"/hooks/{active}", json={"n": 1}, headers={"Idempotency-Key": "m-1"})
        await s.http.get("/no/such/path")
        metrics = (await s.http.get("/metrics")).text
        assert 'wfi_ingress_requests_total{method="POST",route="/hooks/{workflow}",status="202"} 1.0' in metrics
        assert 'wfi_ingress_requests_total{method="POST",route="/hooks/{workflow}",status="200"} 1.0' in metrics
        assert 'wfi_ingress_requests_total{method="GET",route="unmatched",status="404"} 1.0' in metrics
        assert f'wfi_ingress_deliveries_total{{disposition="duplicate",entry="request",workflow="{active}"}} 1.0' in metrics
        assert "wfi_ingress_request_duration_seconds_bucket" in metrics
    await activate_all(wfi, deployment, [absent])
    async with served(deployment, dev_env.client) as s:
        ready = await s.http.get("/readyz")
        assert ready.status_code == 200 and ready.json()["ready"] is True
        assert ready.json()["serving"] == sorted([active, absent])
        assert (await s.http.get(f"/readyz/{absent}")).status_code == 200


async def test_answers_are_not_held_by_nagle_every_connection_has_tcp_nodelay(tmp_path: pathlib.Path) -> None:
    # A response written in two parts (headers, body) would wait for the client's delayed ACK (~40 ms)
    # without TCP_NODELAY, which asyncio sets only on sockets whose protocol says TCP.
    import socket

    from wf_initiation.ingress._server import IngressServer, bind

    listening = bind("127.0.0.1", 0)
    assert listening.proto == socket.IPPROTO_TCP
    listening.close()
    name = unique("nodelay")
    deployment = deployment_with(tmp_path, {name: SKIPPING.format(name=name)}, task_queue="unused",
                                 ingress={"default_auth": {"scheme": "none"}})
    from wf_initiation.ingress import app

    server = await IngressServer.start(app(deployment, client=object()), "127.0.0.1", 0)
    try:
        import httpx

        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.get("/healthz")).status_code == 200
            connections = list(server._server.server_state.connections)
            assert connections, "the keep-alive connection is open"
            for connection in connections:
                sock = connection.transport.get_extra_info("socket")
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            # This app's "Temporal client" is no client: a failure of the ingress itself is a JSON 500.
            broken = await http.post(f"/hooks/{name}", json={}, headers={"Idempotency-Key": "b-1"})
            assert broken.status_code == 500 and broken.json()["error"] == "internal_error"
    finally:
        await server.stop()
