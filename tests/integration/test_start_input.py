"""A cached run holds nothing of the input it began with once it has read it (workflows/_start_input.py).

The SDK kept the run's decoded arguments for its life, and views into the first activation's message
(headers, memo, last completion result) that keep the whole message, input included, in the worker's
memory: a run begun with 1.9 MB held ~9.7 MB. Measured here as the worker process's resident memory
(in this process), with a margin of several times the noise: 12 runs of 1.9 MB each.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import os
import pathlib

import pytest
from temporalio.worker import Worker

from tests.support.held_input import BegunOutsideSandbox, BegunWithInput
from tests.support.waits import assert_eventually
from wf_initiation.plugin import _runner, _unsandboxed_runner
from wf_initiation.workflows._start_input import ReleaseCarriedState

RUNS = 12
SIZE = 1_900_000  # under the dev server's 2 MB blob limit


def _resident_mib() -> float:
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    if trim is None:
        pytest.skip("needs glibc's malloc_trim to read what the process holds (freed memory is kept otherwise)")
    gc.collect()
    trim(0)
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    pytest.skip("needs /proc/self/status")


@pytest.mark.parametrize("begun", [BegunWithInput, BegunOutsideSandbox], ids=["sandboxed", "outside-the-sandbox"])
async def test_a_cached_run_holds_less_than_its_input_once_it_took_another_task(dev_env, task_queue: str, begun: type) -> None:
    # proves: EXT-3
    client = dev_env.client
    async with Worker(client, task_queue=task_queue, workflows=[begun], workflow_runner=_runner(None),
                      unsandboxed_workflow_runner=_unsandboxed_runner(None), interceptors=[ReleaseCarriedState()],
                      max_cached_workflows=100):
        handles = []
        before = _resident_mib()
        for i in range(RUNS):
            handles.append(await client.start_workflow(begun.run, args=[f"held-{i}", os.urandom(SIZE)],
                                                       id=f"{task_queue}-held-{i}", task_queue=task_queue))
        for handle in handles:  # a task after the first: nothing refers into the first activation any more
            await handle.signal(begun.take)

        async def all_taken() -> None:
            assert all([await h.query(begun.taken_count) == 1 for h in handles])

        await assert_eventually(all_taken, timeout=60)
        await asyncio.sleep(0.5)
        per_run = (_resident_mib() - before) / RUNS
        # The SDK alone: ~5x the input per cached run (9.7 MiB); now ~0.5 MiB.
        assert per_run < SIZE / 2**20, f"a cached run holds {per_run:.1f} MiB after an input of {SIZE / 2**20:.1f} MiB"
        for handle in handles:
            await handle.terminate()
