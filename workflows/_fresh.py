"""Refuse a workflow activation that the SDK built at a stale time from a query task.

What happens (Temporal CLI 1.x dev server, temporalio 1.35 / sdk-core; reproduced by
``tests/crash/test_stale_query_activation.py``): a query sent while a workflow has no pending workflow
task is dispatched straight to the sticky queue of the worker that ran it last. If that worker is
dead, the query waits there for the sticky schedule-to-start timeout (10 s), then the server clears
stickiness and hands it to the normal task queue. Meanwhile new events were appended (a timer fired
and its workflow task is waiting on the dead sticky queue). The worker that picks the query up
replays the whole history, *including those trailing events*: it runs the workflow code for them
with ``workflow.now()`` still at the last completed task's start, keeps the run cached, and sends
the commands that activation produced with the next real workflow task. A later replay runs the
same events at that task's (correct) time, decides differently, and fails with a nondeterminism
error: the workflow is stuck (history kept in
``tests/histories/nondeterminism-after-sticky-timeout-2026-11-30.json``).

Such an activation is recognisable: it is not a replay, history has grown since the previous
activation, yet its time is exactly the previous activation's (a real new workflow task always
starts later than the one before it). Raising from it fails only that activation: the query it
came with fails (clients retry), the worker evicts the run, and the next workflow task replays the
history from scratch at the right time. Nothing is recorded in history. A false positive would
cost one workflow task retry, after which the check passes (the retry's task starts later).

A run that was terminated or timed out while events waited for a workflow task looks the same to
every query for as long as it exists (its history ends with them, and a closed run gets no next
task): no worker with a cache answers it. Clients read such a run's state from its history instead
(``wf_initiation/_ended.py``); letting the activation through here is not an option, as nothing in it
tells a closed run from the case above.

On a worker without a workflow cache the guard stands down (``wf_initiation/_uncached.py``): there
the run is evicted after every task and query, so a stale activation's commands are discarded, and
failing it wedges the run in the SDK (found under load with queries racing a poll's events).
"""

from __future__ import annotations

import asyncio

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from wf_initiation._uncached import uncached
    from wf_initiation.wire import StaleActivationError  # its type is what clients recognise and retry


class FreshTimeGuard:
    """Checked on every activation (as a ``workflow.wait_condition`` predicate, evaluated by the SDK
    after each batch of jobs), before the activation's commands can leave the worker."""

    def __init__(self) -> None:
        self._seen: tuple[int, int] | None = None  # (history length, time ns) of the last activation

    def __call__(self) -> bool:
        length = workflow.info().get_current_history_length()
        now_ns = workflow.time_ns()
        seen, self._seen = self._seen, (length, now_ns)
        if seen is not None and is_stale(seen, (length, now_ns), replaying=workflow.unsafe.is_replaying()) \
                and not uncached(workflow.info().task_queue):  # no cache: nothing to prevent (wf_initiation/_uncached.py)
            raise StaleActivationError(
                f"stale activation: built from a query task's trailing events at a stale time "
                f"(history grew from {seen[0]} to {length} events but the time did not move); "
                "failing it so the worker evicts this run and replays it on the next workflow task "
                "(see workflows/_fresh.py). Nothing is lost; retry the query."
            )
        return False

    def start(self) -> asyncio.Task[None]:
        """Keep the predicate registered for the life of the run."""
        return asyncio.create_task(workflow.wait_condition(self), name="fresh time guard")


def is_stale(before: tuple[int, int], after: tuple[int, int], *, replaying: bool) -> bool:
    """``before``/``after``: (history length, activation time in ns) of consecutive activations."""
    grew = after[0] > before[0]
    return not replaying and grew and after[1] == before[1]
