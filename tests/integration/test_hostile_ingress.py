"""Hostile HTTP input to the webhook ingress (issue 18), one test per item, each against a real
activation behind a real ingress, each ending with a normal webhook accepted and its run started.
The flood of slow connections (item 2) is in tests/integration/test_hostile_connections.py."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from tests.support.activation import unique
from tests.support.hostile import nested, run_started
from tests.support.ingress import Served, activate_all, deployment_with, served
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.wire import ECHO_RUN_RELEASE_SIGNAL

QUEUED = """
name: {name}
on:
  http.request: {{}}
  queue_by: "{{{{ request.body.key }}}}"
"""
PLAIN = """
name: {name}
on:
  http.request: {{}}
"""
OPEN = {"default_auth": {"scheme": "none"}}


async def post(s: Served, path: str, body: Any, key: str, **headers: str) -> Any:
    return await s.http.post(path, json=body, headers={"Idempotency-Key": f'"{key}"', **headers})


async def still_takes_webhooks(s: Served, client: Any, path: str, key: str = "normal-after") -> None:
    """The ending of every test here: a normal webhook is accepted and its run starts."""
    answer = await post(s, path, {"key": f"fresh-{key}", "n": 1}, key)
    assert answer.status_code == 202 and answer.json()["disposition"] == "accepted", answer.text
    await run_started(client, answer.json()["run_key"])


async def test_a_deferred_delivery_is_503_with_retry_after_and_its_retry_is_kept_once_the_pressure_is_gone(
    dev_env, wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-8, EXT-11
    # Item 1: under pressure (payloads held for runs not started yet) the activation defers a
    # delivery; a 2xx would make a webhook sender drop it for good.
    name = unique("deferred")
    deployment = deployment_with(tmp_path, {name: QUEUED.format(name=name)}, task_queue=task_queue, ingress=OPEN)
    await activate_all(wfi, deployment)
    async with served(deployment, dev_env.client) as s:
        path = f"/hooks/{name}"
        held = await post(s, path, {"key": "k", "hold": True}, "held")
        assert held.status_code == 202 and held.json()["disposition"] == "accepted", held.text
        pad = "x" * (200 * 1024)
        answers = [await post(s, path, {"key": "k", "n": n, "pad": pad}, f"big-{n}") for n in range(8)]
        dispositions = [a.json()["disposition"] for a in answers]
        assert "queued" in dispositions and "deferred" in dispositions, dispositions
        first = dispositions.index("deferred")
        deferred = answers[first]
        assert deferred.status_code == 503 and deferred.headers["retry-after"] == "30", deferred.text
        assert "again" in deferred.json()["reason"]
        state = await wfi.state(name, include_events=True)
        assert f"big-{first}" not in {e["delivery_id"] for e in state["events"].values()}, "nothing was kept"

        await dev_env.client.get_workflow_handle(held.json()["run_key"]).signal(ECHO_RUN_RELEASE_SIGNAL)

        async def taken_on_retry() -> Any:
            again = await post(s, path, {"key": "k", "n": first, "pad": pad}, f"big-{first}")
            assert again.status_code == 202, again.text
            return again

        retried = await assert_eventually(taken_on_retry, timeout=60, interval=1.0)
        assert retried.json()["disposition"] in ("accepted", "queued")
        await run_started(dev_env.client, retried.json()["run_key"])
        await still_takes_webhooks(s, dev_env.client, path)


async def test_what_a_sender_controls_is_refused_400_with_the_reason_never_500(
    dev_env, wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-9
    # Item 5: a refusal that is the same on every retry is a 4xx naming it, not "500 retrying is safe".
    name = unique("refusals")
    deployment = deployment_with(tmp_path, {name: QUEUED.format(name=name)}, task_queue=task_queue, ingress=OPEN)
    await activate_all(wfi, deployment)
    async with served(deployment, dev_env.client) as s:
        path = f"/hooks/{name}"
        # An http.request payload holds the body one level down: a body nested 64 deep makes a
        # payload 65 deep, past the payload limit of 64; 63 is the body's limit.
        too_deep = await post(s, path, {"key": "d", "deep": nested(63)}, "deep-64")
        assert too_deep.status_code == 400 and too_deep.json()["error"] == "json_too_deep", too_deep.text
        assert "63" in too_deep.json()["message"]
        at_limit = await post(s, path, {"key": "d", "deep": nested(62)}, "deep-63")
        assert at_limit.status_code == 202 and at_limit.json()["disposition"] == "accepted", at_limit.text

        for raw in (b'{"key": "s", "text": "\\ud800"}', b'{"key": "s", "\\udfff": 1}', b'{"key": "s", "t": "a\\ud83d"}'):
            surrogate = await s.http.post(path, content=raw, headers={"content-type": "application/json",
                                                                      "Idempotency-Key": '"surrogate"'})
            assert surrogate.status_code == 400, surrogate.text
            assert "lone surrogate" in surrogate.json()["message"], surrogate.text
        paired = await s.http.post(path, content=b'{"key": "s", "t": "\\ud83d\\ude00"}',
                                   headers={"content-type": "application/json", "Idempotency-Key": '"paired"'})
        assert paired.status_code == 202, "a surrogate pair is one character: accepted"

        bad_host = await s.http.post(path, json={"key": "h"}, headers={"Idempotency-Key": '"h-1"', "Host": "["})
        assert bad_host.status_code == 202, "the Host header is the sender's: it never fails the request"
        state = await wfi.state(name, include_events=True)
        ids = {e["delivery_id"] for e in state["events"].values()}
        assert {"deep-64", "surrogate"}.isdisjoint(ids), "refused at the edge: nothing reaches the activation"
        await still_takes_webhooks(s, dev_env.client, path)


async def test_invalid_text_is_refused_and_a_declared_charset_is_honoured(
    dev_env, wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-9
    # Item 8: a form field %FF became U+FFFD, and a declared charset was ignored.
    name = unique("charsets")
    deployment = deployment_with(tmp_path, {name: PLAIN.format(name=name)}, task_queue=task_queue, ingress=OPEN)
    await activate_all(wfi, deployment)
    form = "application/x-www-form-urlencoded"
    async with served(deployment, dev_env.client) as s:
        path = f"/hooks/{name}"

        async def send(body: bytes, content_type: str, key: str, query: str = "") -> Any:
            return await s.http.post(path + query, content=body, headers={"content-type": content_type,
                                                                           "Idempotency-Key": f'"{key}"'})

        for body, content_type, query, status in (
            (b"key=f&name=%FF", form, "", 400),
            (b"key=f&name=ok", form, "?tag=%FF", 400),
            (b"caf\xe9", "text/plain", "", 400),
            (b"key=f", f"{form}; charset=utf-16", "", 415),
            (b'{"key": "f"}', "application/json; charset=iso-8859-1", "", 415),
        ):
            refused = await send(body, content_type, "refused", query)
            assert refused.status_code == status, (body, content_type, query, refused.text)
            assert "\ufffd" not in refused.text
        latin = await send(b"key=l&name=%E9t%E9", f"{form}; charset=iso-8859-1", "latin", "?tag=%C3%A9")
        assert latin.status_code == 202, latin.text
        text = await send("ça coûte 5 €".encode("cp1252"), "text/plain; charset=windows-1252", "cp1252")
        assert text.status_code == 202, text.text
        for answer in (latin, text):
            await run_started(dev_env.client, answer.json()["run_key"])
        latin_input = await dev_env.client.get_workflow_handle(latin.json()["run_key"]).result()
        request = latin_input["input"]["bindings"]["request"]
        assert request["body"] == {"key": "l", "name": "été"} and request["query"] == {"tag": "é"}
        text_input = await dev_env.client.get_workflow_handle(text.json()["run_key"]).result()
        assert text_input["input"]["bindings"]["request"]["body"] == "ça coûte 5 €"
        state = await wfi.state(name, include_events=True)
        assert "refused" not in {e["delivery_id"] for e in state["events"].values()}
        await still_takes_webhooks(s, dev_env.client, path)


async def test_compressed_bodies_are_decoded_within_the_limit_and_unknown_codings_are_415(
    dev_env, wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: EXT-2, EXT-3
    # Item 7: Content-Encoding was ignored (gzip answered "bad JSON", br with a plain body accepted).
    import gzip
    import hashlib
    import hmac
    import json
    import zlib

    secret = "gh-" + "s3cr3t" * 4
    monkeypatch.setenv("WFI_TEST_GZIP_SECRET", secret)
    name = unique("gzip")
    deployment = deployment_with(tmp_path, {name: PLAIN.format(name=name)}, task_queue=task_queue, ingress={
        "endpoints": [{"workflow": name, "auth": {"scheme": "github", "secrets": ["env:WFI_TEST_GZIP_SECRET"]}}]})
    await activate_all(wfi, deployment)
    limit = deployment.ingress.max_body_bytes

    def github(body: bytes, ident: str, signed: bytes | None = None, **headers: str) -> dict[str, Any]:
        signature = hmac.new(secret.encode(), body if signed is None else signed, hashlib.sha256).hexdigest()
        return {"content": body, "headers": {"content-type": "application/json", "X-GitHub-Delivery": ident,
                                             "X-Hub-Signature-256": f"sha256={signature}", **headers}}

    async with served(deployment, dev_env.client) as s:
        path = f"/hooks/{name}"
        plain = json.dumps({"ref": "refs/heads/main", "pad": "z" * 2000}).encode()
        zipped = gzip.compress(plain)
        signed_plain = await s.http.post(path, **github(zipped, "g-1", signed=plain, **{"Content-Encoding": "gzip"}))
        assert signed_plain.status_code == 202 and signed_plain.json()["disposition"] == "accepted", signed_plain.text
        signed_zipped = await s.http.post(path, **github(zipped, "g-1", **{"Content-Encoding": "gzip"}))
        assert signed_zipped.status_code == 200 and signed_zipped.json()["disposition"] == "duplicate"
        uncompressed_retry = await s.http.post(path, **github(plain, "g-1"))
        assert uncompressed_retry.json()["disposition"] == "duplicate", "the coding is transport: the same event"
        deflated = await s.http.post(path, **github(zlib.compress(plain), "g-2", signed=plain, **{"Content-Encoding": "deflate"}))
        assert deflated.status_code == 202, deflated.text

        bomb = gzip.compress(b" " * (64 * 1024 * 1024), compresslevel=9)  # 64 MiB of JSON whitespace
        assert len(bomb) < limit, "the bomb itself is within the body limit"
        refused_bomb = await s.http.post(path, **github(bomb, "g-5", **{"Content-Encoding": "gzip"}))
        assert refused_bomb.status_code == 413 and "decoded" in refused_bomb.json()["message"], refused_bomb.text
        brotli = await s.http.post(path, **github(plain, "g-6", **{"Content-Encoding": "br"}))
        assert brotli.status_code == 415 and brotli.headers["accept-encoding"] == "gzip, deflate"
        broken = await s.http.post(path, **github(zipped[:-9], "g-7", **{"Content-Encoding": "gzip"}))
        assert broken.status_code == 400 and broken.json()["error"] == "bad_encoding"

        run = await dev_env.client.get_workflow_handle(signed_plain.json()["run_key"]).result()
        assert run["input"]["bindings"]["request"]["body"]["ref"] == "refs/heads/main"
        assert "content-encoding" not in run["input"]["bindings"]["request"]["headers"]
        state = await wfi.state(name, include_events=True)
        assert {e["delivery_id"] for e in state["events"].values()} == {"g-1", "g-2"}
        normal = await s.http.post(path, **github(plain, "g-normal"))
        assert normal.status_code == 202 and normal.json()["disposition"] == "accepted"
        await run_started(dev_env.client, normal.json()["run_key"])


async def test_the_documented_body_limit_is_reached_exactly_and_one_byte_more_is_413(
    dev_env, wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-2
    # Item 9: the documented limit could not be reached (the payload's envelope took ~166 bytes of it).
    import gzip
    import json

    from wf_initiation.ingress.limits import ENVELOPE_BYTES, MAX_BODY_BYTES

    assert MAX_BODY_BYTES == 245_760 and MAX_BODY_BYTES + ENVELOPE_BYTES == 262_144
    name = unique("limit")
    deployment = deployment_with(tmp_path, {name: PLAIN.format(name=name)}, task_queue=task_queue, ingress=OPEN)
    await activate_all(wfi, deployment)
    limit = deployment.ingress.max_body_bytes
    assert limit == MAX_BODY_BYTES, "the default is the documented limit"
    github_like = {"user-agent": "GitHub-Hookshot/044aadd", "x-github-event": "push", "x-github-hook-id": "292430182",
                   "x-github-hook-installation-target-id": "79929171", "x-github-hook-installation-target-type": "repository"}

    def body_of(size: int) -> bytes:
        shell = json.dumps({"ref": "refs/heads/main", "pad": ""}).encode()
        return shell[:-2] + b"p" * (size - len(shell)) + shell[-2:]

    def sent(body: bytes, key: str, **headers: str) -> dict[str, Any]:
        return {"content": body, "headers": {"content-type": "application/json", "Idempotency-Key": f'"{key}"',
                                             **github_like, **headers}}

    async with served(deployment, dev_env.client) as s:
        path = f"/hooks/{name}"
        at_limit = body_of(limit)
        assert len(at_limit) == 245_760
        accepted = await s.http.post(path, **sent(at_limit, "at-limit"))
        assert accepted.status_code == 202 and accepted.json()["disposition"] == "accepted", accepted.text
        over = await s.http.post(path, **sent(body_of(limit + 1), "over-limit"))
        assert over.status_code == 413 and over.json()["error"] == "body_too_large", over.text

        async def chunks(body: bytes) -> Any:  # no Content-Length: the same limit while streaming
            for i in range(0, len(body), 10_000):
                yield body[i:i + 10_000]
        streamed = await s.http.post(path, content=chunks(body_of(limit)), headers={
            "content-type": "application/json", "Idempotency-Key": '"streamed"'})
        assert streamed.status_code == 202, streamed.text
        streamed_over = await s.http.post(path, content=chunks(body_of(limit + 1)), headers={
            "content-type": "application/json", "Idempotency-Key": '"streamed-over"'})
        assert streamed_over.status_code == 413

        decoded_at_limit = await s.http.post(path, **sent(gzip.compress(body_of(limit)), "gzip-at-limit",
                                                          **{"Content-Encoding": "gzip"}))
        assert decoded_at_limit.status_code == 202, decoded_at_limit.text
        decoded_over = await s.http.post(path, **sent(gzip.compress(body_of(limit + 1)), "gzip-over",
                                                      **{"Content-Encoding": "gzip"}))
        assert decoded_over.status_code == 413 and "decoded" in decoded_over.json()["message"]

        many = {f"x-extra-{i}": "h" * 1700 for i in range(10)}  # 17 KB of kept headers: the envelope's share is 16 KiB
        too_many_headers = await s.http.post(path, **sent(b'{"ref": "x"}', "headers", **many))
        assert too_many_headers.status_code == 431 and str(ENVELOPE_BYTES) in too_many_headers.json()["message"]

        run = await dev_env.client.get_workflow_handle(accepted.json()["run_key"]).result()
        assert len(run["input"]["bindings"]["request"]["body"]["pad"]) == limit - len(body_of(0))
        state = await wfi.state(name, include_events=True)
        assert {e["delivery_id"] for e in state["events"].values()} == {"at-limit", "streamed", "gzip-at-limit"}
        await still_takes_webhooks(s, dev_env.client, path)


async def test_one_workflow_without_an_activation_leaves_the_ingress_ready_for_the_others(
    dev_env, wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-1
    # Item 12: one listed workflow without an activation made /readyz 503, taking every endpoint
    # of the ingress out of its load balancer.
    active, absent = unique("active"), unique("absent")
    deployment = deployment_with(tmp_path, {active: PLAIN.format(name=active), absent: PLAIN.format(name=absent)},
                                 task_queue=task_queue, ingress=OPEN)
    async with served(deployment, dev_env.client) as s:
        none_yet = await s.http.get("/readyz")
        assert none_yet.status_code == 503 and none_yet.json()["serving"] == [], "no workflow can be served yet"
        await activate_all(wfi, deployment, [active])

        async def ready() -> Any:
            answer = await s.http.get("/readyz")
            assert answer.status_code == 200, answer.text
            return answer

        body = (await assert_eventually(ready, interval=0.5)).json()
        assert body == {"ready": True, "temporal": "ok", "serving": [active],
                        "activations": {active: "running", absent: "missing"}}
        one = await s.http.get(f"/readyz/{active}")
        assert one.status_code == 200 and one.json() == {"ready": True, "workflow": active, "temporal": "ok",
                                                          "activation": "running"}
        other = await s.http.get(f"/readyz/{absent}")
        assert other.status_code == 503 and other.json()["activation"] == "missing"
        assert (await s.http.get("/readyz/no-such-workflow")).status_code == 404
        refused = await post(s, f"/hooks/{absent}", {"key": "a"}, "to-absent")
        assert refused.status_code == 503 and refused.json()["error"] == "no_activation"
        await still_takes_webhooks(s, dev_env.client, f"/hooks/{active}")
