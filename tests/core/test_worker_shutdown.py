"""A worker process stops on SIGTERM although the SDK's shutdown can hang (sdk-rust#1297)."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest

from wf_initiation._temporal import shutdown_within


class _HangingShutdown:
    """Stands in for a worker whose ``shutdown`` never returns (its activity poll left unanswered)."""

    def __init__(self) -> None:
        self.shutdown_called = False

    async def shutdown(self) -> None:
        self.shutdown_called = True
        await asyncio.Event().wait()


class _CleanShutdown:
    def __init__(self, running: asyncio.Event) -> None:
        self.running = running

    async def shutdown(self) -> None:
        self.running.set()


async def test_a_shutdown_that_hangs_is_given_up_after_the_limit_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    worker = _HangingShutdown()
    running = asyncio.create_task(asyncio.Event().wait())
    with caplog.at_level(logging.WARNING, logger="wf_initiation.worker"):
        await asyncio.wait_for(shutdown_within(worker, running, timedelta(seconds=0.3)), 10)
    assert worker.shutdown_called
    await asyncio.sleep(0)
    assert running.cancelled()
    assert "did not finish within" in caplog.text


async def test_a_clean_shutdown_waits_for_the_worker_and_raises_its_error() -> None:
    finished = asyncio.Event()

    async def run() -> None:
        await finished.wait()
        raise RuntimeError("the worker's own failure")

    running = asyncio.create_task(run())
    with pytest.raises(RuntimeError, match="the worker's own failure"):
        await asyncio.wait_for(shutdown_within(_CleanShutdown(finished), running, timedelta(seconds=30)), 10)
