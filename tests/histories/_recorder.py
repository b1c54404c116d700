"""What the history recorders of this folder share: a dev server, a worker, and writing the history.

A recorder runs from a tree holding the build it records (its ``wf_initiation`` with that build's
``workflows/`` and ``activities/``, as the installed package lays them out) with this folder copied
into its ``tests/histories/``; its output is gzipped into this folder and replayed by
tests/core/test_replay.py.
"""

import contextlib
import os
import pathlib
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

sys.path.insert(0, os.getcwd())
from tests.support.activation import make_spec  # noqa: E402
from wf_initiation.client import WfiClient  # noqa: E402
from wf_initiation.core.activation import ActivationSpec  # noqa: E402
from wf_initiation.plugin import WfiPlugin  # noqa: E402
from wf_initiation.wire.search_attributes import ALL  # noqa: E402

TASK_QUEUE = "rec"


def spec_of(workfile: str, **settings: object) -> ActivationSpec:
    with tempfile.TemporaryDirectory() as tmp:
        return make_spec(pathlib.Path(tmp), workfile, task_queue=TASK_QUEUE, **settings)


def worker(env: WorkflowEnvironment) -> Worker:
    return Worker(env.client, task_queue=TASK_QUEUE, plugins=[WfiPlugin(sample_runs=True)])


@contextlib.asynccontextmanager
async def dev_server() -> AsyncIterator[tuple[WorkflowEnvironment, WfiClient]]:
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=shutil.which("temporal"),
                                                search_attributes=list(ALL), data_converter=pydantic_data_converter)
    try:
        yield env, WfiClient(env.client, task_queue=TASK_QUEUE)
    finally:
        await env.shutdown()


def write(history: WorkflowHistory, out: str) -> None:
    """Write ``history`` as JSON to ``out`` and print its event counts by type."""
    pathlib.Path(out).write_text(history.to_json())
    kinds: dict[int, int] = {}
    for e in history.events:
        kinds[e.event_type] = kinds.get(e.event_type, 0) + 1
    print(len(history.events), "events", kinds)
