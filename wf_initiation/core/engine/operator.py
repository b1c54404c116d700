"""Operator actions on an activation (pause/resume, cursor, held items, overflow, backfill, pending runs).

Each action is recorded in the operator log. An ``action_id`` makes an action once-only even
across continue-as-new (Temporal dedups update ids only within one run).
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from ..schedule import parse_instant
from . import _poll, _schedule
from ._engine import Engine
from ._types import OperatorAction

MAX_LOG = 200
MAX_ACTION_IDS = 1000


class Request(Protocol):
    action: str
    action_id: str | None
    entry: str | None
    cursor: str | None
    note: str | None
    choice: str | None
    count: int | None
    range_id: str | None
    run_key: str | None
    start: str | None
    end: str | None


def apply(engine: Engine, req: Request, now: datetime) -> tuple[bool, str]:
    """Apply one action; returns (ok, message). A repeated ``action_id`` changes nothing."""
    if already_applied(engine, req.action_id):
        return True, "already applied"
    ok, message = _dispatch(engine, req, now)
    if ok:
        record(engine, req.action, message, req.action_id, now)
    return ok, message


def already_applied(engine: Engine, action_id: str | None) -> bool:
    """Whether an action with this id was applied before (in this run or one it continued from)."""
    return bool(action_id) and action_id in engine.state.seen_action_ids


def record(engine: Engine, action: str, detail: str, action_id: str | None, now: datetime) -> None:
    """Log an applied action and remember its id (bounded)."""
    state = engine.state
    state.operator_log.append(OperatorAction(at=now, action=action, detail=detail, action_id=action_id))
    del state.operator_log[:-MAX_LOG]
    if action_id:
        state.seen_action_ids.append(action_id)
        del state.seen_action_ids[:-MAX_ACTION_IDS]


# Actions that would start new work or restart sources: refused once the activation is deactivated
# (docs/lifecycle.md). The others (pause, set_cursor, release_held quarantine, admit/drop pending)
# only settle or record what is already there.
REFUSED_WHEN_DEACTIVATED = frozenset({"resume", "poll_now", "backfill", "decide_overflow"})


def _dispatch(engine: Engine, req: Request, now: datetime) -> tuple[bool, str]:
    handler = _HANDLERS.get(req.action)
    if handler is None:
        return False, f"unknown action {req.action!r}"
    if engine.state.deactivation is not None and req.action in REFUSED_WHEN_DEACTIVATED:
        return False, (f"{req.action} refused: the activation of {engine.spec.workflow!r} is deactivated; "
                       "activate the Workfile again (`wfi activate`) first")
    try:
        return True, handler(engine, req, now)
    except ValueError as exc:  # OperatorRefused, or a bad instant/argument: the action changed nothing
        return False, str(exc)


def _targets(engine: Engine, req: Request, kinds: tuple[str, ...]) -> list[str]:
    names = [e.name for e in engine.spec.entries if e.kind in kinds]
    if req.entry is None:
        return names
    if req.entry not in names:
        raise ValueError(f"no {'/'.join(kinds)} entry {req.entry!r}; entries: {', '.join(names) or 'none'}")
    return [req.entry]


def _pause(engine: Engine, req: Request, now: datetime) -> str:
    names = _targets(engine, req, ("schedule", "poll"))
    for name in names:
        if name in engine.state.schedules:
            engine.state.schedules[name].paused, engine.state.schedules[name].paused_at = True, now
        if name in engine.state.polls:
            engine.state.polls[name].paused = True
    return f"paused {', '.join(names) or 'nothing'}"


def _resume(engine: Engine, req: Request, now: datetime) -> str:
    names = _targets(engine, req, ("schedule", "poll"))
    for name in names:
        if name in engine.state.schedules:
            st = engine.state.schedules[name]
            st.paused, st.paused_at, st.next_instant = False, None, None  # re-evaluated at once: missed ones follow the policy
        if name in engine.state.polls:
            engine.state.polls[name].paused, engine.state.polls[name].next_poll_at = False, now
    return f"resumed {', '.join(names) or 'nothing'}"


def _poll_now(engine: Engine, req: Request, now: datetime) -> str:
    names = _targets(engine, req, ("poll",))
    for name in names:
        st = engine.state.polls[name]
        st.next_poll_at = now
        # A poll in flight sets the next one an interval after it ends: remember the request instead.
        st.poll_requested = st.in_flight is not None and engine.poll_now_survives_flight
    return f"poll requested for {', '.join(names)}"


def _set_cursor(engine: Engine, req: Request, now: datetime) -> str:
    (name,) = _targets(engine, req, ("poll",))[:1] or [""]
    return _poll.set_cursor(engine, name, req.cursor, req.note, now)


def _release_held(engine: Engine, req: Request, now: datetime) -> str:
    (name,) = _targets(engine, req, ("poll",))[:1] or [""]
    return _poll.release_held(engine, name, req.choice or "", now, req.note)


def _backfill(engine: Engine, req: Request, now: datetime) -> str:
    if not (req.entry and req.start and req.end):
        raise ValueError("backfill needs entry, start and end (ISO-8601 instants with offset)")
    return _schedule.backfill(engine, req.entry, parse_instant(req.start), parse_instant(req.end), now)


def _decide_overflow(engine: Engine, req: Request, now: datetime) -> str:
    return _schedule.decide_overflow(engine, req.range_id or "", req.choice or "", req.count, now, req.note)


def _admit_pending(engine: Engine, req: Request, now: datetime) -> str:
    return engine.admit_pending(req.run_key or "", now)


def _drop_pending(engine: Engine, req: Request, now: datetime) -> str:
    return engine.drop_pending(req.run_key or "", now, req.note)


_HANDLERS = {
    "pause": _pause, "resume": _resume, "poll_now": _poll_now, "set_cursor": _set_cursor,
    "release_held": _release_held, "backfill": _backfill, "decide_overflow": _decide_overflow,
    "admit_pending": _admit_pending, "drop_pending": _drop_pending,
}
