"""A dedup entry's full record (``EventRecord``): slotted and small in the worker, the same JSON as the
model it was (carried states and ``delivery`` answers of earlier builds read alike)."""

from __future__ import annotations

import copy
import json
import sys
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from wf_initiation.core.engine import EVENT_RECORD, EVENT_RECORD_FIELDS, Disposition, EngineState, EventRecord
from wf_initiation.wire.schema import DeliveryRecord

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CARRIED = ('{"entry":"hook","delivery_id":"d-1","digest":"ab12","disposition":"accepted","run_key":"r-1",'
           '"accepted_at":"2026-01-01T00:00:00Z","released_at":null,"activation_id":"act-1","detail":null,'
           '"seq":3,"redriven_by":null}')


def _record() -> EventRecord:
    return EventRecord(entry="hook", delivery_id="d-1", digest="ab12", disposition=Disposition.ACCEPTED,
                       run_key="r-1", accepted_at=T0, activation_id="act-1", seq=3)


def test_a_record_is_slotted_and_small() -> None:
    record = _record()
    assert not hasattr(record, "__dict__")
    assert sys.getsizeof(record) <= 160, "one record per id a run holds: no instance dict, no set of fields"


def test_a_record_reads_and_writes_the_json_the_model_wrote() -> None:
    """The JSON an earlier build carried (field for field, in order) reads back and is written again the same."""
    record = EVENT_RECORD.validate_json(CARRIED)
    assert record == _record()
    assert EVENT_RECORD.dump_json(record).decode() == CARRIED
    state = EngineState.model_validate({"activation_id": "act-1", "events": {"hook\x1fd-1": json.loads(CARRIED)}})
    assert state.events["hook\x1fd-1"] == record
    assert json.loads(state.model_dump_json())["events"]["hook\x1fd-1"] == json.loads(CARRIED)


def test_a_record_refuses_what_the_model_refused() -> None:
    with pytest.raises(ValidationError, match="unknown"):
        EVENT_RECORD.validate_python({**json.loads(CARRIED), "unknown": 1})
    with pytest.raises(ValidationError, match="disposition"):
        EVENT_RECORD.validate_python({**json.loads(CARRIED), "disposition": "no-such"})


def test_a_copy_is_a_record_of_its_own() -> None:
    record = _record()
    copied = copy.copy(record)
    copied.released_at, copied.disposition = T0, Disposition.DROPPED
    assert record.released_at is None and record.disposition is Disposition.ACCEPTED


def test_the_delivery_answer_is_a_record_and_the_run_status() -> None:
    answer = DeliveryRecord.model_validate({**json.loads(CARRIED), "run_status": "running", "more": 1})
    assert answer.run_status == "running" and answer.disposition is Disposition.ACCEPTED
    assert set(EVENT_RECORD_FIELDS) < set(DeliveryRecord.model_fields)
