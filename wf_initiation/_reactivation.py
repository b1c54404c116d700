"""Re-activation after an activation workflow ended without a deactivation (terminated, failed, timed
out) whose history this build cannot replay: the arguments of its new run from its start input and the
note of what was lost (the usual way recovers the complete state: wf_initiation/_recovery.py); and the
words of the ``activate`` update's answer, whichever build of the activation wrote it (docs/lifecycle.md)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

from temporalio.api.enums.v1 import EventType

from wf_initiation._activating import ActivateAnswer
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.wire import DEACTIVATE_UPDATE, DELIVER_MANY_UPDATE, DELIVER_UPDATE, OPERATE_UPDATE

Outcome = Literal["activated", "unchanged", "rebound"]


def outcome(answer: ActivateAnswer, was_running: bool) -> Outcome:
    if not was_running:
        return "activated"
    return "rebound" if answer.outcome == "rebound" else "unchanged"


def recorded(events: Sequence[Any]) -> str:
    """What outsiders sent a run, in words: ``3 delivery update(s), 1 signal(s) and 0 operator action(s)``."""
    counts: Counter[str] = Counter()
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            name = event.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
            counts["deliveries" if name in (DELIVER_UPDATE, DELIVER_MANY_UPDATE) else
                   "actions" if name in (OPERATE_UPDATE, DEACTIVATE_UPDATE) else "other"] += 1
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            counts["signals"] += 1
    return (f"the {counts['deliveries']} delivery update(s), {counts['signals']} signal(s) and "
            f"{counts['actions']} operator action(s)")


async def restart_args(converter: Any, closed: Any, events: Sequence[Any], spec: ActivationSpec) -> tuple[list[Any], str]:
    """The arguments of a new run after ``closed`` ended without a deactivation: the spec and the
    state its run began with (what its previous run carried, or none for a first run), and a note
    of what is not carried. A start input this build cannot read starts ``spec`` afresh, said so.

    Args:
        converter: The client's data converter (the team's codec decodes the start input).
        closed: The closed run's description.
        events: The closed run's history.
        spec: The spec being activated.
    """
    started = events[0].workflow_execution_started_event_attributes
    status = closed.status.name.lower().replace("_", " ") if closed.status else "closed"
    when = closed.close_time.isoformat(timespec="seconds") if closed.close_time else "an unknown time"
    lost = (f"{recorded(events[1:])} that run recorded after its start are not carried: their dedup "
            "entries, cursor moves and schedule progress are lost: a redelivery of one of them is accepted again, "
            "and starts no second run only while the binding is the same (its run key is the one it had); after a "
            "rebind (an edited Workfile) it starts a second run")
    try:
        payloads = list(started.input.payloads)
        hints: list[type] = [ActivationSpec, bytes]
        began, state = [*await converter.decode(payloads, hints[:len(payloads)]), None][:2]
    except Exception as exc:  # e.g. a spec of a build this one cannot read: start afresh, and say so
        return [spec, None], (f"re-activated after run {closed.run_id} was {status} at {when}; its state could not be "
                              f"read ({type(exc).__name__}), so nothing it had accepted is carried")
    begun = "the state carried into it" if state else "a new activation's state (it was the first run)"
    return [began, state], f"re-activated after run {closed.run_id} was {status} at {when}, from {begun}; {lost}"

