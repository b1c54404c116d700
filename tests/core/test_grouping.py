"""Concurrent deliveries to one activation are sent together (issue 19 item 3): fewer, fuller
``deliver_many`` updates, each caller still answered with its own durable disposition."""

from __future__ import annotations

import asyncio

import pytest

from wf_initiation._grouping import DeliveryGroups
from wf_initiation.core.engine import DeliveryResult, Disposition
from wf_initiation.errors import ActivationRefused
from wf_initiation.wire import DeliveryRequest


def result(request: DeliveryRequest) -> DeliveryResult:
    return DeliveryResult(entry=request.entry, delivery_id=str(request.payload["id"]), disposition=Disposition.ACCEPTED,
                          activation_id="a@1")


class FakeActivation:
    """Records the updates the groups send; each takes ``delay`` seconds."""

    def __init__(self, delay: float = 0.01, fail_when: str | None = None) -> None:
        self.updates: list[list[str]] = []
        self.alone: list[str] = []
        self.in_flight = self.most_in_flight = 0
        self.delay, self.fail_when = delay, fail_when

    async def many(self, workflow: str, requests: list[DeliveryRequest]) -> list[DeliveryResult]:
        self.updates.append([r.payload["id"] for r in requests])
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        if self.fail_when and any(r.payload["id"] == self.fail_when for r in requests):
            raise ActivationRefused("the handler failed on one delivery", cause_type="HandlerFailed")
        return [result(r) for r in requests]

    async def one(self, workflow: str, request: DeliveryRequest) -> DeliveryResult:
        self.alone.append(request.payload["id"])
        if request.payload["id"] == self.fail_when:
            raise ActivationRefused("the handler failed on this one", cause_type="HandlerFailed")
        return result(request)


def request(i: int | str) -> DeliveryRequest:
    return DeliveryRequest(entry=None, payload={"id": str(i)})


async def test_concurrent_deliveries_go_in_few_updates_each_caller_getting_its_own_result() -> None:
    fake = FakeActivation()
    groups = DeliveryGroups(fake.many, fake.one, window=0.002, in_flight=2)
    results = await asyncio.gather(*(groups.deliver("w", request(i), 20) for i in range(200)))
    assert [r.delivery_id for r in results] == [str(i) for i in range(200)], "each caller its own result"
    assert len(fake.updates) <= 20, f"{len(fake.updates)} updates for 200 deliveries"
    assert [i for update in fake.updates for i in update] == [str(i) for i in range(200)], "in arrival order"
    assert fake.most_in_flight <= 2


async def test_a_lone_delivery_waits_only_the_window() -> None:
    fake = FakeActivation(delay=0)
    groups = DeliveryGroups(fake.many, fake.one, window=0.002, in_flight=2)
    started = asyncio.get_running_loop().time()
    await groups.deliver("w", request(1), 20)
    assert asyncio.get_running_loop().time() - started < 0.5
    assert fake.updates == [["1"]]


async def test_a_lone_caller_does_not_wait_the_window_and_company_brings_it_back() -> None:
    fake = FakeActivation(delay=0)
    groups = DeliveryGroups(fake.many, fake.one, window=0.2, in_flight=1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    for i in range(5):  # one caller, one delivery at a time: every update carries one
        await groups.deliver("w", request(i), 20)
    assert loop.time() - started < 0.2, "a lone caller never waits the window"
    assert fake.updates == [[str(i)] for i in range(5)]

    fake.delay = 0.05
    await asyncio.gather(*(groups.deliver("w", request(f"b{i}"), 20) for i in range(4)))  # company arrives
    assert fake.updates[5:] == [["b0"], ["b1", "b2", "b3"]], "the first goes at once, the rest in the next update"
    fake.updates.clear()
    fake.delay = 0
    started = loop.time()
    await asyncio.gather(*(groups.deliver("w", request(f"c{i}"), 20) for i in range(3)))
    assert loop.time() - started >= 0.2, "with company, an idle activation's delivery waits the window"
    assert fake.updates == [["c0", "c1", "c2"]]


async def test_a_group_refused_as_a_whole_is_sent_again_one_delivery_each() -> None:
    fake = FakeActivation(fail_when="3")
    groups = DeliveryGroups(fake.many, fake.one, window=0.005, in_flight=1)
    outcomes = await asyncio.gather(*(groups.deliver("w", request(i), 20) for i in range(6)), return_exceptions=True)
    assert isinstance(outcomes[3], ActivationRefused), "only the delivery that fails gets the failure"
    assert all(isinstance(o, DeliveryResult) for i, o in enumerate(outcomes) if i != 3)
    assert "3" in fake.alone


async def test_a_caller_that_gave_up_before_its_delivery_was_sent_is_left_out() -> None:
    fake = FakeActivation(delay=0.05)
    groups = DeliveryGroups(fake.many, fake.one, window=0.0, in_flight=1)
    first = asyncio.create_task(groups.deliver("w", request("first"), 20))
    await asyncio.sleep(0.01)  # the first update is out; the next waits for it
    gave_up = asyncio.create_task(groups.deliver("w", request("gave-up"), 20))
    kept = asyncio.create_task(groups.deliver("w", request("kept"), 20))
    await asyncio.sleep(0)
    gave_up.cancel()
    await asyncio.gather(first, kept)
    assert fake.updates == [["first"], ["kept"]]


async def test_activations_are_grouped_apart() -> None:
    fake = FakeActivation()
    groups = DeliveryGroups(fake.many, fake.one, window=0.002, in_flight=1)
    await asyncio.gather(*(groups.deliver(f"w{i % 2}", request(i), 20) for i in range(10)))
    assert all(len({int(i) % 2 for i in update}) == 1 for update in fake.updates)


@pytest.mark.parametrize("in_flight", [1, 3])
async def test_updates_in_flight_per_activation_are_bounded(in_flight: int) -> None:
    fake = FakeActivation(delay=0.02)
    groups = DeliveryGroups(fake.many, fake.one, window=0.0, in_flight=in_flight)
    await asyncio.gather(*(groups.deliver("w", request(i), 20) for i in range(60)))
    assert fake.most_in_flight <= in_flight
