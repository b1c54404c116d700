"""What a redelivery is compared by (issue 31, items 1 and 2): the body and the headers that are part
of the event, by scheme and per endpoint; never a header of one attempt. Pure: routes built from a
deployment on disk, payloads made as the ingress makes them, digests as the engine takes them.

The attempts replayed are what real senders and intermediaries do (GitHub's documented delivery
headers, its Redeliver button, a repository's and an organisation's hook sharing one GUID; Svix
retries; proxies and tracers). Signatures are made by the ``standardwebhooks`` reference library.
Over HTTP against an activation: tests/integration/test_ingress_redelivery.py."""

from __future__ import annotations

import base64
import json
import pathlib
import urllib.parse
from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic
import pytest
import standardwebhooks

from tests.support.corpora import github_payload_examples
from tests.support.ingress import deployment_with
from tests.support.paths import TESTS
from wf_initiation.core._diagnostics import DiagnosticError
from wf_initiation.core.deployment import parse_deployment
from wf_initiation.core.engine import payload_digest
from wf_initiation.core.ingress import ATTEMPT_HEADERS, Endpoint, attempt_header
from wf_initiation.ingress._auth import verify
from wf_initiation.ingress._payload import header_delivery_id, kept_headers, parse_body, request_payload
from wf_initiation.ingress._routes import EVENT_HEADERS, Route, build_routes

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
FIVE_MIN = timedelta(minutes=5)
SECRET = "whsec_" + base64.b64encode(b"a-standard-webhooks-key-32-bytes").decode()

# GitHub's documented delivery headers through a repository's and an organisation's hook, what
# proxies and tracers add, a push event (tests/fixtures/webhooks/README.md says where each is from).
DELIVERIES = json.loads((TESTS / "fixtures" / "webhooks" / "github-deliveries.json").read_text())
GUID: str = DELIVERIES["guid"]
REPO_HOOK = [(k, v) for k, v in DELIVERIES["repository_hook"]]
ORG_HOOK = [(k, v) for k, v in DELIVERIES["organization_hook"]]
PROXIED = [(k, v) for k, v in DELIVERIES["proxied"]]
PUSH: dict[str, Any] = DELIVERIES["push"]

WORKFILE = """
name: {name}
on:
  http.request: {{path: /hooks/{name}}}
"""


def route_of(tmp_path: pathlib.Path, scheme: str, headers: list[str] | None = None) -> Route:
    """The route the ingress builds for one http.request entry behind an endpoint of ``scheme``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    endpoint: dict[str, Any] = {"workflow": "hook", "auth": {"scheme": scheme}}
    if headers is not None:
        endpoint["headers"] = headers
    deployment = deployment_with(tmp_path, {"hook": WORKFILE.format(name="hook")}, task_queue="unused",
                                 ingress={"endpoints": [endpoint]})
    assert deployment.ingress is not None
    table = build_routes(deployment, deployment.ingress)
    assert table.problems == []
    return table.by_name[("hook", "request")]


def digest(route: Route, headers: list[tuple[str, str]], body: bytes, form: bool = False) -> str:
    """The digest of the payload the ingress makes of this request: what a redelivery is compared by."""
    lowered = {k.lower(): v for k, v in headers}
    parsed = parse_body(body, lowered.get("content-type"), 63, form_payload=form)
    payload = request_payload(delivery_id="d-1", method="POST", path=route.canonical_path,
                              headers=kept_headers(headers, route.headers), query=[], body=parsed)
    return payload_digest(payload)


def form_encoded(body: bytes) -> bytes:
    return urllib.parse.urlencode({"payload": body.decode()}).encode()


def replaced(headers: list[tuple[str, str]], **values: str) -> list[tuple[str, str]]:
    names = {k.replace("_", "-").lower(): v for k, v in values.items()}
    return [(k, names.get(k.lower(), v)) for k, v in headers]


# ---------------------------------------------------------------------------- what is compared, by scheme
def test_each_scheme_compares_the_body_and_only_the_headers_of_its_event(tmp_path: pathlib.Path) -> None:
    headers = REPO_HOOK + [("X-Custom-Tenant", "acme"), ("webhook-id", "msg_1"), ("svix-id", "msg_1")]
    kept = {scheme: kept_headers(headers, route_of(tmp_path / scheme, scheme).headers)
            for scheme in ("github", "stripe", "standard", "token", "none")}
    assert kept["github"] == {"x-github-event": "push"}, "GitHub's event is its name and its body"
    assert kept["stripe"] == {} and kept["standard"] == {}, "Stripe's and Standard Webhooks' event is the body"
    generic = {"x-github-delivery": GUID, "x-github-event": "push", "content-type": "application/json",
               "x-custom-tenant": "acme"}
    assert kept["token"] == generic and kept["none"] == generic, \
        "a sender the ingress knows nothing of: every header but those of one attempt"
    assert EVENT_HEADERS == {"github": ["x-github-event"], "stripe": [], "standard": []}, "docs/webhooks.md's table"


def test_every_header_of_one_attempt_is_never_compared(tmp_path: pathlib.Path) -> None:
    # The list: transport, proxy, tracing, signature, timestamp, sender-build and retry headers.
    named = ["User-Agent", "Accept", "X-Request-Start", "X-B3-TraceId", "X-B3-SpanId", "X-B3-ParentSpanId",
             "X-B3-Sampled", "traceparent", "X-Correlation-ID", "X-Amzn-Trace-Id", "X-Forwarded-For",
             "X-Forwarded-Host", "X-Forwarded-Proto", "Via", "Content-Length", "X-Hub-Signature",
             "X-Hub-Signature-256", "Stripe-Signature", "webhook-signature", "webhook-timestamp", "webhook-id",
             "svix-id", "svix-timestamp", "svix-signature", "X-GitHub-Hook-ID",
             "X-GitHub-Hook-Installation-Target-ID", "X-GitHub-Hook-Installation-Target-Type", "Authorization"]
    for name in named + [k for k, _ in PROXIED]:
        assert attempt_header(name), name
    assert all(name == name.lower() for name in ATTEMPT_HEADERS)
    for name in ("X-GitHub-Event", "X-GitHub-Delivery", "Content-Type", "Idempotency-Key", "X-Custom-Tenant"):
        assert not attempt_header(name), name
    generic = route_of(tmp_path, "none")
    attempt = [(name, f"value-{i}") for i, name in enumerate(named)]
    assert kept_headers(attempt, generic.headers) == {}, "none of them reaches a payload under any scheme"


@pytest.mark.parametrize("scheme", ["github", "token", "none"])
def test_real_redeliveries_of_a_github_event_are_one_payload(tmp_path: pathlib.Path, scheme: str) -> None:
    route = route_of(tmp_path, scheme)
    body = json.dumps(PUSH).encode()
    first = digest(route, REPO_HOOK, body)
    redeliver = replaced(REPO_HOOK, User_Agent="GitHub-Hookshot/8cd2b3f", X_Hub_Signature_256="sha256=" + "ab" * 32)
    assert digest(route, redeliver, body) == first, "GitHub's Redeliver: a newer Hookshot build"
    assert digest(route, REPO_HOOK + PROXIED, body) == first, "headers proxies and tracers add"
    org = digest(route, ORG_HOOK, form_encoded(body), form=scheme == "github")
    if scheme == "github":
        assert org == first, "the organisation's hook (another hook id and target, form-encoded) sends the same event"
    else:
        # Without the github scheme a form body is a form (its field `payload` a string): another payload.
        assert digest(route, replaced(ORG_HOOK, Content_Type="application/json"), body) == first
    changed = json.dumps({**PUSH, "after": "0" * 40}).encode()
    assert digest(route, REPO_HOOK, changed) != first, "a changed body is another payload: a conflict"
    other_event = replaced(REPO_HOOK, X_GitHub_Event="delete")
    assert digest(route, other_event, body) != first, "the event's name is part of the event"


def test_a_svix_retry_from_another_node_is_one_payload(tmp_path: pathlib.Path) -> None:
    route = route_of(tmp_path, "standard")
    body = b'{"type": "user.created", "data": {"id": "user_29w83sxmDNGwOuEthce5gg56FcC"}}'
    signer = standardwebhooks.Webhook(SECRET)

    def attempt(at: datetime, node: str, prefix: str = "svix") -> list[tuple[str, str]]:
        return [(f"{prefix}-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"), (f"{prefix}-timestamp", str(int(at.timestamp()))),
                (f"{prefix}-signature", signer.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", at, body.decode())),
                ("User-Agent", f"Svix-Webhooks/1.{node}"), ("Content-Type", "application/json"),
                ("X-Forwarded-For", f"44.228.126.{node}")]

    first = attempt(NOW, "217")
    retry = attempt(NOW + timedelta(minutes=5), "219")
    assert dict(first)["svix-signature"] != dict(retry)["svix-signature"]
    assert digest(route, retry, body) == digest(route, first, body)
    as_standard = attempt(NOW + timedelta(minutes=30), "3", prefix="webhook")
    assert digest(route, as_standard, body) == digest(route, first, body), "either header names: one payload"


# ---------------------------------------------------------------------------- per endpoint
def test_an_endpoint_lists_more_headers_of_its_event_and_never_one_of_an_attempt(tmp_path: pathlib.Path) -> None:
    route = route_of(tmp_path, "github", ["X-GitHub-Event", "X-Custom-Tenant"])
    assert kept_headers(REPO_HOOK + [("X-Custom-Tenant", "acme")], route.headers) == \
        {"x-github-event": "push", "x-custom-tenant": "acme"}
    for name in ("User-Agent", "x-github-hook-id", "X-B3-TraceId", "Authorization", "svix-id", "Accept"):
        with pytest.raises(pydantic.ValidationError) as refused:
            Endpoint(workflow="hook", headers=["X-GitHub-Event", name])
        message = str(refused.value)
        assert f"{name!r} belongs to one attempt" in message and "every redelivery would be a conflict" in message
    with pytest.raises(DiagnosticError, match="DEPLOY-INVALID: ingress.endpoints.0.headers: 'User-Agent' belongs"):
        parse_deployment({"temporal": {"task_queue": "q"}, "workflows": {},
                          "ingress": {"endpoints": [{"workflow": "hook", "headers": ["User-Agent"]}]}}, base_dir=str(tmp_path))
    with pytest.raises(pydantic.ValidationError, match="is not an HTTP header name"):
        Endpoint(workflow="hook", headers=["X GitHub Event"])
    assert route_of(tmp_path / "empty", "token", []).headers == [], "an empty list: the body alone"


# ---------------------------------------------------------------------------- Svix's header names (item 2)
def test_svix_header_names_verify_under_the_standard_scheme_with_the_reference_librarys_signature() -> None:
    body = b'{"type": "email.delivered", "data": {"email_id": "4ef9a417-02e9-4d39-ad75-9611e0fcc33c"}}'
    signature = standardwebhooks.Webhook(SECRET).sign("msg_2a", NOW, body.decode())
    svix = {"svix-id": "msg_2a", "svix-timestamp": str(int(NOW.timestamp())), "svix-signature": signature}
    assert verify("standard", svix, body, NOW, [SECRET.encode()], tolerance=FIVE_MIN).ok
    assert header_delivery_id(svix, "webhook-id") == "msg_2a", "the delivery id is the signed svix-id"
    other = verify("standard", {**svix, "svix-id": "msg_2b"}, body, NOW, [SECRET.encode()], tolerance=FIVE_MIN)
    assert other.reason == "signature mismatch (svix-signature)", "the id is signed under either name"
    tampered = verify("standard", svix, body + b" ", NOW, [SECRET.encode()], tolerance=FIVE_MIN)
    assert not tampered.ok
    stale = verify("standard", svix, body, NOW + FIVE_MIN + timedelta(seconds=1), [SECRET.encode()], tolerance=FIVE_MIN)
    assert "outside the tolerance" in stale.reason
    both = {**svix, "webhook-id": "msg_2a", "webhook-timestamp": svix["svix-timestamp"], "webhook-signature": signature}
    assert verify("standard", both, body, NOW, [SECRET.encode()], tolerance=FIVE_MIN).ok
    # A mix is never combined: with a webhook-signature, the webhook-* set is the one read.
    mixed = {**svix, "webhook-signature": signature}
    missing = verify("standard", mixed, body, NOW, [SECRET.encode()], tolerance=FIVE_MIN)
    assert missing.code == "missing_header" and "webhook-id, webhook-timestamp" in missing.reason
    assert header_delivery_id(mixed, "webhook-id") is None
    nothing = verify("standard", {}, body, NOW, [SECRET.encode()], tolerance=FIVE_MIN)
    assert "svix-id, svix-timestamp, svix-signature" in nothing.reason, "the refusal names both sets"


# ---------------------------------------------------------------------------- issue 32: timestamps
def test_a_timestamp_in_other_digits_is_refused_and_shown_as_sent() -> None:
    body = b"{}"
    arabic = "\u0661\u0667\u0666\u0664\u0668\u0664\u0669\u0666\u0660\u0660"  # 1764849600 in Arabic-Indic digits
    as_received = arabic.encode().decode("iso8859-1")  # how the ASGI server hands UTF-8 header bytes over
    signature = standardwebhooks.Webhook(SECRET).sign("m", NOW, body.decode())
    for stamp in (as_received, arabic, "\uff11\uff17\uff16\uff14\uff18\uff14\uff19\uff16\uff10\uff10"):
        refused = verify("standard", {"webhook-id": "m", "webhook-timestamp": stamp, "webhook-signature": signature},
                         body, NOW, [SECRET.encode()], tolerance=FIVE_MIN)
        assert refused.code == "bad_timestamp" and "ASCII digits" in refused.reason, refused
        assert "\u00d9" not in refused.reason, "no mojibake: the value as its sender wrote it"
    shown = verify("stripe", {"stripe-signature": f"t={as_received},v1=00"}, body, NOW, [b"s"], tolerance=FIVE_MIN)
    assert repr(arabic) in shown.reason, shown.reason
    latin = verify("stripe", {"stripe-signature": "t=\xff\xfe,v1=00"}, body, NOW, [b"s"], tolerance=FIVE_MIN)
    assert latin.code == "bad_timestamp" and "b'\\xff\\xfe'" in latin.reason, "bytes that are not UTF-8 are shown as bytes"
    assert verify("standard", {"webhook-id": "m", "webhook-timestamp": f" {int(NOW.timestamp())} ",
                               "webhook-signature": signature}, body, NOW, [SECRET.encode()], tolerance=FIVE_MIN).ok


# ---------------------------------------------------------------------------- GitHub's published examples
def test_every_published_github_payload_example_keeps_its_identity_across_redeliveries_and_hooks(
    tmp_path: pathlib.Path,
) -> None:
    # GitHub's payload examples as octokit publishes them (tests/support/corpora.py; MIT).
    examples = github_payload_examples()
    assert len(examples) > 200, len(examples)
    route = route_of(tmp_path, "github")
    for event, body in examples:
        path = f"{event}: {body[:80]!r}"
        repo = replaced(REPO_HOOK, X_GitHub_Event=event)
        first = digest(route, repo, body)
        assert digest(route, replaced(repo, User_Agent="GitHub-Hookshot/8cd2b3f") + PROXIED, body) == first, path
        assert digest(route, replaced(ORG_HOOK, X_GitHub_Event=event), form_encoded(body), form=True) == first, path
        changed = json.dumps({**json.loads(body), "wfi_changed": True}).encode()
        assert digest(route, repo, changed) != first, path
