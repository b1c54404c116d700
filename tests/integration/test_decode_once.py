"""One pass over an update's argument in the activation's shell (issue 33 item 3): the ``deliver`` and
``deliver_many`` validators measure and decode it once and hand the handler what they decoded, on an
unsharded activation and on a sharded one (whose validator also routes it). A replay, which runs no
validator, decodes in the handler; those decodes are not counted here."""

from __future__ import annotations

import collections
import pathlib
from typing import Any

import pytest
from temporalio import workflow

from tests.support.activation import make_spec, unique
from wf_initiation.client import WfiClient
from wf_initiation.workflows import _deliveries

WORKFILE = """
name: {name}
on:
  http.request: {{}}
"""


def hook(ident: str) -> dict[str, Any]:
    return {"delivery_id": ident, "method": "POST", "headers": {}, "body": {"n": ident}}


@pytest.mark.parametrize("shards", [1, 2])
async def test_each_update_argument_is_decoded_once_and_its_handler_takes_the_validators_value(
    wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, shards: int,
) -> None:
    decoded: collections.Counter[str] = collections.Counter()
    real = _deliveries.decode

    def counting(raw: Any, kind: Any, *, max_bytes: int | None, what: str) -> Any:
        info = workflow.current_update_info()
        if info is not None and not workflow.unsafe.is_replaying():
            decoded[info.id] += 1
        return real(raw, kind, max_bytes=max_bytes, what=what)

    monkeypatch.setattr(_deliveries, "decode", counting)
    name = unique("decode-once")
    settings = {"scale": {"shards": shards}} if shards > 1 else {}
    await wfi.activate(make_spec(tmp_path, WORKFILE.format(name=name), task_queue=task_queue, **settings))
    decoded.clear()  # the activation's own update is not a delivery

    results = [await wfi.deliver(name, hook(f"d-{i}")) for i in range(6)]
    results += await wfi.deliver_many(name, [(None, hook(f"m-{i}")) for i in range(6)])
    assert {r.disposition.value for r in results} == {"accepted"}, results
    assert decoded and set(decoded.values()) == {1}, f"decodes per update id: {dict(decoded)}"
