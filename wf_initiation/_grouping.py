"""Concurrent deliveries to one activation sent together: one ``deliver_many`` update for many callers.

Every update is one write of the activation's history and one workflow task, whatever it carries
(up to ``MAX_BULK`` deliveries): the cheapest way to take more deliveries per second into one
activation is to send fewer, fuller updates. A caller hands its delivery to :class:`DeliveryGroups`
and awaits its own result; per activation at most ``in_flight`` updates are out at once. When none
is, a delivery waits ``window`` for company, but only while the activation has company (its last
update carried more than one delivery, or others arrived while it was out): a lone caller's
deliveries go at once. When an update is out, the deliveries that arrive meanwhile go in the next
update as soon as one returns (group commit). Each caller gets its own disposition, and only
once the update that carried it returned, so it is as durable as a delivery sent alone.

A group refused as a whole (an update handler failing on one delivery) is sent again one delivery
per update, so one delivery cannot fail the others. A caller that gives up (its timeout) before its
delivery was sent is left out of the next update; one given up after is delivered anyway, and a
retry of it is then answered ``duplicate`` (a delivery sent alone would get its first answer again).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import Awaitable, Callable

from wf_initiation.core.engine import DeliveryResult
from wf_initiation.core.limits import MAX_BULK, MAX_BULK_BYTES
from wf_initiation.errors import ActivationRefused
from wf_initiation.wire import DeliveryRequest

SendMany = Callable[[str, list[DeliveryRequest]], Awaitable[list[DeliveryResult]]]
SendOne = Callable[[str, DeliveryRequest], Awaitable[DeliveryResult]]


@dataclasses.dataclass(eq=False)
class _Item:
    request: DeliveryRequest
    size: int
    result: asyncio.Future[DeliveryResult]


@dataclasses.dataclass(eq=False)
class _Outbox:
    """One activation's pending deliveries and its updates in flight."""

    pending: collections.deque[_Item] = dataclasses.field(default_factory=collections.deque)
    in_flight: int = 0
    waiting: bool = False  # a window is running: its end sends
    company: bool = False  # the last update carried several deliveries, or others came while it was out


class DeliveryGroups:
    """Groups concurrent deliveries per activation (see the module docstring).

    Args:
        send_many: Sends one ``deliver_many`` update (with the client's retries) and returns its results.
        send_one: Sends one delivery alone (used when a group is refused as a whole).
        window: Seconds a delivery waits for others when no update of its activation is in flight.
        in_flight: Updates out at once per activation.
    """

    def __init__(self, send_many: SendMany, send_one: SendOne, *, window: float = 0.002, in_flight: int = 2) -> None:
        self._send_many = send_many
        self._send_one = send_one
        self._window = window
        self._max_in_flight = max(1, in_flight)
        self._outboxes: dict[str, _Outbox] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def deliver(self, workflow: str, request: DeliveryRequest, size: int) -> DeliveryResult:
        """Deliver ``request`` (``size``: its payload's bytes, already checked) with others; its own result."""
        box = self._outboxes.setdefault(workflow, _Outbox())
        item = _Item(request, size, asyncio.get_running_loop().create_future())
        box.pending.append(item)
        self._kick(workflow, box)
        return await item.result

    def _kick(self, workflow: str, box: _Outbox) -> None:
        if not box.pending or box.waiting or box.in_flight >= self._max_in_flight:
            return
        if box.in_flight == 0 and self._window > 0 and box.company:  # idle: wait a moment for company
            box.waiting = True
            asyncio.get_running_loop().call_later(self._window, self._window_over, workflow, box)
            return
        self._send(workflow, box)

    def _window_over(self, workflow: str, box: _Outbox) -> None:
        box.waiting = False
        if box.in_flight < self._max_in_flight:
            self._send(workflow, box)

    def _send(self, workflow: str, box: _Outbox) -> None:
        group: list[_Item] = []
        size = 0
        while box.pending and len(group) < MAX_BULK:
            item = box.pending[0]
            if item.result.cancelled():  # its caller gave up before it was sent: not delivered, not sent
                box.pending.popleft()
                continue
            if group and size + item.size + 64 > MAX_BULK_BYTES:
                break
            group.append(box.pending.popleft())
            size += item.size + 64
        if not group:
            return
        box.in_flight += 1
        task = asyncio.get_running_loop().create_task(self._carry(workflow, box, group))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if box.pending:
            self._kick(workflow, box)  # another update may go at once (in_flight permitting)

    async def _carry(self, workflow: str, box: _Outbox, group: list[_Item]) -> None:
        try:
            try:
                results = await self._send_many(workflow, [i.request for i in group])
            except Exception as exc:
                if len(group) == 1 or not _refused_as_a_whole(exc):
                    _fail(group, exc)
                    return
                await asyncio.gather(*(self._alone(workflow, item) for item in group))
                return
            for item, result in zip(group, results, strict=True):
                if not item.result.done():
                    item.result.set_result(result)
        except BaseException as exc:  # cancelled (the client is closing): nobody may wait for ever
            _fail(group, exc)
            raise
        finally:
            box.in_flight -= 1
            box.company = len(group) > 1 or bool(box.pending)
            self._kick(workflow, box)

    async def _alone(self, workflow: str, item: _Item) -> None:
        try:
            result = await self._send_one(workflow, item.request)
        except Exception as exc:
            _fail([item], exc)
        else:
            if not item.result.done():
                item.result.set_result(result)


def _fail(group: list[_Item], exc: BaseException) -> None:
    for item in group:
        if not item.result.done():
            item.result.set_exception(exc)


def _refused_as_a_whole(exc: Exception) -> bool:
    """An update the activation failed (one delivery made its handler fail): each alone then."""
    return isinstance(exc, ActivationRefused) and not exc.retryable
