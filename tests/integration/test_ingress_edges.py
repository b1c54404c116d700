"""Two minors of issue 32 (item 6), over HTTP against a real activation, each ending with a normal
delivery accepted and its run started: a trailing-slash hook path was answered 307 with a Location
built from the request's Host header; non-ASCII digits in a timestamp header came back as mojibake."""

from __future__ import annotations

import base64
import pathlib
from datetime import UTC, datetime

import pytest
import standardwebhooks

from tests.support.activation import unique
from tests.support.hostile import run_started
from tests.support.ingress import activate_all, deployment_with, served
from wf_initiation.client import WfiClient

HOOK = """
name: {name}
on:
  http.request: {{path: /in/{name}}}
"""
STD_SECRET = "whsec_" + base64.b64encode(b"edges-signing-key-for-these-test").decode()


async def test_a_trailing_slash_path_is_404_naming_the_served_path_and_never_a_redirect_to_the_host_header(
    dev_env, wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    name = unique("slash")
    deployment = deployment_with(tmp_path, {name: HOOK.format(name=name)}, task_queue=task_queue,
                                 ingress={"default_auth": {"scheme": "none"}})
    await activate_all(wfi, deployment)
    headers = {"Host": "attacker.example", "Idempotency-Key": '"k-1"'}
    async with served(deployment, dev_env.client) as s:
        for path, served_path in ((f"/in/{name}/", f"/in/{name}"), (f"/hooks/{name}/", f"/hooks/{name}"),
                                  (f"/hooks/{name}/request/", f"/hooks/{name}/request")):
            answer = await s.http.post(path, json={"n": 1}, headers=headers)
            assert answer.status_code == 404 and "location" not in answer.headers, (path, answer.headers)
            assert answer.json() == {"error": "unknown_route", "message": f"nothing is served at {path}; "
                                     f"{served_path} is (without the trailing slash)"}
            assert "attacker" not in answer.text
        unknown = await s.http.post("/hooks/no-such-workflow/", json={}, headers=headers)
        assert unknown.status_code == 404 and unknown.json()["message"] == "nothing is served at /hooks/no-such-workflow/"
        health = await s.http.get("/healthz/", headers=headers)
        assert health.status_code == 404 and health.json()["message"].endswith("/healthz is (without the trailing slash)")
        state = await wfi.state(name, include_events=True)
        assert state["events"] == {}, "nothing was delivered"
        normal = await s.http.post(f"/in/{name}", json={"n": 1}, headers=headers)
        assert normal.status_code == 202 and normal.json()["disposition"] == "accepted", normal.text
        await run_started(dev_env.client, normal.json()["run_key"])


async def test_a_timestamp_header_of_other_digits_is_401_showing_it_as_sent(
    dev_env, wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: EXT-2
    monkeypatch.setenv("WFI_TEST_EDGES_SECRET", STD_SECRET)
    name = unique("digits")
    deployment = deployment_with(tmp_path, {name: HOOK.format(name=name)}, task_queue=task_queue, ingress={
        "endpoints": [{"workflow": name, "auth": {"scheme": "standard", "secrets": ["env:WFI_TEST_EDGES_SECRET"]}}]})
    await activate_all(wfi, deployment)
    signer = standardwebhooks.Webhook(STD_SECRET)
    body, now = b'{"type": "order.paid"}', datetime.now(UTC)
    arabic = "".join(chr(0x0660 + int(d)) for d in str(int(now.timestamp())))  # the same instant, Arabic-Indic
    fullwidth = "".join(chr(0xFF10 + int(d)) for d in str(int(now.timestamp())))
    async with served(deployment, dev_env.client) as s:
        for digits in (arabic, fullwidth):
            answer = await s.http.post(f"/in/{name}", content=body, headers={
                "webhook-id": "msg_1", "webhook-timestamp": digits.encode(), "content-type": "application/json",
                "webhook-signature": signer.sign("msg_1", now, body.decode())})
            assert answer.status_code == 401, answer.text
            assert answer.json()["message"] == f"timestamp {digits!r} is not a Unix time in seconds (ASCII digits 0-9)"
        state = await wfi.state(name, include_events=True)
        assert state["events"] == {}
        normal = await s.http.post(f"/in/{name}", content=body, headers={
            "webhook-id": "msg_1", "webhook-timestamp": str(int(now.timestamp())), "content-type": "application/json",
            "webhook-signature": signer.sign("msg_1", now, body.decode())})
        assert normal.status_code == 202 and normal.json()["disposition"] == "accepted", normal.text
        await run_started(dev_env.client, normal.json()["run_key"])
