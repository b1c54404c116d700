"""wf_initiation/_sharded_client.py following ``routed`` answers while a split is applied: a shard that
still answers ``routed`` (a routing made with the earlier count) or refuses the claim (``Misrouted``)
is followed again with the routing asked anew after a pause, for as long as a misrouted delivery is
routed again (~1 min), not a fixed few tries that a loaded machine's split outlasts (a caller then
got ``routed`` back: tests/crash/test_lanes_crash.py in CI). The shards here answer from a script;
the same on a real server through a killed worker: tests/crash/test_lanes_crash.py."""

from __future__ import annotations

from typing import Any

import pytest

from wf_initiation import _sharded_client
from wf_initiation._sharded_client import MISROUTED_ATTEMPTS, ShardedCalls
from wf_initiation.core.engine import DeliveryResult, Disposition
from wf_initiation.errors import ActivationRefused
from wf_initiation.wire import MISROUTED, DeliveryRequest


class _Routing:
    def __init__(self) -> None:
        self.forgotten = 0

    def forget(self, workflow: str) -> None:
        self.forgotten += 1


class _Wfi:
    def __init__(self) -> None:
        self._routing = _Routing()

    async def shards(self, workflow: str) -> int:
        return 4


def _answer(disposition: Disposition, shard: int | None = None) -> DeliveryResult:
    return DeliveryResult(entry="hook", delivery_id="d-1", disposition=disposition, shard=shard,
                          activation_id="wf@1")


class _Shards(ShardedCalls):
    """Answers ``script`` in turn (a ``Misrouted`` refusal or a result), then ``accepted``."""

    def __init__(self, script: list[Any]) -> None:
        super().__init__(_Wfi())  # type: ignore[arg-type]
        self.script = script
        self.sent: list[int] = []

    async def send_group(self, key: str, chunk: list[DeliveryRequest], uid: str | None = None) -> list[DeliveryResult]:
        self.sent.append(chunk[0].lane.shard if chunk[0].lane else -1)
        answer = self.script.pop(0) if self.script else _answer(Disposition.ACCEPTED)
        if isinstance(answer, Exception):
            raise answer
        return [answer]


@pytest.fixture(autouse=True)
def _no_pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    pauses: list[float] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)

    monkeypatch.setattr(_sharded_client.asyncio, "sleep", sleep)
    return pauses


async def test_a_route_still_routed_or_refused_through_a_long_split_is_followed_until_taken(_no_pauses: list[float]) -> None:
    # proves: EXT-8
    refused = ActivationRefused("not this shard's", cause_type=MISROUTED)
    script = [_answer(Disposition.ROUTED, 1), refused] * 6  # twelve answers: three times the earlier limit
    calls = _Shards(script)
    request = DeliveryRequest(entry="hook", payload={"id": "d-1"})
    [result] = await calls.follow_routes("wf", [request], [_answer(Disposition.ROUTED, 2)], uid="u")
    assert result.disposition is Disposition.ACCEPTED, result
    assert len(calls.sent) == 13 and calls.sent[:2] == [2, 1], calls.sent  # each routed answer's shard followed
    assert len(_no_pauses) == 12 and calls._wfi._routing.forgotten == 12, "a pause and the routing asked anew each"
    assert _no_pauses[-1] > _no_pauses[0], "pauses grow"


async def test_a_route_never_taken_is_returned_routed_after_the_misrouted_limit(_no_pauses: list[float]) -> None:
    calls = _Shards([_answer(Disposition.ROUTED, 1)] * (MISROUTED_ATTEMPTS + 5))
    request = DeliveryRequest(entry="hook", payload={"id": "d-1"})
    [result] = await calls.follow_routes("wf", [request], [_answer(Disposition.ROUTED, 1)])
    assert result.disposition is Disposition.ROUTED and len(calls.sent) == MISROUTED_ATTEMPTS
    assert sum(_no_pauses) > 30, "about a minute of pauses before the ingress answers 503"

