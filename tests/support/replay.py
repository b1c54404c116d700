"""Replay an activation's recorded history with the current code, and keep it when that fails."""

from __future__ import annotations

import pathlib
import tempfile

from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from tests.support.restart import listed, ride_out
from wf_initiation.plugin import WfiPlugin


async def replay_failure(history: WorkflowHistory) -> Exception | None:
    """Why ``history`` does not replay with the current activation code, or None when it does."""
    result = await Replayer(workflows=[], plugins=[WfiPlugin()]).replay_workflow(history, raise_on_replay_failure=False)
    return result.replay_failure


def keep(history: WorkflowHistory, label: str) -> pathlib.Path:
    """Write ``history`` as JSON where a failing test can name it (the server is gone afterwards)."""
    path = pathlib.Path(tempfile.gettempdir()) / f"wfi-history-{label}.json"
    path.write_text(history.to_json())
    return path


async def assert_replays(client: Client, workflow_id: str) -> None:
    """Every run of ``workflow_id`` (a continue-as-new chain) replays without nondeterminism."""
    for execution in await ride_out(lambda: listed(client, f'WorkflowId = "{workflow_id}"')):
        history = await ride_out(client.get_workflow_handle(workflow_id, run_id=execution.run_id).fetch_history)
        failure = await replay_failure(history)
        if failure is not None:
            path = keep(history, f"{workflow_id.replace(':', '_')}-{execution.run_id}")
            raise AssertionError(f"run {execution.run_id} of {workflow_id} does not replay "
                                 f"({failure}); history kept at {path}")


async def diagnose(client: Client, name: str, *summary_keys: str) -> str:
    """What a stuck crash test needs to know of the activation ``name``: its pending activities (type,
    attempt, last failure), its last failed workflow tasks, the summary's ``summary_keys`` and its
    stack; the history is kept as a file. For an assertion's message only."""
    handle = client.get_workflow_handle(f"wfi-activation:{name}")
    desc = await ride_out(handle.describe)
    pending = [(a.activity_type.name, a.attempt, a.state, str(a.last_failure.message)[:200])
               for a in desc.raw_description.pending_activities]
    history = await ride_out(handle.fetch_history)
    failures = [e.workflow_task_failed_event_attributes.failure.message[:300] for e in history.events
                if e.HasField("workflow_task_failed_event_attributes")]
    kept = keep(history, f"{name}-{desc.run_id}")
    try:
        stack = await handle.query("__stack_trace")
        summary = await handle.query("summary")
        shown = {k: summary.get(k) for k in summary_keys}
    except Exception as exc:  # noqa: BLE001 - diagnostics only
        stack, shown = f"no stack: {exc}", {}
    return (f"run {desc.run_id}, status {desc.status}, history {desc.history_length} (kept at {kept}), pending {pending}, "
            f"task failures {failures[-3:]}, {shown}\n{stack}")
