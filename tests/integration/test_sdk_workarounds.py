"""Each workaround of wf_initiation/_sdk.py against the installed SDK and a real server.

Every function there relies on something the SDK or the server does without promising it (a
message's wording, a private attribute, an error detail). Each test here makes the real SDK or
server do it and checks the function still reads it, so an upgrade that changes one fails here,
naming the function, rather than silently changing what the package does.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
import socket
import uuid
from datetime import timedelta

import pytest
from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowQueryFailedError
from temporalio.common import RetryPolicy, WorkflowIDConflictPolicy
from temporalio.converter import DataConverter
from temporalio.envconfig import ClientConfigProfile
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.support.temporal import binary
from tests.support.waits import assert_eventually
from wf_initiation import _sdk
from wf_initiation._from_temporal import retryable


class Order(BaseModel):
    quantity: int


@activity.defn(name="wfi-test.sdk.typed")
async def typed_activity(order: Order) -> int:
    return order.quantity


@activity.defn(name="wfi-test.sdk.fails")
async def failing_activity() -> None:
    raise ApplicationError("the source is down", type="wfi-test.SourceDown")


@workflow.defn(name="wfi-test.sdk.Calls", sandboxed=False)
class Calls:
    """Calls one activity once; returns the failure its ActivityError carries, as data."""

    @workflow.run
    async def run(self, activity_name: str, arg: dict | None) -> dict:
        try:
            await workflow.execute_activity(activity_name, args=[] if arg is None else [arg],
                                            start_to_close_timeout=timedelta(seconds=30),
                                            retry_policy=RetryPolicy(maximum_attempts=1))
        except ActivityError as exc:
            cause = exc.cause
            return {"message": getattr(cause, "message", None), "type": getattr(cause, "type", None),
                    "non_retryable": getattr(cause, "non_retryable", None)}
        return {}

    @workflow.query(name="wfi-test.sdk.refuse")
    def refuse(self) -> None:
        raise ApplicationError("not now", type="wfi-test.Refused")


@workflow.defn(name="wfi-test.sdk.Broken", sandboxed=False)
class Broken:
    """Its workflow task fails on every attempt."""

    @workflow.run
    async def run(self) -> None:
        raise RuntimeError("this workflow task fails on purpose")

    @workflow.update(name="wfi-test.sdk.poke")
    async def poke(self) -> None:
        return None


FAIL_ACTIVATIONS = {"left": 0}


class ProbeActivationError(RuntimeError):
    """Fails a workflow activation (not the workflow): the SDK names the failure after the class."""


@workflow.defn(name="wfi-test.sdk.FailsActivations", sandboxed=False)
class FailsActivations:
    """Fails each activation while FAIL_ACTIVATIONS["left"] > 0, as the stale-activation guard does."""

    @workflow.run
    async def run(self) -> None:
        def fail() -> bool:
            if FAIL_ACTIVATIONS["left"] > 0:
                FAIL_ACTIVATIONS["left"] -= 1
                raise ProbeActivationError("this activation fails on purpose")
            return False

        await workflow.wait_condition(fail)

    @workflow.query(name="wfi-test.sdk.answer")
    def answer(self) -> str:
        return "answered"


def _worker(env: WorkflowEnvironment, task_queue: str) -> Worker:
    return Worker(env.client, task_queue=task_queue, workflows=[Calls, Broken],
                  activities=[typed_activity, failing_activity])


# ---------------------------------------------------------------------------- message text
async def test_an_argument_the_worker_cannot_decode_fails_the_activity_as_failed_decoding(dev_env, task_queue) -> None:
    # _sdk.failed_decoding: a retryable ApplicationError told apart by its message alone.
    async with _worker(dev_env, task_queue):
        failure = await dev_env.client.execute_workflow(
            Calls.run, args=["wfi-test.sdk.typed", {"quantity": "many"}], id=f"decode-{uuid.uuid4()}", task_queue=task_queue)
    assert _sdk.failed_decoding(ApplicationError(failure["message"]))
    assert failure["type"] is None and failure["non_retryable"] is False  # nothing else says it is permanent
    assert not _sdk.failed_decoding(ApplicationError("the source is down"))


async def test_a_call_to_a_server_that_went_away_is_a_transport_error() -> None:
    # _sdk.is_transport_error: the core words a lost connection in the message; the status varies.
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=binary("temporal"))
    client = env.client
    await env.shutdown()
    with pytest.raises(RPCError) as lost:
        await client.workflow_service.get_system_info(GetSystemInfoRequest(), retry=False)
    assert _sdk.is_transport_error(lost.value), (lost.value.status, lost.value.message)
    assert retryable(lost.value)


class StallingProxy:
    """A TCP proxy to the dev server that can stop passing bytes on while its connections stay open:
    a call then gets no answer at all (a server that holds a call answers DEADLINE_EXCEEDED itself)."""

    def __init__(self, target: str) -> None:
        self.host, port = target.rsplit(":", 1)
        self.port = int(port)
        self.flowing = asyncio.Event()
        self.flowing.set()
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        self._writers += [writer, up_writer]
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            await self.flowing.wait()
            writer.write(data)
            await writer.drain()

    async def close(self) -> None:
        self._server.close()
        for writer in self._writers:
            writer.close()


async def test_a_call_past_its_own_deadline_is_a_call_timeout(dev_env) -> None:
    # _sdk.is_call_timeout: CANCELLED, the status of a cancelled call too, with "Timeout expired".
    proxy = StallingProxy(dev_env.client.service_client.config.target_host)
    client = await Client.connect(await proxy.start())
    try:
        proxy.flowing.clear()
        with pytest.raises(RPCError) as late:
            await client.get_workflow_handle(f"nobody-{uuid.uuid4()}").describe(rpc_timeout=timedelta(milliseconds=300))
    finally:
        proxy.flowing.set()
        await proxy.close()
    assert _sdk.is_call_timeout(late.value), (late.value.status, late.value.message)
    assert not _sdk.is_call_timeout(RPCError("operation cancelled", RPCStatusCode.CANCELLED, b""))


async def test_a_start_over_the_servers_size_limit_is_refused_for_good(dev_env, task_queue) -> None:
    # _sdk.refused_for_good: INVALID_ARGUMENT naming the limit in its message (2 MiB: the blob size limit).
    with pytest.raises(RPCError) as refused:
        await dev_env.client.start_workflow(Calls.run, args=["x" * (2 * 1024 * 1024 + 1024), None],
                                            id=f"big-{uuid.uuid4()}", task_queue=task_queue)
    assert _sdk.refused_for_good(refused.value), (refused.value.status, refused.value.message)
    assert not _sdk.refused_for_good(RPCError("namespace is being configured", RPCStatusCode.INVALID_ARGUMENT, b""))


async def test_a_signal_to_an_ended_workflow_is_told_apart_from_one_that_never_existed(dev_env, task_queue) -> None:
    # _sdk.workflow_already_completed: both are NOT_FOUND; only the message differs.
    async with _worker(dev_env, task_queue):
        handle = await dev_env.client.start_workflow(Calls.run, args=["wfi-test.sdk.fails", None],
                                                     id=f"ended-{uuid.uuid4()}", task_queue=task_queue)
        await handle.result()
    with pytest.raises(RPCError) as ended:
        await handle.signal("wfi-test.sdk.anything")
    with pytest.raises(RPCError) as never:
        await dev_env.client.get_workflow_handle(f"never-{uuid.uuid4()}").signal("wfi-test.sdk.anything")
    assert ended.value.status == never.value.status == RPCStatusCode.NOT_FOUND
    assert _sdk.workflow_already_completed(ended.value), ended.value.message
    assert not _sdk.workflow_already_completed(never.value), never.value.message


def test_a_payload_in_an_encoding_the_converter_lacks_is_a_key_error_naming_it() -> None:
    # _sdk.is_unknown_encoding, _sdk.unknown_encoding: the converter's KeyError, told apart by its text.
    encrypted = Payload(metadata={"encoding": b"binary/encrypted"}, data=b"\x00")
    with pytest.raises(KeyError) as unknown:
        DataConverter.default.payload_converter.from_payloads([encrypted])
    assert _sdk.is_unknown_encoding(unknown.value)
    assert _sdk.unknown_encoding(unknown.value) == "binary/encrypted"
    assert not _sdk.is_unknown_encoding(KeyError("encoding"))


async def test_a_refused_connection_names_its_reason() -> None:
    # _sdk.connect_error_reason: the human part of the core's Rust debug text.
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(RuntimeError) as refused:
        await Client.connect(f"127.0.0.1:{port}")
    assert _sdk.connect_error_reason(refused.value) == "Connection refused", str(refused.value)


# ---------------------------------------------------------------------------- error details
async def test_an_update_to_a_workflow_whose_task_keeps_failing_is_not_ready(dev_env, task_queue) -> None:
    # _sdk.workflow_not_ready: FAILED_PRECONDITION with a WorkflowNotReadyFailure detail, once the
    # workflow task has failed three times; the client retries it with the same update id.
    async with _worker(dev_env, task_queue):
        handle = await dev_env.client.start_workflow(Broken.run, id=f"broken-{uuid.uuid4()}", task_queue=task_queue)

        async def failing_for_a_while() -> None:
            attempt = (await handle.describe()).raw_description.pending_workflow_task.attempt
            assert attempt >= 3, attempt

        await assert_eventually(failing_for_a_while, timeout=120, interval=0.5)
        with pytest.raises(RPCError) as refused:
            await handle.execute_update(Broken.poke, id="poke")
        # As WfiClient.activate sends it: an update-with-start, whose refusal nests the detail.
        start = WithStartWorkflowOperation(Broken.run, id=handle.id, task_queue=task_queue,
                                           id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
        with pytest.raises(RPCError) as refused_with_start:
            await dev_env.client.execute_update_with_start_workflow(Broken.poke, start_workflow_operation=start, id="poke-2")
        await handle.terminate()
    for error in (refused.value, refused_with_start.value):
        assert _sdk.workflow_not_ready(error), (error.status, error.message)
        assert retryable(error)


async def test_a_missing_namespace_is_told_apart_from_a_missing_workflow(dev_env) -> None:
    # _sdk.is_namespace_not_found: both NOT_FOUND; only a NamespaceNotFoundFailure detail differs.
    elsewhere = await Client.connect(dev_env.client.service_client.config.target_host, namespace=f"nope-{uuid.uuid4()}")
    with pytest.raises(RPCError) as no_namespace:
        await elsewhere.get_workflow_handle("anything").describe()
    with pytest.raises(RPCError) as no_workflow:
        await dev_env.client.get_workflow_handle(f"nobody-{uuid.uuid4()}").describe()
    assert no_namespace.value.status == no_workflow.value.status == RPCStatusCode.NOT_FOUND
    assert _sdk.is_namespace_not_found(no_namespace.value)
    assert not _sdk.is_namespace_not_found(no_workflow.value)


async def test_a_query_failed_by_its_activation_carries_the_failure_type(dev_env, task_queue) -> None:
    # _sdk.query_failure_type: the type is only in the detail of the RPCError the SDK raised it from.
    # No cache: every query replays the run, so the failing predicate runs in the query's activation.
    async with Worker(dev_env.client, task_queue=task_queue, workflows=[FailsActivations, Calls], max_cached_workflows=0):
        handle = await dev_env.client.start_workflow(FailsActivations.run, id=f"query-{uuid.uuid4()}", task_queue=task_queue)
        assert await handle.query(FailsActivations.answer) == "answered"
        FAIL_ACTIVATIONS["left"] = 1
        with pytest.raises(WorkflowQueryFailedError) as failed:
            await handle.query(FailsActivations.answer)
        # A query handler's own failure carries no type: only a failed activation's does.
        waiting = await dev_env.client.start_workflow(Calls.run, args=["wfi-test.sdk.unserved", None],
                                                      id=f"query-{uuid.uuid4()}", task_queue=task_queue)
        with pytest.raises(WorkflowQueryFailedError) as refused:
            await waiting.query(Calls.refuse)
        for h in (handle, waiting):
            await h.terminate()
    assert _sdk.query_failure_type(failed.value) == "ProbeActivationError"
    assert _sdk.query_failure_type(refused.value) is None, "a query handler's failure type now arrives: say so in _sdk"
    assert _sdk.query_failure_type(WorkflowQueryFailedError("made up")) is None


# ---------------------------------------------------------------------------- private attributes
async def test_a_start_with_use_existing_says_whether_it_started_a_run(dev_env, task_queue) -> None:
    # _sdk.started_new_run: the response's `started`, kept on the handle as _start_workflow_response.
    start = dict(args=["wfi-test.sdk.fails", None], id=f"existing-{uuid.uuid4()}", task_queue=task_queue,
                 id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
    first = await dev_env.client.start_workflow(Calls.run, **start)  # no worker: it stays running
    again = await dev_env.client.start_workflow(Calls.run, **start)
    await first.terminate()
    assert again.result_run_id == first.result_run_id
    assert (_sdk.started_new_run(first), _sdk.started_new_run(again)) == (True, False)


async def test_a_worker_that_never_ran_shuts_down_once_released(dev_env, task_queue) -> None:
    # _sdk.release_shutdown: Worker.shutdown waits for an event only the worker's run sets.
    worker = _worker(dev_env, task_queue)
    shutdown = asyncio.ensure_future(worker.shutdown())
    done, _ = await asyncio.wait([shutdown], timeout=0.5)
    assert not done, "Worker.shutdown returns without a run: release_shutdown may be dropped"
    _sdk.release_shutdown(worker)
    await asyncio.wait_for(shutdown, 10)


def test_a_profiles_codec_table_is_read_from_the_sdks_bridge_only(tmp_path: pathlib.Path) -> None:
    # _sdk.client_connect_config: the public profile type drops the `codec` table the temporal CLI defines.
    config = tmp_path / "temporal.toml"
    config.write_text('[profile.default]\naddress = "localhost:7233"\n'
                      '[profile.default.codec]\nendpoint = "https://codec.example"\nauth = "Bearer x"\n')
    raw = _sdk.client_connect_config(None, str(config), {"TEMPORAL_NAMESPACE": "team"})
    assert raw["codec"] == {"endpoint": "https://codec.example", "auth": "Bearer x"}
    assert raw["address"] == "localhost:7233" and raw["namespace"] == "team"
    assert "codec" not in ClientConfigProfile.from_dict(raw).to_dict(), "the SDK keeps the codec table now: use it"


async def test_a_failed_activity_attempt_is_logged_on_the_activity_loggers(dev_env, task_queue, caplog) -> None:
    # _sdk.ACTIVITY_LOGGERS: where the worker's log filters (_temporal.configure_logging) must sit.
    with caplog.at_level(logging.WARNING):
        async with _worker(dev_env, task_queue):
            await dev_env.client.execute_workflow(Calls.run, args=["wfi-test.sdk.fails", None],
                                                  id=f"logged-{uuid.uuid4()}", task_queue=task_queue)
    failed = [r for r in caplog.records if r.exc_info and isinstance(r.exc_info[1], ApplicationError)]
    assert failed and {r.name for r in failed} <= set(_sdk.ACTIVITY_LOGGERS), [(r.name, r.getMessage()) for r in caplog.records]
