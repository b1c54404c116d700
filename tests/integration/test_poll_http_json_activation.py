"""An activation polling a JSON API end to end: a real dev server, a worker started with the
deployment (its bearer token a reference in the worker's environment), and a local API that pages,
fails and rate-limits (tests/support/pollsources.JsonApi). Runs are ``wfi.EchoRun``."""

from __future__ import annotations

import pathlib
from typing import Any

from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.pollsources import Answer, JsonApi
from tests.support.replay import replay_failure
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.deployment import parse_deployment
from wf_initiation.plugin import WfiPlugin

TOKEN_ENV, TOKEN = "WFI_T_JSON_ACTIVATION_TOKEN", "activation-t0ken-41d7"
FAST_POLL = {"interval": "300ms", "backoff_initial": "200ms", "backoff_max": "1s", "limit": 50, "timeout": "10s"}
WORKFILE = """
name: {name}
on:
  http_json.item_added:
    url: "{url}"
    items: data
    id: id
    next: meta.next
    token_param: cursor
  as: ticket
  when: "{{{{ ticket.item.kind != 'spam' }}}}"
"""


def ids_by_disposition(state: dict[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for record in sorted(state["events"].values(), key=lambda r: r["seq"]):
        out.setdefault(record["disposition"], []).append(record["delivery_id"])
    return out


async def run_ids(client, activation_id: str) -> list[str]:
    query = f'WfiActivation = "{activation_id}" AND WorkflowType = "wfi.EchoRun"'
    return sorted([w.id async for w in client.list_workflows(query)])


async def test_a_paged_api_that_fails_and_rate_limits_is_polled_without_loss_or_repeat(
    dev_env, task_queue: str, tmp_path: pathlib.Path, json_api: JsonApi, monkeypatch
) -> None:
    # proves: POLL-1, POLL-2, POLL-5, POLL-6, POLL-8, POLL-10, POLL-11, POLL-12
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    connections = {"api": {"connector": "http_json", "bearer_token": f"env:{TOKEN_ENV}", "origins": [json_api.origin]}}
    json_api.add({"id": "t1", "kind": "bug"}, {"id": "t2", "kind": "spam"}, {"kind": "no id"}, {"id": "t3", "kind": "bug"},
                 {"id": "t4", "kind": "bug"})
    name = unique("jsonapi")
    spec = make_spec(tmp_path, WORKFILE.format(name=name, url=json_api.url), task_queue=task_queue,
                     connections=connections, poll=FAST_POLL)
    deployment = parse_deployment({"temporal": {"task_queue": task_queue}, "connections": connections})
    client = dev_env.client
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True, deployment=deployment)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(spec)

        async def first_pages() -> dict[str, Any]:
            state = await wfi.state(name, include_events=True)
            seen = ids_by_disposition(state)
            assert seen.get("accepted") == ["t1", "t3", "t4"] and seen.get("suppressed") == ["t2"], seen
            assert len(seen.get("quarantined", [])) == 1 and state["error_counts"].get("quarantined") == 1, seen
            return state

        state = await assert_eventually(first_pages)
        cursor = state["polls"]["ticket"]["cursor"]
        assert all(r[3]["Authorization"] == f"Bearer {TOKEN}" for r in json_api.sent())
        assert TOKEN not in str(state), "the token is resolved on the worker, never carried"

        json_api.script(Answer(429, {"Retry-After": "3"}), Answer(500, {}, b"down"))

        async def rate_limited_then_failed() -> dict[str, Any]:
            state = await wfi.state(name, include_events=True)
            errors = [e["message"] for e in state["errors"] if e["kind"] == "poll_failed"]
            assert any("the source asked to wait 0:00:03" in m for m in errors), errors
            assert any("HTTP 500" in m for m in errors), errors
            return state

        state = await assert_eventually(rate_limited_then_failed, timeout=60)
        assert state["polls"]["ticket"]["cursor"] == cursor, "a failed poll moves nothing"
        statuses, times = json_api.statuses(), [r[0] for r in json_api.sent()]
        limited = statuses.index(429)
        assert times[limited + 1] - times[limited] >= 2.9, "the next poll waited what the source asked (backoff: 200 ms)"

        json_api.add({"id": "t5", "kind": "bug"})

        async def recovered() -> None:
            state = await wfi.state(name, include_events=True)
            assert ids_by_disposition(state).get("accepted") == ["t1", "t3", "t4", "t5"]
            assert state["polls"]["ticket"]["failures"] == 0 and state["summary"]["status"] == "active"

        await assert_eventually(recovered, timeout=60)

        async def runs() -> None:
            assert await run_ids(client, spec.activation_id) == sorted(
                f"{spec.activation_id}/ticket/{t}" for t in ("t1", "t3", "t4", "t5"))

        await assert_eventually(runs)
        history = await wfi._handle(name).fetch_history()
    assert await replay_failure(history) is None, "the rate-limited poll's wait replays (patch wfi-poll-retry-after)"
