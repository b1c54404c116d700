"""An operator's cursor holding an integer past 1,000 digits (issue 18 item 10).

Past 4,300 digits Python's ``int()`` refuses the text with a ``ValueError`` that the check used to
read as "not JSON, an opaque cursor": the cursor was taken, and every later poll failed. Now the
digits are counted before conversion: the client refuses such a cursor before sending, the
activation refuses it too (a plain Temporal client skips the client's check), a cursor at the
limit is taken, and a connector handed such a cursor anyway (a state from before) fails the poll
as a configuration error naming the fix instead of retrying forever.
"""

from __future__ import annotations

import pytest
from temporalio.exceptions import ApplicationError

from wf_initiation.activities.poll import POLL_CONFIG_INVALID
from wf_initiation.activities.poll.sheet import parse_cursor
from wf_initiation.core.engine.operator import request_problem
from wf_initiation.core.limits import MAX_INT_DIGITS
from wf_initiation.wire import SetCursor

AT_LIMIT = "9" * MAX_INT_DIGITS
PAST = ["9" * (MAX_INT_DIGITS + 1), "9" * 5000, "-" + "9" * 5000, '{"v": 1, "n": ' + "1" * 5000 + "}"]

@pytest.mark.parametrize("cursor", PAST, ids=["1001", "5000", "-5000", "nested-5000"])
def test_a_cursor_with_an_integer_past_the_limit_is_refused_before_sending(cursor: str) -> None:
    problem = request_problem(SetCursor(entry="row", cursor=cursor))
    assert problem is not None and "digits" in problem and f"{MAX_INT_DIGITS:,}" in problem, problem
    assert "set a value the connector returned" in problem


def test_a_cursor_at_the_limit_and_an_opaque_one_are_taken() -> None:
    assert request_problem(SetCursor(entry="row", cursor=AT_LIMIT)) is None
    assert request_problem(SetCursor(entry="row", cursor="opaque-" + "9" * 5000)) is None  # not JSON


def test_a_connector_handed_such_a_cursor_fails_as_a_configuration_error_naming_the_fix() -> None:
    with pytest.raises(ApplicationError) as caught:
        parse_cursor("9" * 5000)
    assert caught.value.type == POLL_CONFIG_INVALID and "clear it" in caught.value.message
