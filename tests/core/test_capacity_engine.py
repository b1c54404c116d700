"""An activation at capacity stays healthy and says so (issue 21 item 0), in the pure engine.

What the activation carries across continue-as-new (retained delivery ids, payloads held for runs
not started) is kept within its capacity (core.limits.CAPACITY_BYTES), so continue-as-new always
fits: at capacity a new id is deferred ('refuse', the default) or the oldest released ids are shed
('shed_oldest'); a warning is recorded at 80%; the fill level is in the summary and a gauge.
"""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.activation import make_spec
from wf_initiation.core.engine import Compat, Disposition, Engine, _intake, initial_state
from wf_initiation.core.limits import BYTES_PER_RETIRED_ID, CAPACITY_BYTES, STATE_BASE_BYTES

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WORKFILE = 'name: cap\non:\n  http.request: {}\n  as: hook\n  when: "{{ hook.body.go }}"\n'
SMALL = STATE_BASE_BYTES + 1000 * BYTES_PER_RETIRED_ID  # room for ~500 live records (the newest stay full)


def engine(tmp_path: pathlib.Path, compat: Compat | None = None, **policies) -> Engine:
    spec = make_spec(tmp_path, WORKFILE, task_queue="q", lifecycle_events=False, dedup_retention="1h", **policies)
    return Engine(spec, initial_state(spec, T0), compat=compat or Compat())


def hook(ident: str, go: bool = False) -> dict:
    return {"delivery_id": ident, "method": "POST", "body": {"go": go}}


def fill(e: Engine, n: int, start: int = 0, at: datetime = T0) -> list[Disposition]:
    out = [e.deliver(None, hook(f"id-{i}"), at).value.disposition for i in range(start, start + n)]
    e.encode_state()  # what continue-as-new does: released entries retire into the compact form
    return out


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_intake, "CAPACITY_BYTES", SMALL)


def test_at_capacity_a_new_id_is_deferred_a_known_one_answered_and_room_comes_back_as_ids_expire(
    tmp_path: pathlib.Path, small: None,
) -> None:
    # proves: EXT-3, EXT-7
    e = engine(tmp_path)
    dispositions = fill(e, 1500)
    refused = [i for i, d in enumerate(dispositions) if d == Disposition.DEFERRED]
    assert refused and all(d == Disposition.SUPPRESSED for d in dispositions[: refused[0]]), "suppressed until capacity"
    result = e.deliver(None, hook("one-more"), T0).value
    assert result.disposition == Disposition.DEFERRED and "at capacity" in result.message
    assert "deliver it again later" in result.message and "shorter dedup_retention" in result.message
    assert e.deliver(None, hook("id-0"), T0).value.disposition == Disposition.DUPLICATE, "a known id is still answered"
    capacity = e.capacity()
    assert capacity["fill"] >= 0.99 and capacity["policy"] == "refuse"
    assert len(e.encode_state()) <= SMALL, "what it carries stays within its capacity"
    e.tick(T0 + timedelta(hours=1, seconds=1))  # retention over: the ids are let go
    assert e.deliver(None, hook("one-more"), T0 + timedelta(hours=1, seconds=1)).value.disposition == Disposition.SUPPRESSED


def test_a_warning_is_recorded_once_at_eighty_percent_and_the_fill_is_shown(tmp_path: pathlib.Path, small: None) -> None:
    e = engine(tmp_path)
    warned_at = None
    for i in range(1200):
        e.deliver(None, hook(f"id-{i}"), T0)
        if i % 50 == 0:
            e.encode_state()
        if warned_at is None and e.error_counts().get("capacity_warning"):
            warned_at = e.capacity()["fill"]
    assert warned_at is not None and 0.8 <= warned_at < 0.9
    assert e.error_counts()["capacity_warning"] == 1, "once per crossing"
    assert e.summary()["capacity"]["retained_ids"] >= 400
    assert 80 <= e.gauges()["wfi.capacity.fill_percent"] <= 100


def test_shed_oldest_keeps_taking_new_ids_and_records_what_was_shed(tmp_path: pathlib.Path, small: None) -> None:
    # proves: EXT-3
    e = engine(tmp_path, at_capacity="shed_oldest")
    later = T0 + timedelta(minutes=1)
    fill(e, 700)
    dispositions = fill(e, 800, start=700, at=later)
    assert set(dispositions) == {Disposition.SUPPRESSED}, "nothing deferred"
    assert e.summary()["counters"]["dedup_shed"] > 0
    assert e.capacity()["shed_through"] == later, "all released at T0 went, then the oldest of the later ones"
    assert "capacity_shed" in e.error_counts()
    assert e.deliver(None, hook("id-0"), later).value.disposition == Disposition.SUPPRESSED, "a shed id is taken as new"
    assert e.deliver(None, hook("id-1499"), later).value.disposition == Disposition.DUPLICATE, "a recent one is kept"
    assert len(e.encode_state()) <= SMALL


@pytest.mark.parametrize("ids", [2_000, 20_000])
def test_the_estimate_bounds_the_carried_state_from_above(tmp_path: pathlib.Path, ids: int) -> None:
    e = engine(tmp_path)
    fill(e, ids)
    estimate = e.capacity()["estimated_state_bytes"]
    actual = len(e.encode_state())
    assert actual <= estimate <= 2 * actual + STATE_BASE_BYTES, (actual, estimate)  # 36-character ids


def test_a_run_begun_before_capacity_keeps_growing_as_it_did(tmp_path: pathlib.Path, small: None) -> None:
    e = engine(tmp_path, compat=Compat(capacity=False))
    assert Disposition.DEFERRED not in fill(e, 1500)


def test_capacity_is_what_continue_as_new_can_carry_with_a_margin() -> None:
    from wf_initiation.core.limits import MAX_CARRIED_STATE_BYTES

    assert CAPACITY_BYTES < MAX_CARRIED_STATE_BYTES


def test_the_operator_page_shows_the_fill_past_the_warning_and_signals_not_run(tmp_path: pathlib.Path, small: None) -> None:
    e = engine(tmp_path)
    assert "capacity" not in e.markdown()
    fill(e, 1200)
    page = e.markdown()
    assert "**capacity" in page and "new ids are deferred" in page
    assert "signalled deliveries deferred" not in page
    e.take_signal(None, hook("late-signal"), T0, may_wait=False)
    assert "1 signalled deliveries deferred and not run" in e.markdown()
