"""Running the worker: the runner that serves a task queue until told to stop and bounds its
shutdown, SIGINT/SIGTERM as a graceful stop, and the worker process's log lines."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from wf_initiation._sdk import ACTIVITY_LOGGERS


async def run_worker(
    client: Any, task_queue: str, stop: asyncio.Event, on_ready: Callable[[], None] = lambda: None,
    *, deployment: Any = None,
) -> None:
    """Run the wf-initiation worker on ``task_queue`` until ``stop`` is set, then shut down gracefully.

    ``deployment`` is the one the worker serves: only its connections' secrets are resolved."""
    import zoneinfo

    from temporalio.worker import Worker

    from wf_initiation.plugin import WfiPlugin

    # zoneinfo prefers the host's zone files to the tzdata package; with the search path empty the
    # pinned tzdata is the one used, and its version is the one recorded (SCHED-2).
    zoneinfo.reset_tzpath(to=[])
    worker = Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True, deployment=deployment)],
                    graceful_shutdown_timeout=GRACEFUL_SHUTDOWN)
    running = asyncio.create_task(worker.run())
    stopped = asyncio.create_task(stop.wait())
    await asyncio.sleep(0)  # the worker's start (and the plugin's checks) begins before "ready"
    if not running.done():
        on_ready()
    await asyncio.wait([running, stopped], return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if not running.done():
        await shutdown_within(worker, running, GRACEFUL_SHUTDOWN + SHUTDOWN_MARGIN)
    elif not running.cancelled():
        running.result()  # the worker failed on its own: its error is the command's


GRACEFUL_SHUTDOWN = timedelta(seconds=10)
"""Activities still running at a shutdown get this long to finish before they are cancelled."""
SHUTDOWN_MARGIN = timedelta(seconds=20)
"""After the graceful period, how long a shutdown may take before the process stops waiting for it."""


async def shutdown_within(worker: Any, running: asyncio.Task[None], limit: timedelta) -> None:
    """Shut ``worker`` down, waiting at most ``limit``.

    The SDK's core can leave an activity long poll unanswered at shutdown (sdk-rust#1297: seen here
    in this project's tests on a loaded machine, a few shutdowns in a hundred), and then ``Worker.shutdown`` never
    returns. A worker process must still stop on SIGTERM: past the limit it logs and gives up;
    nothing is lost, since the server hands any task this worker held to another worker after its
    timeout."""
    shutdown = asyncio.create_task(worker.shutdown())
    done, _ = await asyncio.wait([running], timeout=limit.total_seconds())
    if not done:
        logging.getLogger("wf_initiation.worker").warning(
            "worker shutdown did not finish within %ss (an activity poll the SDK did not release); "
            "stopping anyway: tasks it held are retried by another worker", int(limit.total_seconds()))
        shutdown.cancel()
        running.cancel()
        return
    await shutdown
    running.result()


class _OneLineApplicationErrors(logging.Filter):
    """An activity failing with an ``ApplicationError`` failed on purpose (its message names the
    fix, e.g. an unavailable poll source that the activation backs off from): log one line, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        from temporalio.exceptions import ApplicationError

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, ApplicationError):
            record.msg, record.args, record.exc_info = f"{record.getMessage()}: {exc}", None, None
        return True


def configure_logging(level: int = logging.INFO) -> None:
    """Timestamped log lines for the worker process; expected activity failures on one line, a failing
    poll source once (wf_initiation._poll_log)."""
    from wf_initiation._poll_log import PollFailuresOncePerSource

    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    polls = PollFailuresOncePerSource()
    for name in ACTIVITY_LOGGERS:
        logging.getLogger(name).addFilter(polls)
        logging.getLogger(name).addFilter(_OneLineApplicationErrors())


def stop_on_signals(stop: asyncio.Event) -> None:
    """SIGINT and SIGTERM set ``stop`` (graceful shutdown) instead of raising."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
