"""Authentication of webhook senders, with signatures made by independent implementations: the
`standardwebhooks` package, `stripe`'s signing helper, and GitHub's documented test vector.

Secrets come from the ingress process's environment (env: references) or files, never reach a
payload, workflow history or a log line; a retry re-signed by its sender is a duplicate."""

from __future__ import annotations

import base64
import json
import logging
import pathlib
import time
from datetime import UTC, datetime, timedelta

import pytest
import standardwebhooks
import stripe

from tests.support.activation import unique
from tests.support.ingress import activate_all, deployment_with, served
from wf_initiation.client import WfiClient
from wf_initiation.ingress import IngressConfigError, build
from wf_initiation.ingress._auth import verify
from wf_initiation.wire import workflow_id_for

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
FIVE_MIN = timedelta(minutes=5)

# GitHub's documented test vector ("Validating webhook deliveries", "Testing the webhook payload
# validation"): this secret and payload give this X-Hub-Signature-256.
GITHUB_SECRET = "It's a Secret to Everybody"
GITHUB_PAYLOAD = b"Hello, World!"
GITHUB_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"

STD_OLD = "whsec_" + base64.b64encode(b"old-key-rotated-out-soon-32bytes").decode()
STD_NEW = "whsec_" + base64.b64encode(b"new-key-after-the-rotation-32byt").decode()
STRIPE_SECRET = "whsec_stripe_test_secret_0123456789"

HOOK = """
name: {name}
on:
  http.request: {{path: {path}}}
"""


# ---------------------------------------------------------------------------- the verifiers alone
def test_github_documented_test_vector_verifies_and_a_changed_byte_does_not() -> None:
    headers = {"x-hub-signature-256": GITHUB_SIGNATURE}
    assert verify("github", headers, GITHUB_PAYLOAD, NOW, [GITHUB_SECRET.encode()], tolerance=FIVE_MIN).ok
    tampered = verify("github", headers, b"Hello, World?", NOW, [GITHUB_SECRET.encode()], tolerance=FIVE_MIN)
    assert not tampered.ok and tampered.reason == "signature mismatch (X-Hub-Signature-256)"
    rotated = verify("github", headers, GITHUB_PAYLOAD, NOW, [b"new-secret", GITHUB_SECRET.encode()], tolerance=FIVE_MIN)
    assert rotated.ok, "any configured secret verifies (rotation)"
    assert "missing header" in verify("github", {}, GITHUB_PAYLOAD, NOW, [b"s"], tolerance=FIVE_MIN).reason


def test_standard_webhooks_signatures_of_the_reference_library_verify_within_the_tolerance() -> None:
    body = b'{"type": "invoice.paid", "id": 7}'
    signer = standardwebhooks.Webhook(STD_NEW)

    def headers(at: datetime, msg_id: str = "msg_1") -> dict[str, str]:
        signature = signer.sign(msg_id, at, body.decode())
        return {"webhook-id": msg_id, "webhook-timestamp": str(int(at.timestamp())), "webhook-signature": signature}

    secrets = [STD_OLD.encode(), STD_NEW.encode()]
    assert verify("standard", headers(NOW), body, NOW, secrets, tolerance=FIVE_MIN).ok
    at_edge = verify("standard", headers(NOW - FIVE_MIN), body, NOW, secrets, tolerance=FIVE_MIN)
    assert at_edge.ok, "exactly at the tolerance is accepted"
    replay = verify("standard", headers(NOW - FIVE_MIN - timedelta(seconds=1)), body, NOW, secrets, tolerance=FIVE_MIN)
    assert not replay.ok and "outside the tolerance" in replay.reason
    future = verify("standard", headers(NOW + FIVE_MIN + timedelta(seconds=1)), body, NOW, secrets, tolerance=FIVE_MIN)
    assert not future.ok and "future" in future.reason
    other_id = {**headers(NOW), "webhook-id": "msg_2"}
    assert verify("standard", other_id, body, NOW, secrets, tolerance=FIVE_MIN).reason.startswith("signature mismatch")
    assert not verify("standard", headers(NOW), body, NOW, [STD_OLD.encode()], tolerance=FIVE_MIN).ok
    both = {**headers(NOW), "webhook-signature": "v1,AAAA " + headers(NOW)["webhook-signature"]}
    assert verify("standard", both, body, NOW, secrets, tolerance=FIVE_MIN).ok, "any offered v1 signature may match"


def test_stripe_signatures_of_the_stripe_library_verify_within_the_tolerance() -> None:
    body = b'{"id": "evt_1", "object": "event"}'
    ts = int(NOW.timestamp())

    def header(t: int) -> dict[str, str]:
        return {"stripe-signature": stripe.WebhookSignature.generate_signature_header(body.decode(), STRIPE_SECRET, t)}

    assert verify("stripe", header(ts), body, NOW, [STRIPE_SECRET.encode()], tolerance=FIVE_MIN).ok
    old = verify("stripe", header(ts - 301), body, NOW, [STRIPE_SECRET.encode()], tolerance=FIVE_MIN)
    assert not old.ok and "outside the tolerance" in old.reason
    assert not verify("stripe", header(ts), body + b" ", NOW, [STRIPE_SECRET.encode()], tolerance=FIVE_MIN).ok


def test_token_comparison_takes_bearer_or_a_named_header() -> None:
    assert verify("token", {"authorization": "Bearer t0k"}, b"", NOW, [b"t0k"], tolerance=FIVE_MIN).ok
    assert not verify("token", {"authorization": "Bearer t0k2"}, b"", NOW, [b"t0k"], tolerance=FIVE_MIN).ok
    assert not verify("token", {"authorization": "Basic t0k"}, b"", NOW, [b"t0k"], tolerance=FIVE_MIN).ok
    assert verify("token", {"x-hook-token": "t0k"}, b"", NOW, [b"old", b"t0k"], tolerance=FIVE_MIN,
                  token_header="X-Hook-Token").ok
    assert not verify("token", {}, b"", NOW, [b"t0k"], tolerance=FIVE_MIN).ok
    assert not verify("github", {"x-hub-signature-256": "sha256=00"}, b"", NOW, [], tolerance=FIVE_MIN).ok, \
        "no configured secret never verifies"


# ---------------------------------------------------------------------------- over HTTP
async def test_each_sender_is_authenticated_over_http_and_its_resigned_retry_is_a_duplicate(
    dev_env, wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # proves: EXT-2, EXT-3
    monkeypatch.setenv("WFI_TEST_STD_OLD", STD_OLD)
    monkeypatch.setenv("WFI_TEST_GITHUB", GITHUB_SECRET)
    (tmp_path / "std-new.secret").write_text(STD_NEW + "\n")
    (tmp_path / "stripe.secret").write_text(STRIPE_SECRET)
    svix, gh, pay = unique("svix"), unique("gh"), unique("pay")
    deployment = deployment_with(
        tmp_path, {svix: HOOK.format(name=svix, path=f"/in/{svix}"), gh: HOOK.format(name=gh, path=f"/in/{gh}"),
                   pay: HOOK.format(name=pay, path=f"/in/{pay}")},
        task_queue=task_queue,
        ingress={"endpoints": [
            {"workflow": svix, "auth": {"scheme": "standard", "secrets": ["env:WFI_TEST_STD_OLD", f"file:{tmp_path / 'std-new.secret'}"]}},
            {"workflow": gh, "auth": {"scheme": "github", "secrets": ["env:WFI_TEST_GITHUB"]}},
            {"workflow": pay, "auth": {"scheme": "stripe", "secrets": [f"file:{tmp_path / 'stripe.secret'}"], "tolerance": "2m"}},
        ]},
    )
    await activate_all(wfi, deployment)
    caplog.set_level(logging.INFO)
    async with served(deployment, dev_env.client) as s:
        # Standard Webhooks: signed with the new key (rotation), retried with a new timestamp and signature.
        body = json.dumps({"type": "invoice.paid", "amount": 12}).encode()
        signer = standardwebhooks.Webhook(STD_NEW)

        def std_headers(at: datetime) -> dict[str, str]:
            return {"webhook-id": "msg_2a", "webhook-timestamp": str(int(at.timestamp())),
                    "webhook-signature": signer.sign("msg_2a", at, body.decode()), "content-type": "application/json"}

        now = datetime.now(UTC)
        first = await s.http.post(f"/in/{svix}", content=body, headers=std_headers(now))
        assert first.status_code == 202 and first.json()["delivery_id"] == "msg_2a", first.text
        retry = await s.http.post(f"/in/{svix}", content=body, headers=std_headers(now + timedelta(seconds=30)))
        assert retry.status_code == 200 and retry.json()["disposition"] == "duplicate", retry.text
        replay = await s.http.post(f"/in/{svix}", content=body, headers=std_headers(now - timedelta(minutes=6)))
        assert replay.status_code == 401 and "outside the tolerance" in replay.json()["message"]
        forged = await s.http.post(f"/in/{svix}", content=body.replace(b"12", b"13"), headers=std_headers(now))
        assert forged.status_code == 401

        # GitHub: the documented vector, as a text body; X-GitHub-Delivery is the delivery id.
        vector = await s.http.post(f"/in/{gh}", content=GITHUB_PAYLOAD, headers={
            "X-Hub-Signature-256": GITHUB_SIGNATURE, "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
            "X-GitHub-Event": "ping", "content-type": "text/plain"})
        assert vector.status_code == 202, vector.text
        assert vector.json()["delivery_id"] == "72d3162e-cc78-11e3-81ab-4c9367dc0958"
        unsigned = await s.http.post(f"/in/{gh}", content=GITHUB_PAYLOAD, headers={"X-GitHub-Delivery": "d-2"})
        assert unsigned.status_code == 401

        # Stripe: the event id in the body is the delivery id; a retry is re-signed at a later time.
        event = json.dumps({"id": "evt_1Nv", "object": "event", "type": "charge.succeeded", "pending_webhooks": 2})
        t = int(time.time())
        sig = stripe.WebhookSignature.generate_signature_header(event, STRIPE_SECRET, t)
        paid = await s.http.post(f"/in/{pay}", content=event, headers={"Stripe-Signature": sig, "content-type": "application/json"})
        assert paid.status_code == 202 and paid.json()["delivery_id"] == "evt_1Nv", paid.text
        later = event.replace('"pending_webhooks": 2', '"pending_webhooks": 1')
        sig2 = stripe.WebhookSignature.generate_signature_header(later, STRIPE_SECRET, t + 60)
        again = await s.http.post(f"/in/{pay}", content=later, headers={"Stripe-Signature": sig2, "content-type": "application/json"})
        assert again.status_code == 200 and again.json()["disposition"] == "duplicate", again.text
        stale = stripe.WebhookSignature.generate_signature_header(event, STRIPE_SECRET, t - 180)
        too_old = await s.http.post(f"/in/{pay}", content=event, headers={"Stripe-Signature": stale})
        assert too_old.status_code == 401

    refusals = [r.getMessage() for r in caplog.records if r.name == "wf_initiation.ingress"]
    assert any("outside the tolerance" in m for m in refusals) and any("signature mismatch" in m for m in refusals)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (STD_OLD, STD_NEW, GITHUB_SECRET, STRIPE_SECRET):
        assert secret not in logged, "the failure reason is logged, never the secret"
    texts = {name: await _history_text(dev_env.client, name) for name in (svix, gh, pay)}
    assert "invoice.paid" in texts[svix] and "Hello, World!" in texts[gh], "the payloads are in the history"
    for name, text in texts.items():
        for secret in (STD_OLD, STD_NEW, GITHUB_SECRET, STRIPE_SECRET, "webhook-signature", "stripe-signature"):
            assert secret.lower() not in text.lower(), f"{secret[:12]}... reached the history of {name}"
    state = await wfi.state(pay, include_events=True)
    assert list(state["events"]) == ["request\x1fevt_1Nv"]


async def test_a_token_endpoint_keeps_its_token_out_of_the_payload_and_unconfigured_entries_refuse(
    dev_env, wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WFI_TEST_HOOK_TOKEN", "tk-9f8e7d6c5b4a")
    tokened, open_one = unique("tokened"), unique("unconfigured")
    deployment = deployment_with(
        tmp_path, {tokened: HOOK.format(name=tokened, path=f"/t/{tokened}"), open_one: HOOK.format(name=open_one, path=f"/u/{open_one}")},
        task_queue=task_queue,
        ingress={"endpoints": [{"workflow": tokened, "auth": {"scheme": "token", "header": "X-Hook-Token",
                                                                "secrets": ["env:WFI_TEST_HOOK_TOKEN"]}}]},
    )
    await activate_all(wfi, deployment)
    async with served(deployment, dev_env.client) as s:
        ok = await s.http.post(f"/t/{tokened}", json={"a": 1}, headers={"X-Hook-Token": "tk-9f8e7d6c5b4a",
                                                                         "Idempotency-Key": "k-1", "X-Custom": "kept"})
        assert ok.status_code == 202, ok.text
        result = await _run_input(dev_env.client, ok.json()["run_key"])
        headers = result["bindings"]["request"]["headers"]
        assert headers["x-custom"] == "kept" and "x-hook-token" not in headers and "idempotency-key" in headers
        refused = await s.http.post(f"/u/{open_one}", json={"a": 1}, headers={"Idempotency-Key": "k-1"})
        assert refused.status_code == 401 and "no authentication configured" in refused.json()["message"]


async def test_a_storm_of_forged_signatures_logs_one_line_per_reason_and_counts_every_one(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    # A sender decides how often it fails to authenticate, not how much the ingress logs.
    monkeypatch.setenv("WFI_TEST_STORM_TOKEN", "tk-storm-0123456789")
    name = unique("storm")
    deployment = deployment_with(tmp_path, {name: HOOK.format(name=name, path=f"/s/{name}")}, task_queue="unused",
                                 ingress={"default_auth": {"scheme": "token", "secrets": ["env:WFI_TEST_STORM_TOKEN"]}})
    caplog.set_level(logging.INFO, logger="wf_initiation.ingress")
    async with served(deployment, object()) as s:
        for n in range(100):
            forged = await s.http.post(f"/s/{name}", json={"n": n}, headers={"Authorization": f"Bearer wrong-{n}",
                                                                              "Idempotency-Key": f"k-{n}"})
            assert forged.status_code == 401 and forged.json()["message"] == "token mismatch"
        for n in range(20):
            unsigned = await s.http.post(f"/s/{name}", json={"n": n}, headers={"Idempotency-Key": f"u-{n}"})
            assert unsigned.status_code == 401
        assert s.ingress.metrics.auth_failures.labels(name, "request")._value.get() == 120
    lines = [r.getMessage() for r in caplog.records if r.name == "wf_initiation.ingress"]
    assert len(lines) == 2, lines
    assert "token_mismatch" in lines[0] and "from 127.0.0.1" in lines[0] and "missing_header" in lines[1]
    assert "wrong-" not in "\n".join(lines), "what the sender offered is not logged"


async def _history_text(client, name: str) -> str:
    """The activation's history as text, every payload decoded (in the JSON form they are base64)."""
    history = json.loads((await client.get_workflow_handle(workflow_id_for(name)).fetch_history()).to_json())
    parts: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "data" and isinstance(item, str):
                    parts.append(base64.b64decode(item).decode(errors="replace"))
                else:
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(history)
    return json.dumps(history) + "\n".join(parts)


async def _run_input(client, run_key: str) -> dict:
    from tests.support.runs import describe_or_none
    from tests.support.waits import assert_eventually

    async def started() -> None:
        assert await describe_or_none(client, run_key) is not None

    await assert_eventually(started)
    return (await client.get_workflow_handle(run_key).result())["input"]


def test_secrets_are_references_and_an_unresolvable_one_is_named_without_its_value(
    tmp_path: pathlib.Path, task_queue: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from wf_initiation.core._diagnostics import DiagnosticError

    name = unique("refs")
    with pytest.raises(DiagnosticError, match="by reference, never inline"):
        deployment_with(tmp_path, {name: HOOK.format(name=name, path="/r")}, task_queue=task_queue,
                        ingress={"default_auth": {"scheme": "token", "secrets": ["hunter2"]}})
    monkeypatch.delenv("WFI_TEST_UNSET_SECRET", raising=False)
    deployment = deployment_with(tmp_path, {name: HOOK.format(name=name, path="/r")}, task_queue=task_queue,
                                 ingress={"default_auth": {"scheme": "token", "secrets": ["env:WFI_TEST_UNSET_SECRET"]},
                                          "endpoints": [{"workflow": name, "entry": "nope"}]})
    with pytest.raises(IngressConfigError) as raised:
        build(deployment)
    message = str(raised.value)
    assert "WFI_TEST_UNSET_SECRET is not set" in message and "no external entry 'nope'" in message
    lenient = build(deployment, strict=False)
    assert lenient.table.find(name, None) is not None, "lenient: the rest is served"
