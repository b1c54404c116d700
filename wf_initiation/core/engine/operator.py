"""Operator actions on an activation (pause/resume, trigger, cursor, held items, overflow, backfill, pending runs, re-drive).

Each action is recorded in the operator log. An ``action_id`` makes an action once-only even
across continue-as-new (Temporal dedups update ids only within one run); the engine keeps a digest
of the action's content with its id, so the same id sent again with different content is refused,
never reported as applied. Every text field is bounded (``core.limits``): the client checks with
:func:`request_problem` before sending, the engine again before applying.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from ..limits import (
    MAX_ACTION_ID_CHARS,
    MAX_CURSOR_CHARS,
    MAX_OPERATOR_TEXT_CHARS,
    MAX_REDRIVE_PER_ACTION,
    MAX_REDRIVE_REQUEST_BYTES,
    is_utf8_text,
    json_size,
    length_problem,
)
from ..schedule import parse_instant
from . import _poll, _redrive, _schedule
from ._pipeline import Pipeline
from ._types import OperatorAction, OperatorOutcome

MAX_LOG = 200
MAX_ACTION_IDS = 1000


class Request(Protocol):
    """Read-only flat view of a request (a wire model's Literal fields are str here). The wire sends one
    action's model (``Pause``, ``SetCursor``, ...: exactly its fields) or the ``OperatorRequest`` wrapping
    it (``.root``); :func:`apply` unwraps it, and a handler reads only its action's fields."""

    @property
    def action(self) -> str: ...

    @property
    def action_id(self) -> str | None: ...

    @property
    def entry(self) -> str | None: ...

    @property
    def cursor(self) -> str | None: ...

    @property
    def note(self) -> str | None: ...

    @property
    def choice(self) -> str | None: ...

    @property
    def count(self) -> int | None: ...

    @property
    def range_id(self) -> str | None: ...

    @property
    def run_key(self) -> str | None: ...

    @property
    def start(self) -> str | None: ...

    @property
    def end(self) -> str | None: ...


class Wrapped(Protocol):
    """A request wrapping one action's model (the wire's ``OperatorRequest``, a root model)."""

    @property
    def root(self) -> Any: ...


AnyRequest = Request | Wrapped
"""What the operator functions take: a flat request or the wire's wrapper of one action."""


# Every field any action has: checks and the content digest cover them all (absent = None), as they
# did when one flat model carried every field, so digests recorded then still match.
FIELDS = ("action", "entry", "cursor", "note", "choice", "count", "range_id", "run_key", "start", "end")
# Fields of actions added since the flat model: in the digest only when set, so that the digests of
# the actions above stay what they were.
LATER_FIELDS = ("kind", "delivery_id", "first", "last", "all_events")


def _action(req: Any) -> Any:
    return getattr(req, "root", req)


def _fields(req: Any) -> dict[str, Any]:
    """Every field of the flat shape (None where the action has no such field), and, for a request
    decoded from that shape (recorded histories), the values its action does not use: checked and
    digested as they were then."""
    req = _action(req)
    values: dict[str, Any] = {name: getattr(req, name, None) for name in ("action_id", *FIELDS, *LATER_FIELDS)}
    values.update(getattr(req, "legacy_fields", {}))
    return values


_TEXT_LIMITS = {"action_id": MAX_ACTION_ID_CHARS, "cursor": MAX_CURSOR_CHARS}


def request_problem(req: AnyRequest) -> str | None:
    """Why this action cannot be taken as sent (an over-long or invalid field), or None."""
    values = _fields(req)
    for name in ("action_id", *FIELDS, *LATER_FIELDS):
        value = values[name]
        if not isinstance(value, str):
            continue
        too_long = length_problem(name, value, _TEXT_LIMITS.get(name, MAX_OPERATOR_TEXT_CHARS))
        if too_long is not None:
            return too_long
        if not is_utf8_text(value):
            return f"{name} is not valid Unicode text (a lone surrogate)"
    count = values["count"]
    if count is not None and not 0 <= count <= 10**9:
        return f"count {count} is out of range (0 to 1000000000)"
    if values["action"] == "set_cursor" and (problem := _poll.cursor_problem(values["cursor"])) is not None:
        return f"cursor: {problem}"
    return _payloads_problem(getattr(_action(req), "payloads", None) or [])


def _payloads_problem(payloads: list[Any]) -> str | None:
    """Why a re-drive's deferred-signal payloads are more than one action carries, or None."""
    if len(payloads) > MAX_REDRIVE_PER_ACTION:
        return f"payloads: {len(payloads)} of them; one action carries at most {MAX_REDRIVE_PER_ACTION}"
    size = json_size(payloads) if payloads else 0
    if size > MAX_REDRIVE_REQUEST_BYTES:
        return f"payloads: {size} bytes; one action carries at most {MAX_REDRIVE_REQUEST_BYTES} (send fewer at a time)"
    return None


def content_digest(req: AnyRequest) -> str:
    """Digest of what the action does (every field but its id): a reused id must mean the same action."""
    values = _fields(req)
    content = {name: values[name] for name in FIELDS}
    content.update({name: values[name] for name in LATER_FIELDS if values[name] not in (None, False)})
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


def apply(engine: Pipeline, req: AnyRequest, now: datetime) -> OperatorOutcome:
    """Apply one action. A repeated ``action_id`` changes nothing; the same id with different content
    is refused (the first action stands)."""
    return _apply(engine, _action(req), now)


def _apply(engine: Pipeline, req: Request, now: datetime) -> OperatorOutcome:
    problem = request_problem(req) if engine.bounded else None
    if problem is not None:
        return OperatorOutcome(False, f"refused: {problem}")
    if already_applied(engine, req.action_id):
        return _repeat(engine.state.action_digests.get(req.action_id or ""), req)
    outcome = _dispatch(engine, req, now)
    if outcome.ok:
        record(engine, req.action, outcome.message, req.action_id, now, digest=content_digest(req))
    return outcome


def _repeat(recorded: str | None, req: Request) -> OperatorOutcome:
    if recorded is None or recorded == content_digest(req):  # None: applied before digests were kept
        return OperatorOutcome(True, "already applied")
    return OperatorOutcome(False, f"action id {req.action_id!r} was already used for a different action; the first "
                           "one stands: give this action an id of its own")


def already_applied(engine: Pipeline, action_id: str | None) -> bool:
    """Whether an action with this id was applied before (in this run or one it continued from)."""
    return bool(action_id) and action_id in engine.state.seen_action_ids


def record(engine: Pipeline, action: str, detail: str, action_id: str | None, now: datetime, *,
           digest: str | None = None) -> None:
    """Log an applied action and remember its id (bounded), with the digest of its content if given."""
    state = engine.state
    state.operator_log.append(OperatorAction(at=now, action=action, detail=detail, action_id=action_id))
    del state.operator_log[:-MAX_LOG]
    if action_id:
        state.seen_action_ids.append(action_id)
        if digest is not None:
            state.action_digests[action_id] = digest
        for old in state.seen_action_ids[:-MAX_ACTION_IDS]:
            state.action_digests.pop(old, None)
        del state.seen_action_ids[:-MAX_ACTION_IDS]


# Actions that would start new work or restart sources: refused once the activation is deactivated
# (docs/lifecycle.md). The others (pause, set_cursor, release_held quarantine, admit/drop pending)
# only settle or record what is already there.
REFUSED_WHEN_DEACTIVATED = frozenset({"resume", "poll_now", "backfill", "decide_overflow", "redrive", "trigger"})


def _dispatch(engine: Pipeline, req: Request, now: datetime) -> OperatorOutcome:
    handler = _HANDLERS.get(req.action)
    if handler is None:
        return OperatorOutcome(False, f"unknown action {req.action!r}")
    if engine.state.deactivation is not None and req.action in REFUSED_WHEN_DEACTIVATED:
        return OperatorOutcome(False, f"{req.action} refused: the activation of {engine.spec.workflow!r} is "
                               "deactivated; activate the Workfile again (`wfi activate`) first")
    try:
        done = handler(engine, req, now)
        return done if isinstance(done, OperatorOutcome) else OperatorOutcome(True, done)
    except ValueError as exc:  # OperatorRefused, or a bad instant/argument: the action changed nothing
        return OperatorOutcome(False, str(exc))


def _targets(engine: Pipeline, req: Request, kinds: tuple[str, ...]) -> list[str]:
    names = [e.name for e in engine.spec.entries if e.kind in kinds]
    if req.entry is None:
        return names
    if req.entry not in names:
        raise ValueError(f"no {'/'.join(kinds)} entry {req.entry!r}; entries: {', '.join(names) or 'none'}")
    return [req.entry]


def _nothing_to(verb: str, engine: Pipeline) -> ValueError:
    """``pause``/``resume`` of an activation without schedules or polls: refused, saying why and what stops deliveries."""
    return ValueError(f"nothing to {verb}: the activation of {engine.spec.workflow!r} has no schedule or poll entry "
                      f"({verb} acts on those only; its external deliveries are always taken: to stop them, "
                      "`wfi deactivate`)")


def _pause(engine: Pipeline, req: Request, now: datetime) -> str:
    names = _targets(engine, req, ("schedule", "poll"))
    if not names:
        raise _nothing_to("pause", engine)
    for name in names:
        if name in engine.state.schedules:
            st = engine.state.schedules[name]
            st.paused, st.paused_at, st.note = True, now, req.note
        if name in engine.state.polls:
            engine.state.polls[name].paused, engine.state.polls[name].note = True, req.note
    return f"paused {', '.join(names)}" + _noted(req.note)


def _resume(engine: Pipeline, req: Request, now: datetime) -> str:
    names = _targets(engine, req, ("schedule", "poll"))
    if not names:
        raise _nothing_to("resume", engine)
    inactive = []
    for name in names:
        if name in engine.state.schedules:
            st = engine.state.schedules[name]
            st.paused, st.paused_at, st.next_instant = False, None, None  # re-evaluated at once: missed ones follow the policy
            st.note, st.resumed_at, st.failed_run = req.note, now, None
            if not st.active:
                inactive.append(f"{name} stays inactive: {st.inactive_reason}")
        if name in engine.state.polls:
            poll = engine.state.polls[name]
            poll.paused, poll.next_poll_at, poll.note = False, now, req.note
    return f"resumed {', '.join(names)}" + _noted(req.note) + "".join(f"; {line}" for line in inactive)


def _noted(note: str | None) -> str:
    return f" (note: {note})" if note else ""


def _trigger(engine: Pipeline, req: Request, now: datetime) -> str:
    names = _targets(engine, req, ("schedule",))
    if len(names) != 1:
        raise ValueError(f"trigger needs --entry, one of the schedule entries: {', '.join(names)}" if names else
                         f"nothing to trigger: the activation of {engine.spec.workflow!r} has no schedule entry")
    return _schedule.trigger(engine, names[0], req.action_id, now) + _noted(req.note)


def _poll_now(engine: Pipeline, req: Request, now: datetime) -> str:
    names = _targets(engine, req, ("poll",))
    for name in names:
        st = engine.state.polls[name]
        st.next_poll_at = now
        # A poll in flight sets the next one an interval after it ends: remember the request instead.
        st.poll_requested = st.in_flight is not None and engine.poll_now_survives_flight
    return f"poll requested for {', '.join(names)}"


def _set_cursor(engine: Pipeline, req: Request, now: datetime) -> str:
    (name,) = _targets(engine, req, ("poll",))[:1] or [""]
    return _poll.set_cursor(engine, name, req.cursor, req.note, now)


def _release_held(engine: Pipeline, req: Request, now: datetime) -> str:
    (name,) = _targets(engine, req, ("poll",))[:1] or [""]
    return _poll.release_held(engine, name, req.choice or "", now, req.note)


def _backfill(engine: Pipeline, req: Request, now: datetime) -> str:
    if not (req.entry and req.start and req.end):
        raise ValueError("backfill needs entry, start and end (ISO-8601 instants with offset)")
    return _schedule.backfill(engine, req.entry, parse_instant(req.start), parse_instant(req.end), now)


def _decide_overflow(engine: Pipeline, req: Request, now: datetime) -> str:
    return _schedule.decide_overflow(engine, req.range_id or "", req.choice or "", req.count, now, req.note)


def _admit_pending(engine: Pipeline, req: Request, now: datetime) -> str:
    return engine.admit_pending(req.run_key or "", now)


def _drop_pending(engine: Pipeline, req: Request, now: datetime) -> str:
    return engine.drop_pending(req.run_key or "", now, req.note)


def _redrive_kept(engine: Pipeline, req: Request, now: datetime) -> OperatorOutcome:
    return _redrive.redrive(engine, req, now)


_HANDLERS: dict[str, Callable[[Pipeline, Request, datetime], str | OperatorOutcome]] = {
    "pause": _pause, "resume": _resume, "poll_now": _poll_now, "set_cursor": _set_cursor,
    "release_held": _release_held, "backfill": _backfill, "decide_overflow": _decide_overflow,
    "admit_pending": _admit_pending, "drop_pending": _drop_pending, "redrive": _redrive_kept, "trigger": _trigger,
}
