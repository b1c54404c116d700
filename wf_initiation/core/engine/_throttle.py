"""The throttle: at most ``runs`` run starts in any window of ``per``, per throttle key.

A **sliding** window: a run of key K may start at instant ``t`` when fewer than ``runs`` runs of K
started in ``(t - per, t]``. So ``{runs: 10, per: 1m}`` never starts an eleventh run within a minute
of the first of ten, whatever the instants (a fixed window would allow 20 across its boundary); the
run that waits for the eleventh slot starts exactly ``per`` after the oldest of the ten. Without a
``key`` every run of the workflow has the one key ``""`` (:data:`UNKEYED`).

What is kept (``ThrottleState``, carried across continue-as-new):

* ``starts``: per key, *marks* (an instant and how many runs started at it), oldest first; only the
  last ``runs`` starts are kept (the older ones can never decide anything), and a key whose newest
  mark has left its window is forgotten (``marks`` and ``key_chars`` count what it holds). At most
  ``limits.MAX_THROTTLE_MARKS`` marks: past it a key's two oldest merge into the later one (those
  runs count as started later: a later run may wait longer than the window requires, never less),
  and with that many keys holding one mark each, a run of a new key waits until one of them leaves
  its window.
* ``lines``: per key, the pending runs waiting for room, in the order they became ready to start
  (acceptance order; a ``queue_by`` run when its key's earlier runs have ended, TRIG-11). A run
  behind others of its key joins the end of the line, whatever else would let it start; while a
  key has a line, no other run of it waits for the overlap policy but the line's head.

Functions over that state and the policy; the runs layer (``_runs``) decides when to call them, and
applies the overlap policy and the concurrency cap besides (a run starts when all of them agree).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from ..deployment import Throttle
from ..limits import MAX_THROTTLE_KEY_CHARS, MAX_THROTTLE_MARKS
from ._types import RunRecord, ThrottleState

UNKEYED = ""
"""The key of every run under a throttle without ``key`` (a key's canonical JSON text is never empty)."""

Marks = list[tuple[datetime, int]]


def stored_key(canonical: str) -> str:
    """A throttle key as kept: its canonical text, or a digest of a long one (``#`` never starts JSON)."""
    if len(canonical) <= MAX_THROTTLE_KEY_CHARS:
        return canonical
    return "#" + hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def key_of(run: RunRecord) -> str:
    return UNKEYED if run.throttle_key is None else run.throttle_key


# ---------------------------------------------------------------------------- the window
# ``starts`` is kept in the order of each key's newest start (a key moves to the end as it starts a
# run), so the keys whose starts have all left their window are at its front; ``marks`` and
# ``key_chars`` count what it holds, so neither a start nor the capacity estimate walks every key.
def _prune(state: ThrottleState, marks: Marks, now: datetime, throttle: Throttle) -> None:
    """Drop the marks that left the window ending at ``now`` (a start at ``t`` counts until ``t + per``)."""
    cutoff = now - throttle.per
    gone = 0
    while gone < len(marks) and marks[gone][0] <= cutoff:
        gone += 1
    if gone:
        del marks[:gone]
        state.marks -= gone


def _forget(state: ThrottleState, key: str) -> None:
    state.marks -= len(state.starts.pop(key))
    state.key_chars -= len(key)


def forget_past(state: ThrottleState, now: datetime, throttle: Throttle) -> None:
    """Forget the keys whose starts have all left their window (from the front of ``starts``)."""
    cutoff = now - throttle.per
    while state.starts:
        key, marks = next(iter(state.starts.items()))
        if marks and marks[-1][0] > cutoff:
            return
        _forget(state, key)


def room(state: ThrottleState, key: str, now: datetime, throttle: Throttle) -> bool:
    """Whether a run of ``key`` may start at ``now``."""
    marks = state.starts.get(key)
    if marks is not None:
        _prune(state, marks, now, throttle)
        if marks:
            return sum(n for _, n in marks) < throttle.runs
        _forget(state, key)
    if len(state.starts) >= MAX_THROTTLE_MARKS:
        forget_past(state, now, throttle)
    return len(state.starts) < MAX_THROTTLE_MARKS


def started(state: ThrottleState, key: str, now: datetime, throttle: Throttle) -> None:
    """A run of ``key`` started at ``now`` (also one an operator admitted past the throttle)."""
    marks = state.starts.pop(key, None)
    if marks is None:
        marks = []
        state.key_chars += len(key)
    state.starts[key] = marks  # last: its newest start is the latest
    _prune(state, marks, now, throttle)
    at = max(now, marks[-1][0]) if marks else now  # never earlier than a start already marked
    if marks and marks[-1][0] == at:
        marks[-1] = (at, marks[-1][1] + 1)
    elif state.marks < MAX_THROTTLE_MARKS:
        _append(state, marks, at)
    elif marks:  # at the bound: this key's oldest marks merge (later is stricter, never looser)
        if len(marks) >= 2:
            _merge_oldest(state, marks)
            _append(state, marks, at)
        else:
            marks[0] = (at, marks[0][1] + 1)
    else:
        donor = max(state.starts.values(), key=len)
        if len(donor) >= 2:
            _merge_oldest(state, donor)
        _append(state, marks, at)  # with every key at one mark only an operator's admit gets here
    _keep_last(state, marks, throttle.runs)


def _append(state: ThrottleState, marks: Marks, at: datetime) -> None:
    marks.append((at, 1))
    state.marks += 1


def _merge_oldest(state: ThrottleState, marks: Marks) -> None:
    (_, first), (later, second) = marks[0], marks[1]
    marks[0:2] = [(later, first + second)]
    state.marks -= 1


def _keep_last(state: ThrottleState, marks: Marks, runs: int) -> None:
    """Keep only the last ``runs`` starts: the older ones can never fill a window again."""
    excess = sum(n for _, n in marks) - runs
    while excess > 0:
        at, n = marks[0]
        if n <= excess:
            del marks[0]
            state.marks -= 1
            excess -= n
        else:
            marks[0] = (at, n - excess)
            excess = 0


def marks_total(state: ThrottleState) -> int:
    return state.marks


def next_start(state: ThrottleState, key: str, throttle: Throttle) -> datetime | None:
    """The instant a run of ``key`` may start, from the starts marked (None: it may now, as far as
    they go; marks are pruned as time passes, so an instant already past means the same)."""
    marks = state.starts.get(key)
    if not marks:
        if len(state.starts) < MAX_THROTTLE_MARKS:
            return None
        first = next(iter(state.starts.values()))  # the key whose newest start is the oldest
        return (first[-1][0] if first else datetime.min.replace(tzinfo=UTC)) + throttle.per
    leave = sum(n for _, n in marks) - throttle.runs + 1  # starts that must leave the window first
    if leave <= 0:
        return None
    for at, n in marks:
        leave -= n
        if leave <= 0:
            return at + throttle.per
    return None  # not reached: the marks hold at least `leave` starts


# ---------------------------------------------------------------------------- the lines
def behind(state: ThrottleState, run: RunRecord) -> bool:
    """Whether other runs of its key wait ahead of ``run``: then it waits behind them, in order."""
    line = state.lines.get(key_of(run))
    return line is not None and len(line) > 0 and line[0] != run.run_key


def wait(state: ThrottleState, run: RunRecord) -> None:
    """``run`` waits for room in its key's window, at the end of its line (unless in it already)."""
    line = state.lines.setdefault(key_of(run), [])
    if run.run_key not in line:
        line.append(run.run_key)


def leave(state: ThrottleState, run: RunRecord) -> None:
    """``run`` no longer waits for the throttle (it starts, ends or is dropped)."""
    key = key_of(run)
    line = state.lines.get(key)
    if not line:
        return
    if line[0] == run.run_key:
        line.pop(0)
    elif run.run_key in line:
        line.remove(run.run_key)
    if not line:
        del state.lines[key]


def waiting(state: ThrottleState) -> int:
    """Runs waiting for the throttle."""
    return sum(len(line) for line in state.lines.values())


def reason(state: ThrottleState, throttle: Throttle, run: RunRecord) -> str:
    """Why a run waits for the throttle (the run's ``waiting_for``)."""
    key = "" if run.throttle_key is None else f" for its key {run.throttle_key[:60]}"
    if key_of(run) not in state.starts and len(state.starts) >= MAX_THROTTLE_MARKS:
        return (f"throttle: {len(state.starts):,} keys have started runs in their windows, the most it keeps; "
                "it starts when one of them leaves its window")
    return f"throttle: at most {throttle.runs} run(s) start per {per_text(throttle)}{key}; it starts when the window has room"


def per_text(throttle: Throttle) -> str:
    """``per`` as an operator writes it (``1m``, ``90s``, ``1d``)."""
    seconds = int(throttle.per.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{throttle.per.total_seconds():g}s"
