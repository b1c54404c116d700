"""Polling initiation inside the engine (POLL-1..13).

Cursor advancement is atomic with dispositions (POLL-8): a poll response is processed inside one
workflow task, item by item; each item is validated, deduplicated and disposed, and only then
does the cursor move past it. A crash before the task completes replays the same decisions; a
crash before the response is recorded repeats the fetch, and dedup absorbs what repeats (POLL-9).
A cursor set by an operator bumps ``cursor_version``; a response of a poll started under an older
version is discarded whole, so an in-flight poll never overwrites the operator's cursor (POLL-4).

An item ``deferred`` (the activation holds its budget of payloads, see ``_intake``) ends the
response's processing there: the cursor stays before it, and the next poll, an interval later,
fetches it again. An operator's cursor is bounded and, when it is JSON, must be strict JSON
(``1e999`` or ``NaN`` were never returned by a connector); the cursor-change log keeps a digest of
a long cursor, not the cursor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from wf_initiation.errors import JsonNumberError

from .._expr import canonical_key
from ..activation import ActivationSpec, EntrySpec
from ..limits import (
    MAX_CURSOR_CHARS,
    MAX_CURSOR_LOG_CHARS,
    MAX_INT_DIGITS,
    MAX_POLL_NOTICES,
    MAX_POLL_RETRY_AFTER,
    clip,
    is_utf8_text,
    json_problem,
    retained_id,
    strict_json,
)
from ._keys import entry_delivery_id, event_key, identity_text, payload_digest
from ._pipeline import Pipeline
from ._types import CursorChange, Disposition, EngineState, HeldItem, OperatorRefused, PollState, RunPoll

MAX_CURSOR_LOG = 100


@dataclass
class PollItemIn:
    payload: Any
    cursor_after: str | None
    problem: str | None = None  # the connector could not return the item (e.g. over the item byte limit)


@dataclass
class PollResultIn:
    items: list[PollItemIn] = field(default_factory=list)
    cursor: str | None = None
    more: bool = False
    stable_order: bool = True
    notices: list[str] = field(default_factory=list)  # what the operator should know (a mailbox's UIDVALIDITY changed)


def new_poll_state(entry: EntrySpec, spec: ActivationSpec, now: datetime) -> PollState:
    return PollState(entry=entry.name, next_poll_at=now)


def polls_due(engine: Pipeline, now: datetime) -> list[RunPoll]:
    """The polls to run now; each is in flight from here until it reports (POLL-1)."""
    calls = []
    for entry in engine.spec.entries:
        st = engine.state.polls.get(entry.name)
        if st is None or st.paused or st.held is not None or st.in_flight is not None:
            continue
        if st.next_poll_at is not None and st.next_poll_at > now:
            continue
        st.poll_seq += 1
        st.in_flight = st.poll_seq
        calls.append(RunPoll(entry=entry.name, connector=entry.connector, seq=st.poll_seq, version=st.cursor_version,
                              cursor=st.cursor, config=entry.config, connection=entry.connection_settings,
                              limit=engine.spec.policies.poll.limit))
    return calls


def next_poll_wakeup(engine: Pipeline) -> datetime | None:
    times = [st.next_poll_at for st in engine.state.polls.values()
             if st.next_poll_at is not None and not st.paused and st.held is None and st.in_flight is None]
    return min(times) if times else None


def poll_succeeded(engine: Pipeline, entry_name: str, seq: int, version: int, result: PollResultIn, now: datetime) -> None:
    st = engine.state.polls.get(entry_name)
    if st is None or st.in_flight != seq:
        return
    st.in_flight = None
    requested, st.poll_requested = st.poll_requested, False
    settings = engine.spec.policies.poll
    if version != st.cursor_version:
        # POLL-4: the cursor changed while this poll was in flight; its items are discarded whole.
        engine.count("polls_discarded")
        st.next_poll_at = now
        return
    st.failures, st.last_error, st.last_success_at = 0, None, now
    for notice in result.notices[:MAX_POLL_NOTICES]:
        engine.record_error(now, "poll_notice", notice, entry_name)
    entry = engine.entry(entry_name)
    for item in result.items:
        outcome = _dispose(engine, entry, st, item, now)
        if outcome == "held":
            return  # the cursor stays at this item (POLL-11)
        if outcome == "deferred":
            st.next_poll_at = now + settings.interval  # fetched again then, from before this item
            return
        st.cursor = item.cursor_after if item.cursor_after is not None else st.cursor
    st.cursor = result.cursor if result.cursor is not None else st.cursor
    st.next_poll_at = now if result.more or requested else now + settings.interval


def _dispose(engine: Pipeline, entry: EntrySpec, st: PollState, item: PollItemIn, now: datetime) -> str:
    """Dispose one item: ``done``, ``held`` (the cursor holds at it) or ``deferred`` (poll it again later)."""
    st.items_seen += 1
    engine.count("poll_items")
    result = engine.deliver_event(entry, item.payload, now) if item.problem is None else _refused(engine, entry, item, now)
    if result.disposition == Disposition.DEFERRED:
        return "deferred"
    if result.disposition != Disposition.INVALID:
        return "done"
    if engine.spec.policies.invalid_items == "hold":
        # Only a payload the engine can carry is kept; the reason names what was wrong with it.
        keep = item.payload if not engine.bounded or json_problem(item.payload) is None else None
        st.held = HeldItem(payload=keep, cursor_before=st.cursor, cursor_after=item.cursor_after,
                           reason=result.message or "invalid", since=now)
        return "held"
    quarantine(engine, entry, item.payload, result.delivery_id, result.message or "invalid", now)
    return "done"


def _refused(engine: Pipeline, entry: EntrySpec, item: PollItemIn, now: datetime) -> Any:
    """An item the connector flagged as unusable: invalid with the connector's reason (POLL-11)."""
    raw_id = entry_delivery_id(entry, item.payload)
    return engine.invalid(entry, identity_text(raw_id) if raw_id is not None else None, item.problem or "", now)


def quarantine(engine: Pipeline, entry: EntrySpec, payload: Any, delivery_id: str | None, reason: str, now: datetime) -> None:
    """Retain an explicit quarantine disposition before the cursor moves past an invalid item.

    The record is keyed by the payload digest, not the delivery id: an invalid item leaves its
    identity unconsumed (EXT-10), so a corrected item with the same id is still accepted, while a
    repeated fetch of the same invalid item finds its quarantine record and adds nothing (POLL-9).
    """
    digest = payload_digest(payload) if _jsonable(payload) and json_problem(payload) is None else "unhashable"
    ident = quarantine_ident(digest)
    key = event_key(entry.name, ident)
    if engine.lookup(key) is None:
        detail = f"delivery {retained_id(delivery_id)!r}: {reason}" if delivery_id else reason
        engine.retain(entry, key, digest, ident, Disposition.QUARANTINED, now, detail, kind="quarantined")
        if engine.keeps_for_redrive and digest != "unhashable":  # offered again once its cause is fixed (_redrive)
            engine.keep_payload("quarantined", entry, payload, retained_id(delivery_id), reason, now)


def quarantine_ident(digest: str) -> str:
    """The dedup identity of a quarantine record: ``quarantine:<payload digest>``."""
    return f"quarantine:{digest}"


def _jsonable(payload: Any) -> bool:
    try:
        canonical_key(payload)
        return True
    except Exception:
        return False


def poll_failed(engine: Pipeline, entry_name: str, seq: int, error: str, now: datetime,
                retry_after: timedelta | None = None) -> None:
    """POLL-10: a failed poll starts nothing and moves nothing; back off exponentially (POLL-2).

    ``retry_after``: the source asked to be left alone this long (an HTTP 429 or 503 with
    ``Retry-After``); the next poll waits at least that (at most ``MAX_POLL_RETRY_AFTER``), even past
    ``backoff_max``. An operator's ``poll_now`` still polls at once.
    """
    st = engine.state.polls.get(entry_name)
    if st is None or st.in_flight != seq:
        return
    st.in_flight = None
    st.failures += 1
    st.last_error = clip(error)
    settings = engine.spec.policies.poll
    requested, st.poll_requested = st.poll_requested, False
    delay = timedelta(0) if requested else backoff_for(st.failures, settings.backoff_initial, settings.backoff_max)
    asked = ""
    if retry_after is not None and not requested:
        wait = min(max(retry_after, timedelta(0)), MAX_POLL_RETRY_AFTER)
        delay, asked = max(delay, wait), f" (the source asked to wait {wait})"
    st.next_poll_at = now + delay
    engine.record_error(now, "poll_failed",
                        f"poll {st.poll_seq} failed (attempt {st.failures}); next in {delay}{asked}: {error}", entry_name)


def set_cursor(engine: Pipeline, entry_name: str, cursor: str | None, note: str | None, now: datetime) -> str:
    st = engine.state.polls.get(entry_name)
    if st is None:
        raise OperatorRefused(f"no poll entry {entry_name!r}")
    problem = cursor_problem(cursor) if engine.bounded else None
    if problem is not None:
        raise OperatorRefused(f"cursor refused: {problem}")
    _log_cursor(st, CursorChange(at=now, old=st.cursor, new=cursor, note=note))
    del st.cursor_changes[:-MAX_CURSOR_LOG]
    st.cursor, st.cursor_version, st.held = cursor, st.cursor_version + 1, None
    st.next_poll_at = now
    return f"cursor set; applies to polls started from now on (version {st.cursor_version})"


def release_held(engine: Pipeline, entry_name: str, choice: str, now: datetime, note: str | None) -> str:
    st = engine.state.polls.get(entry_name)
    if st is None or st.held is None:
        raise OperatorRefused(f"no held item on {entry_name!r}")
    held = st.held
    if choice == "quarantine":
        entry = engine.entry(entry_name)
        raw = entry_delivery_id(entry, held.payload)
        ident = identity_text(raw) if raw not in (None, "") else None
        quarantine(engine, entry, held.payload, ident, held.reason + (f" ({note})" if note else ""), now)
        old = st.cursor
        st.cursor = held.cursor_after
        _log_cursor(st, CursorChange(at=now, old=old, new=st.cursor, note=f"past quarantined item: {note or ''}", by="quarantine"))
    elif choice != "retry":
        raise OperatorRefused("choice must be quarantine or retry")
    st.held = None
    st.next_poll_at = now
    return f"held item {choice}d"


def cursor_problem(cursor: str | None) -> str | None:
    """Why an operator's cursor cannot be a cursor a connector returned, or None.

    Cursors are opaque text; the built-in connectors write JSON. Text that parses as JSON must be
    strict JSON (no NaN, no infinity, no number that overflows to infinity such as ``1e999``).
    The connector checks the rest of its shape at the next poll (``PollConfigInvalid``).
    """
    if cursor is None:
        return None
    if len(cursor) > MAX_CURSOR_CHARS:
        return f"it has {len(cursor)} characters; the limit is {MAX_CURSOR_CHARS}"
    if not is_utf8_text(cursor):
        return "it is not valid Unicode text (a lone surrogate)"
    try:
        value = strict_json(cursor)
    except JsonNumberError as exc:
        if exc.digits is not None:
            return (f"it holds an integer of {exc.digits:,} digits (the limit is {MAX_INT_DIGITS:,}); "
                    "set a value the connector returned")
        return f"{cursor[:80]!r} is not strict JSON ({exc}); set a value the connector returned"
    except ValueError:
        return None  # not JSON: an opaque cursor of a third-party connector
    problem = json_problem(value, max_depth=16)
    return None if problem is None else f"{problem}; set a value the connector returned"


def _log_cursor(st: PollState, change: CursorChange) -> None:
    """Record a cursor change; a long cursor is logged as its digest (the state stays small)."""
    change.old = retained_id(change.old, MAX_CURSOR_LOG_CHARS)
    change.new = retained_id(change.new, MAX_CURSOR_LOG_CHARS)
    change.note = clip(change.note)
    st.cursor_changes.append(change)


def abandon_in_flight(state: EngineState) -> None:
    """Forget polls in flight when the state is carried into a new workflow run.

    A poll's result is delivered only to the run that started it; after continue-as-new nothing
    would ever clear ``in_flight``, and the entry would never poll again. The abandoned poll moved
    nothing (POLL-10), so the next run simply polls again from the same cursor.
    """
    for st in state.polls.values():
        st.in_flight = None


def backoff_for(failures: int, initial: timedelta, cap: timedelta) -> timedelta:
    """``initial * 2**(failures-1)``, at most ``cap`` (POLL-2).

    Doubles step by step and stops at the cap, so a source that stays down for days never
    overflows ``timedelta`` (which would fail the activation's workflow task on every retry).
    """
    delay = initial
    for _ in range(max(failures - 1, 0)):
        if delay >= cap:
            break
        delay *= 2
    return min(delay, cap)
