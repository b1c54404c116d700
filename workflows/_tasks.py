"""The activation's tasks that nobody awaits: plan calls (workflows/_executor.py), the inbox's and
the admission's next workflow task, deliveries passed to another shard, a split parent's drain.

Such a task that raises what it does not handle (a bug: each handles the failures it expects, an
activity's or a signal's) must not end unseen, with its runs never reported or its queued
deliveries never taken, as asyncio would have it (a log line at garbage collection).
:class:`Tasks` keeps the first such exception and the activation's loop raises it
(:meth:`Tasks.check`) as a :class:`TaskFault`, which is not a ``FailureError``: it fails the
workflow task, never the activation. The server retries the task (with backoff); the UI and
``temporal workflow describe`` show the failure under the pending workflow task; a worker with the
fix replays the history and goes on with nothing lost (docs/behaviour.md). A run begun by an
earlier build, which only logged such an exception, keeps doing so (patch ``wfi-task-faults``,
workflows/_compat.py, asked only when one happens).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from temporalio import workflow
from temporalio.exceptions import is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from wf_initiation.errors import WfiError


class TaskFault(WfiError):
    """One of the activation's tasks raised what it does not handle (see the module docstring)."""

    type = "task_fault"


class Tasks:
    """Starts the activation's unawaited tasks and keeps the first fault among them.

    Args:
        fails_task: Whether a fault fails the workflow task (false: logged, as earlier builds did).
        poke: Wakes the activation's loop, which then raises the fault.
    """

    def __init__(self, *, fails_task: Callable[[], bool], poke: Callable[[], None]) -> None:
        self._fails_task = fails_task
        self._poke = poke
        self.fault: TaskFault | None = None

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        task.add_done_callback(self._ended)
        return task

    def check(self) -> None:
        """Raise the first fault a task left."""
        if self.fault is not None:
            raise self.fault

    def _ended(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None or is_cancelled_exception(exc):  # the activation itself is being cancelled
            return
        if not self._fails_task():
            workflow.logger.error("%s failed; a run begun by an earlier build goes on as that build did", task.get_name(),
                                  exc_info=exc)
            return
        if self.fault is None:
            self.fault = TaskFault(f"{task.get_name()} failed: {type(exc).__name__}: {exc}. This is a bug in wf-initiation "
                                   "or in a plugin it runs: the workflow task is retried until a worker with the fix "
                                   "replays it, with nothing lost (docs/behaviour.md)")
            self.fault.__cause__ = exc
        self._poke()
