"""The HTTP status of every disposition, checked over the whole enum: a disposition added to the
engine without a status here fails this test, and nothing the activation did not keep is a 2xx
(GitHub, Stripe and Standard Webhooks senders never send a 2xx-answered event again)."""

from __future__ import annotations

import json

import pytest

from wf_initiation.core.engine import DeliveryResult, Disposition
from wf_initiation.core.engine._types import NOT_RETAINED
from wf_initiation.ingress._app import STATUS, disposition_response
from wf_initiation.ingress._routes import Route
from wf_initiation.ingress.config import DEFERRED_RETRY_AFTER, IngressConfig

ROUTE = Route(workflow="w", entry="e", connector="http.request", methods=frozenset({"POST"}), auth=None, secrets=[],
              delivery_id=None)


@pytest.mark.parametrize("disposition", list(Disposition))
def test_every_disposition_has_an_explicit_status(disposition: Disposition) -> None:
    assert disposition in STATUS, f"{disposition.value!r} has no HTTP status in wf_initiation/ingress/_app.py STATUS"


@pytest.mark.parametrize("disposition", sorted(NOT_RETAINED - {Disposition.DUPLICATE}))
def test_what_the_activation_did_not_keep_is_never_a_2xx(disposition: Disposition) -> None:
    # proves: EXT-8
    response = disposition_response(ROUTE, DeliveryResult(entry="e", disposition=disposition, delivery_id="d", activation_id="a"), 2, 30)
    assert not 200 <= response.status_code < 300, f"{disposition.value} was not kept but answered {response.status_code}"


def test_a_deferred_delivery_is_503_with_the_deferred_retry_after() -> None:
    # proves: EXT-8
    result = DeliveryResult(entry="e", disposition=Disposition.DEFERRED, delivery_id="d", message="held bytes at the limit",
                            activation_id="a")
    response = disposition_response(ROUTE, result, 2, 45)
    assert response.status_code == 503 and response.headers["retry-after"] == "45"
    body = json.loads(bytes(response.body))
    assert body["disposition"] == "deferred" and body["reason"] == "held bytes at the limit"
    assert IngressConfig().deferred_retry_after == DEFERRED_RETRY_AFTER == 30


def test_a_duplicate_is_200_and_the_other_kept_dispositions_are_202_or_409() -> None:
    kept = set(Disposition) - NOT_RETAINED - {Disposition.ROUTED}
    assert STATUS[Disposition.DUPLICATE] == 200
    assert {STATUS[d] for d in kept} <= {202, 409}
    # Kept by the id's shard, not yet by its key's (WfiClient sends it on, so the ingress never gets it
    # back): were it answered, a retry is routed again, so the sender is asked to retry.
    assert STATUS[Disposition.ROUTED] == 503
    assert STATUS[Disposition.REFUSED] == 409 and STATUS[Disposition.CONFLICT] == 409
    assert STATUS[Disposition.INVALID] == 422 and STATUS[Disposition.DEACTIVATED] == 503
