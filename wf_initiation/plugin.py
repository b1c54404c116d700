"""`WfiPlugin`: add wf-initiation to a Temporal worker in one line.

    client = await Client.connect("localhost:7233", plugins=[WfiPlugin()])
    worker = Worker(client, task_queue="wfi-activations")          # the plugin comes from the client

or, with a client you already have, ``Worker(client, task_queue=..., plugins=[WfiPlugin()])``.

It registers the activation workflow, the run-start/outcome/control activities (bound to the
worker's client), the built-in poll connectors, and composes with what the user configured: the
client's payload codec (encryption), failure converter, external storage and interceptors are
kept; only a default payload converter is swapped for the pydantic one (see docs/plugin.md). At
start the worker checks the namespace's search attributes (registering missing ones where allowed).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import weakref
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import temporalio.worker
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, ClientConfig
from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    DefaultPayloadConverter,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
)
from temporalio.plugin import SimplePlugin
from temporalio.worker import ReplayerConfig, UnsandboxedWorkflowRunner, Worker, WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from wf_initiation import _uncached
from wf_initiation._memory import TRIM_EVERY, TRIMMER
from wf_initiation._sdk import release_shutdown
from wf_initiation.activities.clock import wait_for_instant
from wf_initiation.activities.lifecycle import LifecycleActivities
from wf_initiation.activities.poll import poll_activities as resolve_poll_activities
from wf_initiation.activities.poll._grant import ConnectionsInterceptor
from wf_initiation.activities.runs import RunActivities
from wf_initiation.activities.shards import ShardActivities
from wf_initiation.activities.signals import SignalActivities
from wf_initiation.core._diagnostics import DiagnosticError
from wf_initiation.core.connections import WorkerConnections
from wf_initiation.core.deployment import Deployment, load_deployment
from wf_initiation.core.unencoded import FLAG as UNENCODED_FLAG
from wf_initiation.errors import SearchAttributesMissing, WfiSetupError
from wf_initiation.wire.search_attributes import ensure_registered
from wf_initiation.workflows._start_input import DetachedSandboxRunner, DetachedUnsandboxedRunner, ReleaseCarriedState
from wf_initiation.workflows.activation import ActivationWorkflow
from wf_initiation.workflows.runapi import WaitForExample
from wf_initiation.workflows.sample_runs import EchoRun

logger = logging.getLogger(__name__)

# Pure, deterministic libraries the engine uses inside workflow code. Passed through the sandbox:
# they import lazily (jinja2 compiles templates on first use) and hold locks/caches that are safe.
# Only the project's own namespaced modules pass through (never a bare name a user's module could
# share, such as ``activities``): the pure core, the error tree (one class object inside and outside
# the sandbox, so that an ``except`` in workflow code matches what the core raises), the activity
# request models and the telemetry bridge (its context variable must be the one the worker's
# interceptor sets).
PASSTHROUGH_MODULES = (
    "wf_initiation.core", "wf_initiation.wire", "wf_initiation.activities", "wf_initiation._trace_context",
    "wf_initiation._uncached", "wf_initiation.errors",
    "jinja2", "markupsafe", "jsonschema", "jsonschema_specifications", "referencing", "rpds", "attrs",
    "croniter", "dateutil", "tzdata", "ruamel", "opentelemetry",
)


def _runner(existing: WorkflowRunner | None) -> WorkflowRunner:
    """The worker's workflow runner with wf-initiation's modules passed through the sandbox.

    A sandboxed runner of the user's is kept with everything it sets (its restrictions, its
    ``runner_class``) and only the pass-through modules added; an unsandboxed one is kept as it is.
    The SDK's sandboxed runner becomes a :class:`DetachedSandboxRunner` with the same settings
    (workflows/_start_input.py: a cached run holds no view into the activation it began with).
    """
    if existing is None:
        return DetachedSandboxRunner(restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES))
    if not isinstance(existing, SandboxedWorkflowRunner):
        return existing  # the user chose an unsandboxed runner; nothing to add
    restrictions = existing.restrictions.with_passthrough_modules(*PASSTHROUGH_MODULES)
    if type(existing) is SandboxedWorkflowRunner:  # the SDK's own: the same, holding less of each run's start
        return DetachedSandboxRunner(restrictions=restrictions, runner_class=existing.runner_class)
    return dataclasses.replace(existing, restrictions=restrictions)


def _unsandboxed_runner(existing: WorkflowRunner | None) -> WorkflowRunner:
    """The worker's runner of workflows outside the sandbox (the activation workflow is one): the SDK's
    own becomes a :class:`DetachedUnsandboxedRunner` (workflows/_start_input.py: a cached run holds no
    view into the activation it began with); a runner of the user's own is kept as it is."""
    if existing is None or type(existing) is UnsandboxedWorkflowRunner:
        return DetachedUnsandboxedRunner()
    return existing


# ---------------------------------------------------------------------------- data converter
def compose_data_converter(existing: DataConverter | None) -> DataConverter:
    """The user's data converter, able to carry wf-initiation's pydantic models.

    Keeps the payload codec, failure converter and external storage. Only the SDK's default payload
    converter is replaced (by :class:`PydanticPayloadConverter`, a superset for JSON values); a
    pydantic one, or a payload converter of the user's own, is kept as it is (and checked, see
    :func:`check_payload_converter`).
    """
    if existing is None:
        return pydantic_data_converter
    if existing.payload_converter_class is DefaultPayloadConverter:
        return dataclasses.replace(existing, payload_converter_class=PydanticPayloadConverter)
    return existing


def check_payload_converter(converter: DataConverter) -> None:
    """Raise :class:`WfiSetupError` unless the payload converter round-trips a wire model."""
    from wf_initiation.core.engine import ErrorRecord

    probe = ErrorRecord(at=datetime(2026, 1, 1, tzinfo=UTC), kind="probe", entry="e", message="m")
    name = converter.payload_converter_class.__qualname__
    try:
        back = converter.payload_converter.from_payloads(converter.payload_converter.to_payloads([probe]), [ErrorRecord])
        ok = back == [probe]
    except Exception as exc:  # any failure of the user's converter means the same: it cannot carry our types
        ok, name = False, f"{name} ({type(exc).__name__}: {' '.join(str(exc).split())[:120]})"
    if not ok:
        raise WfiSetupError(
            f"the data converter's payload converter {name} cannot carry pydantic models, which wf-initiation's "
            "workflows and activities exchange: base it on temporalio.contrib.pydantic.PydanticPayloadConverter "
            "(keep your encoding converters before it) or leave the payload converter at its default"
        )


class FlaggingCodec(PayloadCodec, WithSerializationContext):
    """The team's codec on a worker: encodes and decodes with it, and flags each payload that reached
    the worker without the team's encoding (``core.unencoded.FLAG`` in its metadata), which the
    activation's delivery handlers act on (``temporal.unencoded``).

    A payload is in the team's encoding when the codec decoded it, or when the codec would have left
    it as it is (a codec that compresses only large payloads); any other payload the codec left as it
    is came in plaintext. Only payloads the codec left as they are cost an encode more, which no
    client of the team's sends. A flag a sender put in its payload's metadata is removed.
    """

    def __init__(self, codec: PayloadCodec) -> None:
        self.codec = codec

    def with_context(self, context: SerializationContext) -> FlaggingCodec:
        if not isinstance(self.codec, WithSerializationContext):
            return self
        inner = self.codec.with_context(context)
        return self if inner is self.codec else FlaggingCodec(inner)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self.codec.encode(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        decoded = await self.codec.decode(payloads)
        if len(decoded) != len(payloads):
            return decoded  # a codec that merges payloads: nothing to pair them by
        left = [i for i, (sent, got) in enumerate(zip(payloads, decoded, strict=True)) if sent is got or sent == got]
        plaintext = set()
        if left:
            again = await self.codec.encode([payloads[i] for i in left])
            if len(again) == len(left):
                plaintext = {i for i, encoded in zip(left, again, strict=True) if encoded != payloads[i]}
        return [_flagged(p, i in plaintext) for i, p in enumerate(decoded)]


def _flagged(payload: Payload, plaintext: bool) -> Payload:
    if (UNENCODED_FLAG in payload.metadata) == plaintext:
        return payload
    copy = Payload()
    copy.CopyFrom(payload)
    if plaintext:
        copy.metadata[UNENCODED_FLAG] = b"1"
    else:
        del copy.metadata[UNENCODED_FLAG]
    return copy


def worker_data_converter(converter: DataConverter) -> DataConverter:
    """What a worker of activations decodes with: ``converter`` with its payload codec wrapped in a
    :class:`FlaggingCodec` (the same converter when it has no codec, or its codec is wrapped already).

    Replaying an activation's history needs it too: the flags decide what its handlers took.
    """
    codec = converter.payload_codec
    if codec is None or isinstance(codec, FlaggingCodec):
        return converter
    return dataclasses.replace(converter, payload_codec=FlaggingCodec(codec))


def _derived_client(client: Client, **changes: Any) -> Client:
    """A client on the same connection with some settings changed (no plugins re-applied)."""
    cfg = client.config(active_config=True)
    return Client(
        cfg["service_client"], namespace=cfg["namespace"],
        data_converter=changes.get("data_converter", cfg["data_converter"]),
        interceptors=changes.get("interceptors", cfg["interceptors"]),
        default_workflow_query_reject_condition=cfg["default_workflow_query_reject_condition"],
        header_codec_behavior=cfg["header_codec_behavior"],
    )


# ---------------------------------------------------------------------------- the plugin
class WfiPlugin(SimplePlugin):
    """Worker and client wiring of wf-initiation.

    Args:
        sample_runs: Also register the sample run workflows ``wfi.EchoRun`` and ``wfi.WaitForExample``
            (for trying things out and for the test suite; off in production).
        poll_activities: Extra poll connector activities of third-party connectors (those whose manifest
            names its ``implementation`` are registered without this).
        tracer_provider: An OpenTelemetry ``TracerProvider``: a delivery's trace then runs from the client
            call through the activation's decision to the run's start (docs/observability.md). Adds the
            SDK's ``TracingInterceptor`` unless the client or worker already has one.
        meter_provider: An OpenTelemetry ``MeterProvider`` for wf-initiation's metrics (dispositions,
            acceptance latency, schedule lag, polls, dedup set size, queue depths).
        check_search_attributes: At worker start, check (and where allowed register) the Wfi search
            attributes; a worker that cannot fails with one line naming the command that adds them.
        deployment: The deployment this worker serves (a ``Deployment`` or the path of its file): its
            ``connections`` are the only ones whose secret references (``env:``/``file:``) the poll
            activities resolve, and only for a connection sent that equals one of them. Without it the
            worker resolves no secret reference (docs/deployment.md, "Secrets").
        trim_memory_every: How often the worker process gives memory it has freed back to the system
            (glibc's ``malloc_trim``, on a thread of its own; one per process): loading an activation
            frees about 10 MB per full shard at once, which glibc would otherwise keep. The process's
            mmap threshold is fixed at glibc's initial 128 KiB as well (``mallopt``: a block that large
            goes back when freed; glibc would raise the threshold after each). None: neither (where
            the C library has no ``malloc_trim`` nothing is done either way).
    """

    def __init__(
        self, *, sample_runs: bool = False, poll_activities: Sequence[Callable[..., Any]] = (),
        tracer_provider: Any | None = None, meter_provider: Any | None = None, check_search_attributes: bool = True,
        deployment: Deployment | str | os.PathLike[str] | None = None, trim_memory_every: timedelta | None = TRIM_EVERY,
    ) -> None:
        workflows: list[type] = [ActivationWorkflow, *([EchoRun, WaitForExample] if sample_runs else [])]
        super().__init__(
            "wf-initiation",
            data_converter=compose_data_converter,
            workflows=workflows,
            activities=[*resolve_poll_activities(extra=poll_activities), wait_for_instant],
            workflow_runner=_runner,
        )
        self._check_search_attributes = check_search_attributes
        if trim_memory_every is not None and trim_memory_every <= timedelta(0):
            raise WfiSetupError(f"WfiPlugin(trim_memory_every={trim_memory_every!r}): give a positive interval, or None to never trim")
        self._trim_memory_every = trim_memory_every
        self._connections = ConnectionsInterceptor(_worker_connections(deployment))
        # One check (and one log line) per connection and namespace, shared by every worker this
        # plugin serves: workers started together on one client would each register and log.
        self._attribute_checks: weakref.WeakKeyDictionary[Any, dict[str, asyncio.Future[list[str]]]] = weakref.WeakKeyDictionary()
        self._telemetry: Any | None = None
        self._tracing: Any | None = None
        self._telemetry_interceptor: Any | None = None
        if tracer_provider is not None or meter_provider is not None:
            from wf_initiation.telemetry import WfiTelemetry, WfiTelemetryInterceptor

            self._telemetry = WfiTelemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)
            self._telemetry_interceptor = WfiTelemetryInterceptor(self._telemetry)
        if tracer_provider is not None:
            from wf_initiation.telemetry import ActivationTracingInterceptor

            self._tracing = ActivationTracingInterceptor(tracer_provider.get_tracer("wf_initiation"))

    # -------------------------------------------------------------- client
    def configure_client(self, config: ClientConfig) -> ClientConfig:
        """The client's config with a data converter that carries pydantic models (the user's codec
        and failure converter kept) and the telemetry interceptors asked for.

        Raises:
            WfiSetupError: the user's payload converter cannot carry pydantic models.
        """
        config = super().configure_client(config)
        check_payload_converter(config["data_converter"])
        config["interceptors"] = [*config.get("interceptors", []), *self._missing_interceptors(config.get("interceptors", []))]
        return config

    def _missing_interceptors(self, present: Sequence[Any]) -> list[Any]:
        """Our interceptors not already in ``present`` (an existing OpenTelemetry tracing one wins)."""
        from_us: list[Any] = []
        if self._tracing is not None and not any(_is_tracing(i) for i in present):
            from_us.append(self._tracing)
        if self._telemetry_interceptor is not None and self._telemetry_interceptor not in present:
            from_us.append(self._telemetry_interceptor)
        return from_us

    # -------------------------------------------------------------- worker
    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """The worker's config with the activation workflow, the run, lifecycle and poll activities
        (bound to the worker's client), the sandbox pass-through and the interceptors added.

        Raises:
            WfiSetupError: the client's payload converter cannot carry pydantic models.
        """
        config = super().configure_worker(config)
        _uncached.record(config["task_queue"], max_cached_workflows=config.get("max_cached_workflows"))
        config["unsandboxed_workflow_runner"] = _unsandboxed_runner(config.get("unsandboxed_workflow_runner"))
        client = config["client"]
        converter = compose_data_converter(client.data_converter)
        check_payload_converter(converter)
        converter = worker_data_converter(converter)
        if converter is not client.data_converter:
            # The plugin was given to the Worker only, on a client with the default payload converter,
            # or the client has a payload codec: the worker's workflows and activities use this client's
            # converter, so give it ours (the client the user holds stays as it is).
            client = config["client"] = _derived_client(client, data_converter=converter)
        on_client = client.config(active_config=True)["interceptors"]
        worker_side = [i for i in self._missing_interceptors([*on_client, *config.get("interceptors", [])])
                       if isinstance(i, temporalio.worker.Interceptor)]
        config["interceptors"] = [*config.get("interceptors", []), *worker_side, self._connections, ReleaseCarriedState()]
        config["activities"] = [*config.get("activities", []), *RunActivities(self._activities_client(client), self._telemetry, publish_client=client).all(),
                                *LifecycleActivities(client).all(), *ShardActivities(client).all(),
                                *SignalActivities(client).all()]
        return config

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        """The replayer's config as a worker's: the same data converter (its codec flagging what came
        unencoded), workflows and runner."""
        config = super().configure_replayer(config)
        if "data_converter" in config:
            config["data_converter"] = worker_data_converter(config["data_converter"])
        return config

    def _activities_client(self, client: Client) -> Client:
        """The client run starts go through: with tracing, one that carries the trace into the run."""
        on_client = client.config(active_config=True)["interceptors"]
        if self._tracing is None or any(_is_tracing(i) for i in on_client):
            return client
        return _derived_client(client, interceptors=[*on_client, self._tracing])

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Check (and where allowed register) the Wfi search attributes, then run the worker, its
        process giving freed memory back every ``trim_memory_every`` meanwhile.

        Raises:
            WfiSetupError: the namespace lacks them and this worker may not add them; the message
                names the command that does.
        """
        if self._check_search_attributes:
            try:
                await self._search_attributes_checked(worker.client)
            except SearchAttributesMissing as exc:
                release_shutdown(worker)
                raise WfiSetupError(str(exc)) from None
            except BaseException:
                release_shutdown(worker)
                raise
        trimming = self._trim_memory_every is not None and TRIMMER.hold(self._trim_memory_every)
        try:
            await super().run_worker(worker, next)
        finally:
            if trimming:
                TRIMMER.release()

    async def _search_attributes_checked(self, client: Client) -> None:
        """Check (and register) the search attributes once per connection and namespace; the workers
        that start meanwhile wait for that one check. A failed check is not kept: the next worker tries again."""
        checks = self._attribute_checks.setdefault(client.service_client, {})
        check = checks.get(client.namespace)
        if check is None:
            check = checks[client.namespace] = asyncio.ensure_future(self._check_once(client))
        try:
            await asyncio.shield(check)
        except BaseException:
            if check.done() and checks.get(client.namespace) is check:
                del checks[client.namespace]
            raise

    async def _check_once(self, client: Client) -> list[str]:
        added = await ensure_registered(client, client.namespace)
        if added:
            logger.info("registered search attributes %s in namespace %r", ", ".join(added), client.namespace)
        return added


def _worker_connections(deployment: Deployment | str | os.PathLike[str] | None) -> WorkerConnections:
    if deployment is None:
        return WorkerConnections.none()
    if not isinstance(deployment, Deployment):
        try:
            deployment = load_deployment(os.fspath(deployment))
        except DiagnosticError as exc:
            raise WfiSetupError(f"WfiPlugin(deployment=...): {exc.diagnostics[0].message}") from None
    return WorkerConnections(deployment.connections)


def _is_tracing(interceptor: Any) -> bool:
    from temporalio.contrib.opentelemetry import OpenTelemetryInterceptor, TracingInterceptor

    return isinstance(interceptor, (TracingInterceptor, OpenTelemetryInterceptor))


__all__ = ["FlaggingCodec", "WfiPlugin", "WfiSetupError", "check_payload_converter", "compose_data_converter", "worker_data_converter"]
