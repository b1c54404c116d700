"""The suite's shared fixtures and hooks: a pytest plugin, registered by tests/conftest.py.

- ``dev_env``: the session's Temporal dev server (one per xdist worker), or the server named by
  ``--temporal-address`` / ``TEMPORAL_ADDRESS``; tests that stop, kill or restart a server start
  their own (``tests.support.worker_proc.DevServerProcess``) whatever this says.
- ``ts_env``: a time-skipping test server of the test's own.
- ``task_queue``: a task queue of the test's own; ``worker``: an in-process worker with
  ``WfiPlugin(sample_runs=True)`` serving it on the dev server; ``wfi``: that worker and a
  ``WfiClient`` on it; ``ts_wfi``: the same on the time-skipping server.
- ``ts_activate``: starts activation workflows on the time-skipping server (which cannot run
  update-with-start) and terminates them after the test.

Nothing here may depend on another test: every name, queue and workflow id a test creates is its
own (``tests.support.activation.unique``), so tests run in any order and in parallel.
"""

from __future__ import annotations

import os
import pathlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import pytest_asyncio
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.support.temporal import bound_worker_shutdown, connect_existing, start_dev_server, start_time_skipping
from wf_initiation.client import WfiClient
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.plugin import WfiPlugin

bound_worker_shutdown()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("wf-initiation")
    group.addoption(
        "--temporal-address", default=os.environ.get("TEMPORAL_ADDRESS") or None, metavar="HOST:PORT",
        help="run the tests that share a server (dev_env) against this Temporal server instead of starting a dev "
             "server (default: $TEMPORAL_ADDRESS); the Wfi search attributes are registered if missing. Tests that "
             "restart or kill a server still start their own.")
    group.addoption(
        "--temporal-namespace", default=os.environ.get("TEMPORAL_NAMESPACE") or "default", metavar="NAMESPACE",
        help="the namespace on --temporal-address (default: $TEMPORAL_NAMESPACE, else default)")


@pytest_asyncio.fixture(scope="session")
async def dev_env(pytestconfig: pytest.Config) -> AsyncIterator[WorkflowEnvironment]:
    """A real Temporal server shared by the session (by each xdist worker's session): a dev server
    (`temporal server start-dev`) started here, or the one ``--temporal-address`` names."""
    address = pytestconfig.getoption("temporal_address")
    if address:
        env = await connect_existing(address, pytestconfig.getoption("temporal_namespace"))
    else:
        env = await start_dev_server()
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
    env = await start_time_skipping()
    yield env
    await env.shutdown()


@pytest.fixture
def task_queue() -> str:
    return f"tq-{uuid.uuid4()}"


@pytest.fixture
async def worker(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Worker]:
    """An in-process worker with the plugin (and its sample runs) serving ``task_queue`` on the dev
    server, for the length of the test."""
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]) as running:
        yield running


@pytest.fixture
def wfi(worker: Worker, dev_env: WorkflowEnvironment, task_queue: str) -> WfiClient:
    """A client of the activations that ``worker`` serves."""
    return WfiClient(dev_env.client, task_queue=task_queue)


@pytest.fixture
async def ts_wfi(ts_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[WfiClient]:
    """``wfi`` on the test's time-skipping server."""
    async with Worker(ts_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        yield WfiClient(ts_env.client, task_queue=task_queue)


@pytest.fixture
async def ts_activate(
    ts_env: WorkflowEnvironment, task_queue: str,
) -> AsyncIterator[Callable[[ActivationSpec], Awaitable[None]]]:
    """Start activation workflows on the time-skipping server and terminate them after the test.

    They are started directly: the time-skipping server cannot run update-with-start
    (``WfiClient.activate``); the workflow, its arguments and its id are the same. Terminating them
    keeps their timers and retrying activities from slowing the time skips of the rest of the test.
    """
    from wf_initiation.wire import workflow_id_for
    from wf_initiation.workflows.activation import ActivationWorkflow

    started = []

    async def start(spec: ActivationSpec) -> None:
        started.append(await ts_env.client.start_workflow(
            ActivationWorkflow.run, args=[spec, None], id=workflow_id_for(spec.workflow), task_queue=task_queue))

    yield start
    for handle in started:
        try:
            await ts_env.client.get_workflow_handle(handle.id).terminate("test over")
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise


LONG = ("slow", "crash", "xdist_group")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long tests first (marked slow or crash, or a group that shares an expensive fixture), in
    their order, then the rest: xdist hands tests out in this order, so the long ones start at once
    on every worker instead of ending the run alone."""
    items.sort(key=lambda item: not any(item.get_closest_marker(name) for name in LONG))


def pytest_configure(config: pytest.Config) -> None:
    """Under ``--dist loadgroup`` an xdist worker marks each grouped test's id with its group, and the
    controller keeps a group on one worker. pytest 9.2 silently undid that with pytest-xdist 3.8
    (pytest-xdist#1386): the tests of a group would run on several workers at once (two wheel builds
    in one build/ folder, the conformance kit run three times). Refuse that pair at once."""
    import xdist

    if (getattr(config.option, "dist", "no") == "loadgroup" and pytest.version_tuple[:2] >= (9, 2)
            and tuple(int(n) for n in xdist.__version__.split(".")[:2]) <= (3, 8)):
        raise pytest.UsageError(f"pytest {pytest.__version__} with pytest-xdist {xdist.__version__} does not keep an "
                                "xdist_group on one worker (pytest-xdist#1386): install the test extra (pytest<9.2)")


def pytest_collection_finish(session: pytest.Session) -> None:
    """The same, seen on a worker: a grouped test whose id does not carry its group."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    lost = [item.nodeid for item in session.items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(f"--dist loadgroup does not group {lost[0]} (pytest-xdist#1386)")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Record pytest's own verdict: the interpreter may abort at exit (sdk-python#300). Only the
    controlling process writes it: an xdist worker's verdict covers its share of the tests alone."""
    target = os.environ.get("WFI_PYTEST_STATUS_FILE")
    if target and not hasattr(session.config, "workerinput"):
        pathlib.Path(target).write_text(str(int(exitstatus)))
