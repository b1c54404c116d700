"""A worker with WfiPlugin alone checks the namespace's Wfi search attributes at start: it registers
missing ones where the server allows it, and otherwise fails at once with one line naming the
command that adds them (not with failing workflow tasks and a message blaming a missing worker)."""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys
import uuid

import pytest
from google.protobuf.duration_pb2 import Duration
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, RegisterNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import Disposition
from wf_initiation.plugin import WfiPlugin, WfiSetupError
from wf_initiation.wire.search_attributes import ALL, create_command

KEYWORD = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
TEXT = IndexedValueType.INDEXED_VALUE_TYPE_TEXT

MAIL = """
name: {name}
on:
  mail.received:
    inbox: support@acme.com
  as: message
"""


async def fresh_namespace(dev_env, attributes: dict[str, int] | None = None) -> Client:
    """A namespace of its own on the session's dev server, with only ``attributes`` registered."""
    namespace = f"wfi-sa-{uuid.uuid4().hex[:8]}"
    service = dev_env.client.service_client
    await service.workflow_service.register_namespace(RegisterNamespaceRequest(
        namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400)))

    async def described() -> None:
        try:
            await service.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=namespace))
        except RPCError as exc:
            raise AssertionError(str(exc)) from exc
    await assert_eventually(described)
    client = Client(service, namespace=namespace, data_converter=dev_env.client.data_converter)
    if attributes:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=namespace, search_attributes=attributes))
    return client


async def registered(client: Client) -> dict[str, int]:
    listed = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace=client.namespace))
    return dict(listed.custom_attributes)


async def test_a_worker_registers_missing_search_attributes_and_serves_activations(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    client = await fresh_namespace(dev_env)
    assert not {k.name for k in ALL} & set(await registered(client))
    name = unique("sa")
    spec = make_spec(tmp_path, MAIL.format(name=name), task_queue=task_queue)
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        async def all_there() -> None:
            assert {k.name: k.indexed_value_type.value for k in ALL}.items() <= (await registered(client)).items()
        await assert_eventually(all_there)
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(spec)
        result = await wfi.deliver(name, {"message_id": "m-1", "from": "a@b.c", "recipient": "help@acme.com",
                                          "subject": "hi", "thread_id": "t1"})
        assert result.disposition == Disposition.ACCEPTED
        # The activation upserted its attributes: operators find it.
        await assert_eventually(lambda: _count_is_one(client, name), timeout=30)


async def _count_is_one(client: Client, name: str) -> None:
    count = await client.count_workflows(f"WfiWorkflow = '{name}' AND WfiState = 'active'")
    assert count.count == 1


async def test_a_worker_that_may_not_register_them_fails_at_start_with_one_line_naming_the_command(
    dev_env, task_queue: str,
) -> None:
    # Nine Keyword attributes of the user's own: the dev server's limit of ten leaves no room for
    # ours, so registering them is refused, as on a server where this worker has no operator rights.
    client = await fresh_namespace(dev_env, {f"UserAttr{i}": KEYWORD for i in range(9)})
    worker = Worker(client, task_queue=task_queue, plugins=[WfiPlugin()])
    with pytest.raises(WfiSetupError) as refused:
        await asyncio.wait_for(worker.run(), timeout=30)
    message = str(refused.value)
    assert "\n" not in message
    assert create_command(client.namespace, list(ALL)) in message
    assert "temporal operator search-attribute create --namespace " + client.namespace + " --type Keyword" in message
    assert refused.value.__cause__ is None and refused.value.__suppress_context__  # no chained traceback


async def test_async_with_worker_raises_the_same_line_and_does_not_hang(dev_env, task_queue: str) -> None:
    client = await fresh_namespace(dev_env, {f"UserAttr{i}": KEYWORD for i in range(9)})

    async def serve() -> None:
        async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin()]):
            await asyncio.Event().wait()  # a user's worker body that never ends: the failed start ends it

    with pytest.raises(WfiSetupError, match="lacks the wf-initiation search attributes"):
        await asyncio.wait_for(serve(), timeout=30)


async def test_an_attribute_of_the_wrong_type_is_named_with_the_command_that_removes_it(dev_env, task_queue: str) -> None:
    client = await fresh_namespace(dev_env, {"WfiState": TEXT})
    worker = Worker(client, task_queue=task_queue, plugins=[WfiPlugin()])
    with pytest.raises(WfiSetupError) as refused:
        await asyncio.wait_for(worker.run(), timeout=30)
    message = str(refused.value)
    assert "\n" not in message
    assert "WfiState exists" in message and "as Text" in message and "needs Keyword" in message
    assert f"temporal operator search-attribute remove --namespace {client.namespace} --name WfiState" in message


async def test_wfi_worker_on_such_a_namespace_exits_1_with_that_one_line(dev_env, task_queue: str, tmp_path: pathlib.Path) -> None:
    client = await fresh_namespace(dev_env, {f"UserAttr{i}": KEYWORD for i in range(9)})
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(f"temporal:\n  address: {dev_env.client.service_client.config.target_host}\n"
                          f"  namespace: {client.namespace}\n  task_queue: {task_queue}\nworkflows: {{}}\n")
    env = {k: v for k, v in os.environ.items() if k != "TEMPORAL_ADDRESS"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "wf_initiation", "worker", "--deployment", str(deployment),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 1, (out, err)
    assert len(lines) == 1 and lines[0].startswith("wfi worker: namespace ") and "temporal operator search-attribute create" in lines[0]
    assert "worker ready" not in out.decode()


async def test_workers_started_together_on_one_client_check_and_log_the_registration_once(
    dev_env, task_queue: str, caplog: pytest.LogCaptureFixture,
) -> None:
    import contextlib
    import logging

    plain = await fresh_namespace(dev_env)
    client = Client(plain.service_client, namespace=plain.namespace, data_converter=plain.data_converter,
                    plugins=[WfiPlugin(sample_runs=True)])
    caplog.set_level(logging.INFO, logger="wf_initiation.plugin")
    async with contextlib.AsyncExitStack() as stack:
        for i in range(3):  # e.g. the activations' queue and two queues of the team's runs
            await stack.enter_async_context(Worker(client, task_queue=f"{task_queue}-{i}"))

        async def all_there() -> None:
            assert {k.name for k in ALL} <= set(await registered(client))
        await assert_eventually(all_there)
        lines = [r.getMessage() for r in caplog.records if "registered search attributes" in r.getMessage()]
        assert len(lines) == 1, lines
        assert plain.namespace in lines[0]
