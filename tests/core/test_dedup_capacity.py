"""Dedup capacity: the delivery ids one activation carries across continue-as-new (core.limits.CAPACITY_BYTES)."""

from __future__ import annotations

import pathlib
import uuid
from datetime import UTC, datetime, timedelta

from tests.support.activation import make_spec
from tests.support.engine import drive
from wf_initiation.core.engine import Disposition, Engine, initial_state
from wf_initiation.core.engine._ledger import KEEP_LIVE_RELEASED
from wf_initiation.core.limits import MAX_CARRIED_STATE_BYTES, RECORDS_PER_RUN
from wf_initiation.workflows.activation import decode_state, encode_state

T0 = datetime(2026, 11, 30, tzinfo=UTC)


def _engine(tmp_path: pathlib.Path, retention: str = "24h") -> Engine:
    spec = make_spec(tmp_path, "name: cap\non:\n  http.request: {}\n", task_queue="q", dedup_retention=retention,
                     lifecycle_events=False)
    return drive(Engine(spec, initial_state(spec, T0)))


def _hook(ident: str, n: int = 0) -> dict:
    return {"delivery_id": ident, "method": "POST", "body": {"n": n}}


def test_ids_up_to_capacity_fit_in_the_continue_as_new_payload_and_keep_answering(tmp_path: pathlib.Path) -> None:
    # proves: EXT-3, EXT-5, INIT-7
    engine = _engine(tmp_path)
    ids: list[str] = []
    while True:  # accepted in chunks whose runs start and end, as they would; until the activation is full
        chunk = [str(uuid.UUID(int=len(ids) + i + 1)) for i in range(1000)]  # realistic 36-character ids
        results = [engine.deliver(None, _hook(ident, len(ids) + i), T0) for i, ident in enumerate(chunk)]
        taken = [ident for ident, r in zip(chunk, results) if r.disposition == Disposition.ACCEPTED]
        for command in engine.take_commands():
            engine.run_started(command.run_key, "r", T0)
            engine.run_finished(command.run_key, "completed", T0 + timedelta(seconds=1))
        ids += taken
        if len(taken) < len(chunk):
            assert results[len(taken)].disposition == Disposition.DEFERRED and "at capacity" in results[len(taken)].message
            break
        encode_state(engine)  # continue-as-new retires the released entries into the compact form
    assert len(ids) >= 80_000, f"capacity of {len(ids)} ids with nothing else held"
    blob = encode_state(engine)
    assert len(blob) < MAX_CARRIED_STATE_BYTES, f"{len(blob)} bytes for {len(ids)} ids"
    restored = drive(Engine(engine.spec, decode_state(blob)))
    now = T0 + timedelta(hours=1)
    assert restored.deliver(None, _hook(ids[0], 0), now).disposition == Disposition.DUPLICATE
    assert restored.deliver(None, _hook(ids[-1], len(ids) - 1), now).disposition == Disposition.DUPLICATE
    assert restored.deliver(None, _hook(ids[5], 1), now).disposition == Disposition.CONFLICT, "payload digest kept"


def test_retired_ids_expire_after_the_retention_period_and_then_count_as_new(tmp_path: pathlib.Path) -> None:
    # proves: EXT-5, EXT-7
    engine = _engine(tmp_path, retention="1h")
    engine.deliver(None, _hook("a"), T0)
    (start,) = engine.take_commands()
    engine.run_started(start.run_key, "r", T0)
    engine.run_finished(start.run_key, "completed", T0 + timedelta(minutes=10))
    engine.core.retire_released(keep_live=0)
    restored = drive(Engine(engine.spec, decode_state(encode_state(engine))))
    assert restored.core.next_expiry() == T0 + timedelta(minutes=70)
    restored.tick(T0 + timedelta(minutes=69))
    assert restored.deliver(None, _hook("a"), T0 + timedelta(minutes=69)).disposition == Disposition.DUPLICATE
    restored.tick(T0 + timedelta(minutes=70))
    assert restored.deliver(None, _hook("a"), T0 + timedelta(minutes=71)).disposition == Disposition.ACCEPTED


def test_a_run_holding_more_released_records_than_it_carries_plus_a_run_s_share_is_due_to_retire_them(
    tmp_path: pathlib.Path,
) -> None:
    # proves: EXT-3, EXT-5
    guarded = make_spec(tmp_path, 'name: cap\non:\n  http.request: {}\n  as: hook\n  when: "{{ hook.body.n > 0 }}"\n',
                        task_queue="q", lifecycle_events=False)
    engine = drive(Engine(guarded, initial_state(guarded, T0)))
    due_at = KEEP_LIVE_RELEASED + RECORDS_PER_RUN + 1
    for i in range(due_at - 1):  # each suppressed: released at once, kept as a full record during the run
        assert engine.deliver(None, _hook(str(uuid.UUID(int=i + 1))), T0).disposition == Disposition.SUPPRESSED
    assert not engine.retire_due()
    engine.deliver(None, _hook(str(uuid.UUID(int=due_at))), T0)
    assert engine.retire_due(), "one more released record than a run may add: continue as new"
    restored = drive(Engine(guarded, decode_state(encode_state(engine))))
    assert not restored.retire_due(), "the next run starts with the records it carries as full ones only"
    assert restored.deliver(None, _hook(str(uuid.UUID(int=1))), T0).disposition == Disposition.DUPLICATE
    assert restored.summary()["dedup_entries"] == due_at
