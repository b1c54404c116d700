"""tests/support/hostile.py's reading of a failed workflow task that refused an update's acceptance:
benign only when the history shows that update accepted and completed once, before the refusal
(the SDK sent the acceptance again; the server refused it and nothing changed). Histories built
event by event as the server writes them."""

from __future__ import annotations

from temporalio.api.enums.v1 import WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent

from tests.support.hostile import _repeated_acceptance

MESSAGE = ("BadUpdateWorkflowExecutionMessage: invalid state transition attempted for Update group-1: "
           "received *update.Acceptance message while in state Completed")


def _accepted(uid: str) -> HistoryEvent:
    event = HistoryEvent()
    event.workflow_execution_update_accepted_event_attributes.accepted_request.meta.update_id = uid
    return event


def _completed(uid: str) -> HistoryEvent:
    event = HistoryEvent()
    event.workflow_execution_update_completed_event_attributes.meta.update_id = uid
    return event


def _refused() -> HistoryEvent:
    event = HistoryEvent()
    attrs = event.workflow_task_failed_event_attributes
    attrs.cause = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_BAD_UPDATE_WORKFLOW_EXECUTION_MESSAGE
    attrs.failure.message = MESSAGE
    return event


def test_a_refused_repeat_of_an_update_completed_once_before_is_benign() -> None:
    events = [_accepted("group-1"), _completed("group-1"), _refused()]
    assert _repeated_acceptance(events, 2, MESSAGE)


def test_a_refusal_is_a_failure_when_the_update_did_not_run_exactly_once_before_it() -> None:
    assert not _repeated_acceptance([_accepted("group-1"), _refused()], 1, MESSAGE), "never completed"
    assert not _repeated_acceptance([_refused(), _accepted("group-1"), _completed("group-1")], 0, MESSAGE), "after it"
    twice = [_accepted("group-1"), _completed("group-1"), _accepted("group-1"), _completed("group-1"), _refused()]
    assert not _repeated_acceptance(twice, 4, MESSAGE), "accepted twice: the update ran twice"
    other = [_accepted("group-2"), _completed("group-2"), _refused()]
    assert not _repeated_acceptance(other, 2, MESSAGE), "another update's events"
    assert not _repeated_acceptance([_accepted("group-1"), _completed("group-1"), _refused()], 2,
                                    "BadUpdateWorkflowExecutionMessage: something else"), "another refusal"
