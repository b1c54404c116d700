"""Replay an activation's recorded history with the current code, and keep it when that fails."""

from __future__ import annotations

import pathlib
import re
import tempfile

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from tests.support.restart import listed, ride_out
from wf_initiation.plugin import WfiPlugin


async def replay_failure(history: WorkflowHistory) -> Exception | None:
    """Why ``history`` does not replay with the current activation code, or None when it does."""
    # debug_mode: no 2 s deadlock detector. A replay of thousands of events on a loaded machine can
    # spend that long in one activation; what is checked here is determinism, not the replay's speed.
    replayer = Replayer(workflows=[], plugins=[WfiPlugin()], debug_mode=True)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    return result.replay_failure


def keep(history: WorkflowHistory, label: str) -> pathlib.Path:
    """Write ``history`` as JSON where a failing test can name it (the server is gone afterwards)."""
    path = pathlib.Path(tempfile.gettempdir()) / f"wfi-history-{label}.json"
    path.write_text(history.to_json())
    return path


def events_near(history: WorkflowHistory, failure: BaseException, around: int = 12) -> str:
    """The events of ``history`` around the one a nondeterminism error names ("HistoryEvent(id: 76"),
    one line each (id, type, activity or marker name): what a CI log needs to tell which command the
    replay did not make, after the server that held the run is gone."""
    found = re.search(r"id: (\d+)", str(failure))
    centre = int(found.group(1)) if found else len(history.events)
    lines = []
    for event in history.events[max(0, centre - around - 1): centre + 3]:
        attrs = event.WhichOneof("attributes")
        detail = getattr(event, attrs) if attrs else None
        name = ""
        for field in ("activity_type", "marker_name", "signal_name", "workflow_type"):
            value = getattr(detail, field, None) if detail is not None else None
            if value:
                name = value if isinstance(value, str) else value.name
                break
        lines.append(f"{event.event_id:>5} {event.event_time.ToDatetime():%H:%M:%S.%f} "
                     f"{EventType.Name(event.event_type).removeprefix('EVENT_TYPE_')} {name}".rstrip())
    return "\n".join(lines)


async def assert_replays_history(history: WorkflowHistory, label: str) -> None:
    """``history`` replays with the current code; else fail naming the events around the mismatch
    and where the history was kept."""
    failure = await replay_failure(history)
    if failure is not None:
        path = keep(history, label)
        raise AssertionError(f"{label} does not replay ({failure}); history kept at {path}; "
                             f"events around it:\n{events_near(history, failure)}")


async def assert_replays(client: Client, workflow_id: str) -> None:
    """Every run of ``workflow_id`` (a continue-as-new chain) replays without nondeterminism."""
    for execution in await ride_out(lambda: listed(client, f'WorkflowId = "{workflow_id}"')):
        history = await ride_out(client.get_workflow_handle(workflow_id, run_id=execution.run_id).fetch_history)
        await assert_replays_history(history, f"{workflow_id.replace(':', '_')}-{execution.run_id}")


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
