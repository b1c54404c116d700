"""The ingress's receiver driven without Starlette, HTTP or a socket (issue 33 item 4):
``Ingress.receive`` takes a plain ``HttpRequest`` and answers a plain ``HttpResponse``, with a real
dev server and worker behind it. What the Starlette adapter adds (routing, the body's stream, the
response) is proved over real HTTP by the other test_ingress modules."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest

from tests.support.activation import unique
from tests.support.ingress import activate_all, deployment_with
from tests.support.runs import describe_or_none
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.ingress import build
from wf_initiation.ingress._http import Disconnected, HttpRequest, HttpResponse
from wf_initiation.ingress._receiver import Ingress

TOKEN = "tok-" + "receiver" * 3
HOOK = """
name: {name}
on:
  http.request: {{path: /hooks/{name}}}
"""


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def cut_off() -> AsyncIterator[bytes]:
    yield b'{"half": '
    raise Disconnected


def request(body: bytes, *, method: str = "POST", token: str = TOKEN, key: str | None = "d-1",
            extra: list[tuple[str, str]] | None = None, stream: AsyncIterator[bytes] | None = None) -> HttpRequest:
    headers = [("authorization", f"Bearer {token}"), ("content-type", "application/json"), *(extra or [])]
    if key is not None:
        headers.append(("idempotency-key", f'"{key}"'))
    return HttpRequest(method=method, path="/hooks/x", headers=headers, body=stream or chunks(body), peer="test")


def answer(response: HttpResponse) -> tuple[int, dict]:
    return response.status_code, json.loads(response.body)


async def assert_started(wfi: WfiClient, run_key: str) -> None:
    async def started() -> None:
        assert await describe_or_none(wfi.client, run_key) is not None, f"no run {run_key} yet"
    await assert_eventually(started, timeout=60)


@pytest.fixture
def receiving(wfi: WfiClient, dev_env, task_queue: str, tmp_path: pathlib.Path,
              monkeypatch: pytest.MonkeyPatch) -> tuple[Ingress, str]:
    monkeypatch.setenv("WFI_TEST_RECEIVER_TOKEN", TOKEN)
    name = unique("receiver")
    deployment = deployment_with(tmp_path, {name: HOOK.format(name=name)}, task_queue=task_queue,
                                 ingress={"default_auth": {"scheme": "token", "secrets": ["env:WFI_TEST_RECEIVER_TOKEN"]},
                                          "max_body_bytes": 4096})
    return build(deployment, client=dev_env.client), name


async def test_a_plain_request_is_delivered_and_answered_with_its_disposition_without_starlette(
    wfi: WfiClient, receiving: tuple[Ingress, str],
) -> None:
    # proves: EXT-8
    ingress, name = receiving
    await activate_all(wfi, ingress.deployment)
    route = ingress.table.by_path[f"/hooks/{name}"]
    status, body = answer(await ingress.receive(route, request(b'{"go": 1}', key="d-1")))
    assert (status, body["disposition"], body["delivery_id"]) == (202, "accepted", "d-1"), body
    await assert_started(wfi, body["run_key"])
    status, again = answer(await ingress.receive(route, request(b'{"go": 1}', key="d-1")))
    assert (status, again["disposition"], again["run_key"]) == (200, "duplicate", body["run_key"])


async def test_each_refusal_of_the_pipeline_is_answered_before_anything_is_delivered(
    wfi: WfiClient, receiving: tuple[Ingress, str],
) -> None:
    # proves: EXT-9
    ingress, name = receiving
    await activate_all(wfi, ingress.deployment)
    route = ingress.table.by_path[f"/hooks/{name}"]

    wrong_method = await ingress.receive(route, request(b"{}", method="GET"))
    assert (wrong_method.status_code, wrong_method.headers["allow"]) == (405, "POST")
    status, refused = answer(await ingress.receive(route, request(b'{"go": 1}', token="forged")))
    assert (status, refused["error"]) == (401, "unauthenticated")
    declared = request(b"", extra=[("content-length", "5000")], stream=cut_off())  # refused unread
    status, too_large = answer(await ingress.receive(route, declared))
    assert (status, too_large["error"]) == (413, "body_too_large")
    streamed = request(b"", stream=chunks(b"x" * 3000, b"x" * 3000))
    assert answer(await ingress.receive(route, streamed)) == (413, too_large)
    status, gone = answer(await ingress.receive(route, request(b"", stream=cut_off())))
    assert (status, gone["error"]) == (400, "client_disconnected")
    status, no_id = answer(await ingress.receive(route, request(b'{"go": 1}', key=None)))
    assert (status, no_id["error"]) == (400, "missing_delivery_id")
    status, not_json = answer(await ingress.receive(route, request(b'{"go": ')))
    assert status == 400, not_json

    assert [e async for e in wfi.events(name)] == [], "nothing refused reached the activation"
    status, body = answer(await ingress.receive(route, request(b'{"go": 2}', key="d-after")))
    assert (status, body["disposition"]) == (202, "accepted"), body
    await assert_started(wfi, body["run_key"])


def test_the_pipeline_module_imports_no_web_framework() -> None:
    probe = ("import sys, wf_initiation.ingress._receiver, wf_initiation.ingress._readiness, wf_initiation.ingress._http; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'starlette', 'uvicorn', 'httptools'}))")
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert found.stdout.strip() == "[]", found.stdout + found.stderr
