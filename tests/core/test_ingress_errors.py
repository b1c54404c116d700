"""The ingress's table over the error tree (wf_initiation/ingress/_app.py DELIVERY_FAILURES): every
error WfiClient.deliver can raise has an HTTP status and code; only what the sender must fix is a
4xx, everything else a 503 with Retry-After (nothing was kept; the update id makes a retry safe)."""

from __future__ import annotations

import json

import pytest

from wf_initiation import errors
from wf_initiation.core.deployment import parse_deployment
from wf_initiation.errors import WfiError, most_specific
from wf_initiation.ingress import build
from wf_initiation.ingress._app import DELIVERY_FAILURES
from wf_initiation.ingress._routes import Route

# What WfiClient.deliver raises: its refusals before sending, and Temporal's errors mapped onto the tree.
DELIVER_RAISES = [cls for cls in errors.tree()
                  if issubclass(cls, errors.DeliveryRefused | errors.TemporalError | errors.ActivationError)]


def test_every_error_a_delivery_can_raise_has_a_row_of_its_own_or_its_familys() -> None:
    assert len(DELIVER_RAISES) >= 14
    for cls in DELIVER_RAISES:
        row = most_specific(cls, DELIVERY_FAILURES)
        assert row is not None and row is not WfiError, f"{cls.__name__} falls to the catch-all row"
        failed = DELIVERY_FAILURES[row]
        assert failed.status == (413 if issubclass(cls, errors.DeliveryTooLarge) else
                                 400 if issubclass(cls, errors.DeliveryRefused) else 503), cls
    assert set(DELIVERY_FAILURES) <= set(errors.tree())


def _answer(error: WfiError) -> tuple[int, dict[str, str], str | None]:
    ingress = build(parse_deployment({"temporal": {"task_queue": "hooks"}, "workflows": {}}))
    route = Route(workflow="orders", entry="order", connector="http.request", methods=frozenset({"POST"}), auth=None,
                  secrets=[], delivery_id=None)
    response = ingress._failed(route, error)
    return response.status_code, json.loads(bytes(response.body)), response.headers.get("retry-after")


@pytest.mark.parametrize(("error", "status", "code", "message"), [
    (errors.DeliveryTooLarge("the payload is 300000 bytes; the limit is 262144"), 413, "payload_too_large",
     "the payload is 300000 bytes; the limit is 262144"),
    (errors.DeliveryRefused("the payload cannot be delivered: NaN"), 400, "payload_refused",
     "the payload cannot be delivered: NaN"),
    (errors.TemporalUnavailable("cannot reach Temporal at x:1"), 503, "temporal_unavailable",
     "Temporal cannot be reached; retry later"),
    (errors.CodecError("the codec server did not answer"), 503, "codec_unavailable",
     "the payload codec (encryption) of this activation cannot be used by the ingress now; retry later"),
    (errors.CallTimeout("no answer"), 503, "timeout", "no durable disposition within 30s; retrying is safe"),
    (errors.ActivationNotFound("none", workflow="orders"), 503, "no_activation",
     "workflow 'orders' has no running activation; retry later"),
    (errors.ActivationEnded("ended", workflow="orders"), 503, "no_activation",
     "workflow 'orders' has no running activation; retry later"),
    (errors.ActivationRefused("refused", cause_type="HandlerFailed"), 503, "update_failed",
     "the activation could not take the delivery; retry later"),
    (errors.TemporalError("Temporal refused the call: x", status="INVALID_ARGUMENT", detail="x"), 503, "temporal_error",
     "Temporal refused the delivery; retry later"),
    (errors.NamespaceNotFound("namespace 'x' does not exist", detail="Namespace x is not found."), 503, "temporal_error",
     "Temporal refused the delivery; retry later"),
])
def test_each_failure_is_answered_by_its_row(error: WfiError, status: int, code: str, message: str) -> None:
    got_status, body, retry_after = _answer(error)
    assert (got_status, body) == (status, {"error": code, "message": message})
    assert (retry_after is not None) == (status == 503)
