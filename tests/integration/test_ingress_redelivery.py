"""Real senders' redeliveries over HTTP against a real activation (issue 31, items 1 and 2): each is
`duplicate`, never a `conflict`, unless the event itself changed; then the activation still takes a
normal new delivery and starts its run.

Played: GitHub's Redeliver (same X-GitHub-Delivery and body, a newer GitHub-Hookshot build), the
headers proxies, load balancers and tracers add (and a changed Accept), a repository's and an
organisation's hook sending one event under one GUID (other hook id, other target, one of them
form-encoded), a Svix retry from another node under Svix's own header names (signed anew by the
`standardwebhooks` reference library), a Stripe retry re-signed by the `stripe` library. What is
compared, per scheme: docs/webhooks.md, "What a redelivery is compared by"; the pure side:
tests/core/test_ingress_identity.py."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import pathlib
import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import standardwebhooks
import stripe

from tests.support.activation import unique
from tests.support.hostile import run_started
from tests.support.ingress import Served, activate_all, deployment_with, served
from tests.support.paths import TESTS
from wf_initiation.client import WfiClient

GITHUB_SECRET = "It's a Secret to Everybody"
STD_SECRET = "whsec_" + base64.b64encode(b"svix-signing-key-for-these-tests").decode()
STRIPE_SECRET = "whsec_stripe_redelivery_0123456789"

HOOK = """
name: {name}
on:
  http.request: {{path: /in/{name}}}
"""
# GitHub's documented delivery headers through a repository's and an organisation's hook, what
# proxies and tracers add, a push event (tests/fixtures/webhooks/README.md says where each is from);
# Host and Content-Length are the HTTP client's to send.
DELIVERIES = json.loads((TESTS / "fixtures" / "webhooks" / "github-deliveries.json").read_text())
GUID: str = DELIVERIES["guid"]
OWN = {"host", "content-length", "x-github-delivery", "x-hub-signature", "x-hub-signature-256"}
REPO_HOOK = {k: v for k, v in DELIVERIES["repository_hook"] if k.lower() not in OWN}
ORG_HOOK = {k: v for k, v in DELIVERIES["organization_hook"] if k.lower() not in OWN}
PROXIED = {k: v for k, v in DELIVERIES["proxied"] if k.lower() not in OWN}
PUSH: dict[str, Any] = DELIVERIES["push"]


def github(body: bytes, guid: str, **headers: str) -> dict[str, Any]:
    """A GitHub delivery: the body signed with the hook's secret (X-Hub-Signature-256)."""
    signature = hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha256).hexdigest()
    return {"content": body, "headers": {**headers, "X-GitHub-Delivery": guid, "X-Hub-Signature-256": f"sha256={signature}"}}


def form(body: bytes) -> bytes:
    """GitHub's form encoding of a payload: one field, `payload`, holding the JSON."""
    return urllib.parse.urlencode({"payload": body.decode()}).encode()


async def run_headers(s: Served, client: Any, run_key: str) -> dict[str, str]:
    run = await client.get_workflow_handle(run_key).result()
    headers: dict[str, str] = run["input"]["bindings"]["request"]["headers"]
    return headers


async def takes_a_new_delivery(s: Served, client: Any, path: str, **request: Any) -> None:
    """The ending of every test here: a normal new delivery is accepted and its run starts."""
    answer = await s.http.post(path, **request)
    assert answer.status_code == 202 and answer.json()["disposition"] == "accepted", answer.text
    await run_started(client, answer.json()["run_key"])


def assert_duplicate(answer: Any, run_key: str, what: str) -> None:
    assert answer.status_code == 200 and answer.json()["disposition"] == "duplicate", f"{what}: {answer.text}"
    assert answer.json()["run_key"] == run_key and answer.json()["retained"] == "accepted", what


def assert_conflict(answer: Any, what: str) -> None:
    assert answer.status_code == 409 and answer.json()["disposition"] == "conflict", f"{what}: {answer.text}"


async def test_github_redeliver_proxies_and_a_second_hook_of_one_event_are_duplicates_and_a_changed_body_a_conflict(
    dev_env, wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: EXT-3, EXT-4
    monkeypatch.setenv("WFI_TEST_GH_SECRET", GITHUB_SECRET)
    name = unique("gh-redeliver")
    deployment = deployment_with(tmp_path, {name: HOOK.format(name=name)}, task_queue=task_queue, ingress={
        "endpoints": [{"workflow": name, "auth": {"scheme": "github", "secrets": ["env:WFI_TEST_GH_SECRET"]}}]})
    await activate_all(wfi, deployment)
    path, body = f"/in/{name}", json.dumps(PUSH).encode()
    async with served(deployment, dev_env.client) as s:
        first = await s.http.post(path, **github(body, GUID, **REPO_HOOK))
        assert first.status_code == 202 and first.json()["disposition"] == "accepted", first.text
        run_key = first.json()["run_key"]
        redeliver = {**REPO_HOOK, "User-Agent": "GitHub-Hookshot/8cd2b3f"}
        assert_duplicate(await s.http.post(path, **github(body, GUID, **redeliver)), run_key, "Redeliver")
        proxied = {**redeliver, **PROXIED}
        assert_duplicate(await s.http.post(path, **github(body, GUID, **proxied)), run_key, "through proxies")
        assert_duplicate(await s.http.post(path, **github(form(body), GUID, **ORG_HOOK)), run_key,
                         "the organisation's hook, form-encoded, under the same GUID")
        changed = json.dumps({**PUSH, "after": "0" * 40}).encode()
        assert_conflict(await s.http.post(path, **github(changed, GUID, **REPO_HOOK)), "a changed body")
        other_event = await s.http.post(path, **github(body, GUID, **{**REPO_HOOK, "X-GitHub-Event": "create"}))
        assert_conflict(other_event, "another event name under the GUID")

        assert await run_headers(s, dev_env.client, run_key) == {"x-github-event": "push"}
        state = await wfi.state(name, include_events=True)
        assert [e["delivery_id"] for e in state["events"].values()] == [GUID], "one event, one run"
        assert [e["kind"] for e in state["errors"]].count("conflict") == 2, state["errors"]
        await takes_a_new_delivery(s, dev_env.client, path, **github(body, "a3d0b6f2-cc79-11e3-8e2b-4c9367dc0958",
                                                                       **REPO_HOOK))


async def test_a_generic_senders_retry_through_proxies_and_tracers_is_a_duplicate_and_its_own_headers_count(
    dev_env, wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: EXT-3, EXT-4
    monkeypatch.setenv("WFI_TEST_TOKEN", "tk-redelivery-5f4e3d2c")
    name = unique("generic-retry")
    deployment = deployment_with(tmp_path, {name: HOOK.format(name=name)}, task_queue=task_queue, ingress={
        "endpoints": [{"workflow": name, "auth": {"scheme": "token", "secrets": ["env:WFI_TEST_TOKEN"]}}]})
    await activate_all(wfi, deployment)
    path = f"/in/{name}"
    sent = {"Authorization": "Bearer tk-redelivery-5f4e3d2c", "Idempotency-Key": '"order-17"', "X-Tenant": "acme",
            "User-Agent": "acme-orders/2.4.1", "Accept": "*/*"}
    async with served(deployment, dev_env.client) as s:
        first = await s.http.post(path, json={"sku": "A-1", "qty": 2}, headers=sent)
        assert first.status_code == 202, first.text
        run_key = first.json()["run_key"]
        retry = {**sent, "User-Agent": "acme-orders/2.5.0 (retry worker)", **PROXIED}
        assert_duplicate(await s.http.post(path, json={"sku": "A-1", "qty": 2}, headers=retry), run_key,
                         "a retry from another build, through a proxy and a tracer")
        assert_conflict(await s.http.post(path, json={"sku": "A-1", "qty": 3}, headers=retry), "a changed body")
        assert_conflict(await s.http.post(path, json={"sku": "A-1", "qty": 2}, headers={**sent, "X-Tenant": "other"}),
                        "a header of the event (not one of an attempt) changed")
        assert await run_headers(s, dev_env.client, run_key) == {
            "content-type": "application/json", "idempotency-key": '"order-17"', "x-tenant": "acme"}
        await takes_a_new_delivery(s, dev_env.client, path, json={"sku": "B-2"},
                                   headers={**sent, "Idempotency-Key": '"order-18"'})


async def test_svix_header_names_verify_and_a_retry_from_another_node_is_a_duplicate(
    dev_env, wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: EXT-2, EXT-3, EXT-4
    monkeypatch.setenv("WFI_TEST_SVIX_SECRET", STD_SECRET)
    name = unique("svix")
    deployment = deployment_with(tmp_path, {name: HOOK.format(name=name)}, task_queue=task_queue, ingress={
        "endpoints": [{"workflow": name, "auth": {"scheme": "standard", "secrets": ["env:WFI_TEST_SVIX_SECRET"]}}]})
    await activate_all(wfi, deployment)
    path = f"/in/{name}"
    signer = standardwebhooks.Webhook(STD_SECRET)
    event = json.dumps({"type": "user.created", "data": {"id": "user_29w83sxmDNGwOuEthce5gg56FcC"}}).encode()

    def svix(msg_id: str, at: datetime, body: bytes, node: str, prefix: str = "svix") -> dict[str, Any]:
        return {"content": body, "headers": {
            f"{prefix}-id": msg_id, f"{prefix}-timestamp": str(int(at.timestamp())),
            f"{prefix}-signature": signer.sign(msg_id, at, body.decode()), "Content-Type": "application/json",
            "User-Agent": f"Svix-Webhooks/1.{node}", "X-Forwarded-For": f"44.228.126.{node}"}}

    now = datetime.now(UTC)
    async with served(deployment, dev_env.client) as s:
        first = await s.http.post(path, **svix("msg_p5jXN8AQM9LWM0D4loKWxJek", now, event, "217"))
        assert first.status_code == 202 and first.json()["delivery_id"] == "msg_p5jXN8AQM9LWM0D4loKWxJek", first.text
        run_key = first.json()["run_key"]
        retry = svix("msg_p5jXN8AQM9LWM0D4loKWxJek", now + timedelta(seconds=40), event, "219")
        assert_duplicate(await s.http.post(path, **retry), run_key, "a retry from another node, re-signed")
        as_standard = svix("msg_p5jXN8AQM9LWM0D4loKWxJek", now + timedelta(seconds=50), event, "3", prefix="webhook")
        assert_duplicate(await s.http.post(path, **as_standard), run_key, "the same message under webhook-* names")
        forged = svix("msg_p5jXN8AQM9LWM0D4loKWxJek", now, event, "217")
        forged["content"] = event.replace(b"user.created", b"user.deleted")
        refused = await s.http.post(path, **forged)
        assert refused.status_code == 401 and refused.json()["message"] == "signature mismatch (svix-signature)"
        changed = event.replace(b"user.created", b"user.updated")
        assert_conflict(await s.http.post(path, **svix("msg_p5jXN8AQM9LWM0D4loKWxJek", now, changed, "217")),
                        "another body signed under the same id")
        assert await run_headers(s, dev_env.client, run_key) == {}, "the event is the body"
        await takes_a_new_delivery(s, dev_env.client, path, **svix("msg_2ZtLbU3lPfpaNnBq7nDbSAvdq", now, event, "217"))


async def test_a_stripe_retry_resigned_with_fewer_pending_webhooks_is_a_duplicate(
    dev_env, wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: EXT-3, EXT-4
    monkeypatch.setenv("WFI_TEST_STRIPE", STRIPE_SECRET)
    name = unique("stripe-retry")
    deployment = deployment_with(tmp_path, {name: HOOK.format(name=name)}, task_queue=task_queue, ingress={
        "endpoints": [{"workflow": name, "auth": {"scheme": "stripe", "secrets": ["env:WFI_TEST_STRIPE"]}}]})
    await activate_all(wfi, deployment)
    path = f"/in/{name}"

    def event(pending: int, amount: int = 2000, ident: str = "evt_1NG8Du2eZvKYlo2CUI79vXWy") -> str:
        return json.dumps({"id": ident, "object": "event", "api_version": "2024-06-20", "type": "charge.succeeded",
                           "data": {"object": {"id": "ch_3MmlLrLkdIwHu7ix0snN0B15", "amount": amount, "currency": "usd"}},
                           "livemode": False, "pending_webhooks": pending})

    def stripe_request(body: str, at: int, **extra: str) -> dict[str, Any]:
        signature = stripe.WebhookSignature.generate_signature_header(body, STRIPE_SECRET, at)
        return {"content": body, "headers": {"Stripe-Signature": signature, "Content-Type": "application/json; charset=utf-8",
                                             "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
                                             "Accept": "*/*; q=0.5, application/xml", "Cache-Control": "no-cache", **extra}}

    t = int(time.time())
    async with served(deployment, dev_env.client) as s:
        first = await s.http.post(path, **stripe_request(event(pending=2), t))
        assert first.status_code == 202 and first.json()["delivery_id"] == "evt_1NG8Du2eZvKYlo2CUI79vXWy", first.text
        run_key = first.json()["run_key"]
        retry = stripe_request(event(pending=1), t + 60, **PROXIED)
        assert_duplicate(await s.http.post(path, **retry), run_key, "a retry re-signed later, through a proxy")
        assert_conflict(await s.http.post(path, **stripe_request(event(pending=1, amount=2500), t + 90)),
                        "another amount under the event's id")
        assert await run_headers(s, dev_env.client, run_key) == {}
        await takes_a_new_delivery(s, dev_env.client, path, **stripe_request(event(2, ident="evt_1NG8Du2eZvKYlo2CNEWDELV"), t))


async def test_an_endpoint_that_lists_headers_of_its_event_compares_them_and_still_no_header_of_an_attempt(
    dev_env, wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: EXT-4
    monkeypatch.setenv("WFI_TEST_GH_SECRET", GITHUB_SECRET)
    name = unique("gh-listed")
    deployment = deployment_with(tmp_path, {name: HOOK.format(name=name)}, task_queue=task_queue, ingress={
        "endpoints": [{"workflow": name, "auth": {"scheme": "github", "secrets": ["env:WFI_TEST_GH_SECRET"]},
                       "headers": ["X-GitHub-Event", "X-GitHub-Enterprise-Host"]}]})
    await activate_all(wfi, deployment)
    path, body = f"/in/{name}", json.dumps(PUSH).encode()
    ghes = {**REPO_HOOK, "X-GitHub-Enterprise-Host": "github.acme.internal", "X-GitHub-Enterprise-Version": "3.14.2"}
    async with served(deployment, dev_env.client) as s:
        first = await s.http.post(path, **github(body, GUID, **ghes))
        assert first.status_code == 202, first.text
        upgraded = {**ghes, "X-GitHub-Enterprise-Version": "3.15.0", "User-Agent": "GitHub-Hookshot/8cd2b3f", **PROXIED}
        assert_duplicate(await s.http.post(path, **github(body, GUID, **upgraded)), first.json()["run_key"],
                         "a header the endpoint does not list")
        moved = {**ghes, "X-GitHub-Enterprise-Host": "github.other.internal"}
        assert_conflict(await s.http.post(path, **github(body, GUID, **moved)), "a listed header changed")
        assert await run_headers(s, dev_env.client, first.json()["run_key"]) == {
            "x-github-event": "push", "x-github-enterprise-host": "github.acme.internal"}
        await takes_a_new_delivery(s, dev_env.client, path, **github(body, "b-new-guid", **ghes))
