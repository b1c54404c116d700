"""Whatever a sender controls (method, path, query, headers, media type, charset, content coding,
body), the ingress answers it with a JSON status that names the problem: never a 500 (issue 18 item
5). Hypothesis drives a real HTTP client at a served ingress with a real activation behind it; the
activation then still takes a normal webhook and starts its run."""

from __future__ import annotations

import asyncio
import gzip
import json
import pathlib
import string
import zlib

import httpx
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from temporalio.worker import Worker

from tests.support.activation import unique
from tests.support.hostile import run_started
from tests.support.ingress import activate_all, deployment_with, served
from wf_initiation.client import WfiClient
from wf_initiation.plugin import WfiPlugin

HOOK = """
name: {name}
on:
  http.request: {{}}
"""
VISIBLE = string.ascii_letters + string.digits + string.punctuation + " "
TOKEN = string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**30, 10**30) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)
bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    json_values.map(lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8")),
    st.sampled_from([b'"\\ud800"', b'{"\\udfff": 1}', b'["a\\ud83d"]', b'{"a": 1e999}', b"[NaN]", b"\xef\xbb\xbf{}",
                     b"9" * 1200, b"{" * 70 + b"}" * 70, b"[" * 64 + b"]" * 64, b"[" * 63 + b"]" * 63,
                     b"a=%FF&b=%C3%A9", b"payload=%7B%22a%22%3A1%7D", b"\x00\x01\x02"]),
    st.integers(1, 70).map(lambda d: b"[" * d + b"]" * d),
    st.text(alphabet=VISIBLE + "%", max_size=60).map(str.encode),
)
media_types = st.one_of(
    st.sampled_from([None, "application/json", "application/json; charset=utf-8", "application/json; charset=latin-1",
                     'application/json; charset="', "text/plain", "text/plain; charset=klingon",
                     "text/plain; charset=windows-1252", "text/csv; charset=us-ascii",
                     "application/x-www-form-urlencoded", "application/x-www-form-urlencoded; charset=iso-8859-1",
                     "application/octet-stream", "multipart/form-data; boundary=x", "", ";;;", "application/x+json",
                     "text/plain; charset=utf-16"]),
    st.text(alphabet=VISIBLE, max_size=40).map(str.strip),  # a client sends no header value with edge spaces
)
codings = st.sampled_from([None, "gzip", "deflate", "br", "identity", "gzip, gzip", "x-gzip", "", ",", "gzip;q=1",
                           "zstd", "deflate, identity"])
keys = st.one_of(st.none(), st.text(alphabet=VISIBLE, min_size=1, max_size=40).map(str.strip), st.just("k" * 2000),
                 st.just('"quoted \\" key"'))
queries = st.text(alphabet=string.ascii_letters + "%=&+;0123456789ABCDEFabcdef", max_size=40)
headers = st.dictionaries(st.text(alphabet=TOKEN, min_size=1, max_size=12).map(lambda h: "x-" + h),
                          st.text(alphabet=VISIBLE, max_size=40).map(str.strip), max_size=4)


async def test_no_request_a_sender_can_send_is_answered_500(dev_env, task_queue: str, tmp_path: pathlib.Path) -> None:
    # proves: EXT-9
    name = unique("fuzz")
    deployment = deployment_with(tmp_path, {name: HOOK.format(name=name)}, task_queue=task_queue,
                                 ingress={"default_auth": {"scheme": "none"}})
    wfi = WfiClient(dev_env.client, task_queue=task_queue)
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        await activate_all(wfi, deployment)
        async with served(deployment, dev_env.client) as s:
            paths = [f"/hooks/{name}"] * 8 + [f"/hooks/{name}/request", "/hooks/nope", f"/readyz/{name}", "/readyz/%ff",
                     "/%ff%fe", "/hooks/%2e%2e/x", "/metrics", "/healthz"]
            answers: list[int] = []

            @settings(max_examples=150, deadline=None, database=None,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
            @given(method=st.sampled_from(["POST"] * 8 + ["PUT", "GET"]), path=st.sampled_from(paths),
                   query=queries, body=bodies, media=media_types, coding=codings, compress=st.booleans(), key=keys,
                   extra=headers)
            # Each kind of answer asserted below at least once, whatever the random draws (150 draws
            # held 1-7 accepted deliveries; a run with none failed that check).
            @example(method="POST", path=f"/hooks/{name}", query="", body=b'{"ok": true}', media="application/json",
                     coding=None, compress=False, key='"fuzz-accepted"', extra={})  # 202
            @example(method="POST", path=f"/hooks/{name}", query="", body=b"\x00\x01\x02", media="application/json",
                     coding=None, compress=False, key='"fuzz-bad-json"', extra={})  # 400
            @example(method="POST", path="/hooks/nope", query="", body=b"{}", media="application/json",
                     coding=None, compress=False, key=None, extra={})  # 404
            @example(method="POST", path=f"/hooks/{name}", query="", body=b"{}", media="application/json",
                     coding="zstd", compress=False, key='"fuzz-zstd"', extra={})  # 415
            def sender(method: str, path: str, query: str, body: bytes, media: str | None, coding: str | None,
                       compress: bool, key: str | None, extra: dict[str, str]) -> None:
                sent = dict(extra)
                if media is not None:
                    sent["content-type"] = media
                if coding is not None:
                    sent["content-encoding"] = coding
                    if compress and coding in ("gzip", "x-gzip"):
                        body = gzip.compress(body)
                    elif compress and coding == "deflate":
                        body = zlib.compress(body)
                if key is not None:
                    sent["idempotency-key"] = key
                with httpx.Client(base_url=s.url, timeout=60) as http:
                    answer = http.request(method, path + ("?" + query if query else ""), content=body, headers=sent)
                answers.append(answer.status_code)
                assert answer.status_code != 500, (answer.status_code, answer.text)
                assert answer.headers.get("content-type", "").startswith(("application/json", "text/plain")), answer.headers
                if answer.status_code >= 400 and answer.headers["content-type"].startswith("application/json"):
                    refusal = answer.json()
                    assert refusal.get("message") or refusal.get("reason") or refusal.get("disposition"), refusal

            await asyncio.to_thread(sender)
            assert {400, 404, 415} <= set(answers) and any(200 <= a < 300 for a in answers), sorted(set(answers))
            normal = await s.http.post(f"/hooks/{name}", json={"n": 1}, headers={"Idempotency-Key": '"normal-after"'})
            assert normal.status_code == 202 and normal.json()["disposition"] == "accepted", normal.text
            await run_started(dev_env.client, normal.json()["run_key"])
