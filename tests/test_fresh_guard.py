"""The stale-activation check (workflows/_fresh.py) on its own: which activation pairs it refuses."""

from __future__ import annotations

import pytest

from wf_initiation.workflows._fresh import is_stale

T = 1_796_000_000_000_000_000  # ns


@pytest.mark.parametrize(
    ("before", "after", "replaying", "stale"),
    [
        ((18, T), (22, T), False, True),  # trailing events of a query task: history grew, time did not
        ((18, T), (22, T), True, False),  # a replay never refuses (the Replayer, a cache miss)
        ((18, T), (23, T + 1), False, False),  # a new workflow task starts later
        ((18, T), (18, T), False, False),  # another activation of the same task (local activity result)
        ((20, T), (18, T), False, False),  # a rejected speculative task's event ids reused
    ],
)
def test_only_an_activation_whose_history_grew_at_the_same_instant_is_refused(before, after, replaying, stale) -> None:
    assert is_stale(before, after, replaying=replaying) is stale
