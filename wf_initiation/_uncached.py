"""Task queues served by a worker that keeps no workflow cache (``max_cached_workflows=0``).

``WfiPlugin.configure_worker`` records them; the activation's stale-time guard
(workflows/_fresh.py) stands down on them. Without a cache every workflow task and every query is a
full replay and the run is evicted after it, so an activation a query builds at a stale time can
never hand its commands to a later workflow task: the guard has nothing to prevent there. Failing
such an activation does harm there instead: with temporalio 1.35 the worker then sends a completion
that core rejects ("legacy query response along with other commands") and keeps the run stuck,
refusing every update with "Workflow Task in failed state" (docs/incidents/2026-11-30-stale-query.md,
"On a worker without a cache"). Passed through the workflow sandbox, so workflow code reads the set
the plugin filled.
"""

from __future__ import annotations

_UNCACHED: set[str] = set()


def record(task_queue: str, *, max_cached_workflows: int | None) -> None:
    """Note whether the worker for ``task_queue`` keeps a workflow cache."""
    if max_cached_workflows == 0:
        _UNCACHED.add(task_queue)
    else:
        _UNCACHED.discard(task_queue)


def uncached(task_queue: str) -> bool:
    """Whether the worker serving ``task_queue`` in this process keeps no workflow cache."""
    return task_queue in _UNCACHED
