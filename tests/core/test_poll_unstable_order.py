"""A poll contract without a stable-order promise (POLL-7), in the pure engine."""

from __future__ import annotations

import pathlib

from tests.support.engine import drive
from tests.support.polled import T0, row, spec_for
from wf_initiation.core.engine import Disposition, Engine, PollItemIn, PollResultIn, StartRun, initial_state


def test_unordered_responses_still_dedup_by_identity_and_order_runs_by_acceptance(tmp_path: pathlib.Path) -> None:
    # proves: POLL-7, POLL-5
    spec = spec_for(tmp_path)
    engine = drive(Engine(spec, initial_state(spec, T0)))
    responses = [
        [row(3, "c"), row(1, "a")],  # the source gives no order guarantee
        [row(2, "b"), row(3, "c"), row(1, "a")],  # and repeats items across responses
    ]
    started: list[str] = []
    for n, items in enumerate(responses):
        (call,) = engine.polls_due(T0 if n == 0 else T0 + spec.policies.poll.interval * n)
        result = PollResultIn(items=[PollItemIn(payload=p, cursor_after=f"{n}") for p in items], cursor=f"{n}",
                              stable_order=False)
        engine.poll_succeeded(call.entry, call.seq, call.version, result, T0)
        started += [c.input.initiation.delivery_ids[0] for c in engine.take_commands() if isinstance(c, StartRun)]
    assert started == ["c", "a", "b"], "one run per identity, in acceptance order, whatever the source order"
    records = {r.delivery_id: r for r in engine.state.events.values()}
    assert [d for d, _ in sorted(((d, r.seq) for d, r in records.items()), key=lambda x: x[1])] == ["c", "a", "b"]
    assert all(r.disposition == Disposition.ACCEPTED for r in records.values())
    assert engine.state.counters["duplicates"] == 2
