"""tests/support/hostile.py's reading of failed workflow tasks. A task that refused an update's
acceptance is benign only when the history shows that update accepted and completed once, before
the refusal (the SDK sent the acceptance again; the server refused it and nothing changed). A task
past the deadlock timeout counts as slow, not failed, only when a task completed after it with
nothing but such timeouts between (retried with its input, its work fit). Histories built event by
event as the server writes them."""

from __future__ import annotations

from temporalio.api.enums.v1 import WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent

from tests.support.hostile import DEADLOCK, _repeated_acceptance, _went_on

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


def _task_completed() -> HistoryEvent:
    event = HistoryEvent()
    event.workflow_task_completed_event_attributes.scheduled_event_id = 1
    return event


def _task_failed(message: str, cause: int = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE,
                 ) -> HistoryEvent:
    event = HistoryEvent()
    attrs = event.workflow_task_failed_event_attributes
    attrs.cause = cause
    attrs.failure.message = message
    return event


def _refused() -> HistoryEvent:
    return _task_failed(MESSAGE, WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_BAD_UPDATE_WORKFLOW_EXECUTION_MESSAGE)


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


SLOW = f"{DEADLOCK} Potential deadlock detected: workflow didn't yield within 2 second(s)"


def test_a_slow_task_retried_until_one_completed_went_on() -> None:
    assert _went_on([_task_failed(SLOW), _task_completed()], 0)
    assert _went_on([_task_failed(SLOW), _task_failed(SLOW), _task_completed()], 0), "slow twice, then done"


def test_a_slow_task_never_followed_by_a_completed_one_or_by_another_failure_did_not() -> None:
    assert not _went_on([_task_failed(SLOW)], 0), "wedged: no task completed after it"
    assert not _went_on([_task_failed(SLOW), _task_failed("a bug"), _task_completed()], 0), "another failure between"
