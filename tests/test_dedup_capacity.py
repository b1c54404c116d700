"""Dedup capacity: live dedup ids one activation carries across continue-as-new within 2 MiB."""

from __future__ import annotations

import pathlib
import uuid
from datetime import datetime, timedelta, timezone

from tests.support.engine import drive
from tests.support.activation import make_spec
from wf_initiation.core.engine import Disposition, Engine, initial_state
from wf_initiation.workflows.activation import decode_state, encode_state

T0 = datetime(2026, 11, 30, tzinfo=timezone.utc)
TWO_MIB = 2 * 1024 * 1024


def _engine(tmp_path: pathlib.Path, retention: str = "24h") -> Engine:
    spec = make_spec(tmp_path, "name: cap\non:\n  http.request: {}\n", task_queue="q", dedup_retention=retention,
                     lifecycle_events=False)
    return drive(Engine(spec, initial_state(spec, T0)))


def _hook(ident: str, n: int = 0) -> dict:
    return {"delivery_id": ident, "method": "POST", "body": {"n": n}}


def test_a_hundred_thousand_retained_ids_fit_in_the_continue_as_new_payload(tmp_path: pathlib.Path) -> None:
    # proves: EXT-3, EXT-5, INIT-7
    engine = _engine(tmp_path)
    ids = [str(uuid.UUID(int=i + 1)) for i in range(100_000)]  # realistic 36-character delivery ids
    for i, ident in enumerate(ids):
        assert engine.deliver(None, _hook(ident, i), T0).disposition == Disposition.ACCEPTED
    for command in engine.take_commands():
        engine.run_started(command.run_key, "r", T0)
        engine.run_finished(command.run_key, "completed", T0 + timedelta(seconds=1))
    blob = encode_state(engine)
    assert len(blob) < TWO_MIB, f"{len(blob)} bytes for 100k ids"
    restored = drive(Engine(engine.spec, decode_state(blob)))
    now = T0 + timedelta(hours=1)
    assert restored.deliver(None, _hook(ids[0], 0), now).disposition == Disposition.DUPLICATE
    assert restored.deliver(None, _hook(ids[-1], 99_999), now).disposition == Disposition.DUPLICATE
    assert restored.deliver(None, _hook(ids[5], 1), now).disposition == Disposition.CONFLICT, "payload digest kept"
    assert restored.deliver(None, _hook("new-id"), now).disposition == Disposition.ACCEPTED


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
