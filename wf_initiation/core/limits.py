"""Every size, depth and volume limit of wf-initiation, in one place, with the checks that apply them.

The client and the CLI check these before sending; the activation workflow checks them again in
its handlers (a plain Temporal client or a bridge can signal and update it directly). Each limit
keeps one thing a sender, an operator or a poll source provides from wedging an activation, and
has a row in ``docs/limits.md`` saying what happens past it.

Temporal's own limits these derive from (server defaults): one payload (an update or signal
argument, an activity input, the continue-as-new state) errors at 2 MiB; one workflow task's
completion (all its commands) is one gRPC message of at most 4 MiB, past which the server fails
the workflow (``GrpcMessageTooLarge``); a workflow task that runs longer than 2 s on the worker is
failed as a deadlock and retried with the same input.

Pure: no Temporal import, no I/O.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import timedelta
from typing import Any

from wf_initiation.errors import JsonNumberError

KIB = 1024
MIB = 1024 * 1024

# ---------------------------------------------------------------------------- one delivery
MAX_DELIVERY_BYTES = 256 * KIB
"""One payload, as compact JSON. Past it: refused by the client; ``invalid`` in the handler."""
MAX_PAYLOAD_DEPTH = 64
"""Nesting of objects and arrays in one payload (``{"a": 1}`` is 1). Past it: ``invalid``. The
pydantic data converter cannot decode ~200 levels at all, and a payload is wrapped a few levels
deeper in run inputs and the carried state."""
MAX_INT_DIGITS = 1000
"""Decimal digits of one integer in a payload. Past it: ``invalid`` (no JSON peer reads it)."""
MAX_DELIVERY_ID_CHARS = 1024
"""Characters of a delivery id. Past it: ``invalid``; records keep a digest, never the id."""
MAX_MESSAGE_CHARS = 500
"""Characters of an error message or detail kept in the state or returned; longer ones are cut."""

# ---------------------------------------------------------------------------- the HTTP ingress
ENVELOPE_BYTES = 16 * KIB
"""The JSON of an ``http.request`` payload without its body (delivery id, method, path, kept
headers, query): 431 past it. The payload limit is split in two: this for the envelope, the rest
(``MAX_BODY_BYTES``) for the body, so a body within its limit under an envelope within its own
always makes a payload within ``MAX_DELIVERY_BYTES`` (as long as the body's JSON form is no longer
than the body: true of JSON bodies re-serialised compactly, except numbers in exponent form)."""
MAX_BODY_BYTES = MAX_DELIVERY_BYTES - ENVELOPE_BYTES
"""A request body, as sent and as decoded from its content coding: 413 past it (245,760 bytes)."""
MAX_UPDATES_IN_FLIGHT = 10
"""Temporal admits 10 updates in flight per workflow (``history.maxInFlightUpdates``); the ingress
keeps below it so that its own callers are queued there, not refused and retried by the server."""

# ---------------------------------------------------------------------------- many deliveries
MAX_BULK = 500
"""Deliveries in one ``deliver_many`` update. Past it: the client splits; the handler refuses."""
MAX_BULK_BYTES = 1 * MIB
"""Bytes of one ``deliver_many`` update argument. Past it: the client splits; the handler refuses."""

# ---------------------------------------------------------------------------- what the activation holds
MAX_BATCH_BYTES = 512 * KIB
"""Payload bytes of one open batch: the batch closes early (before ``size``) when the next event
would take it past this, so a batch's run input stays far below the 2 MiB payload limit."""
MAX_HELD_BYTES = 1 * MIB
"""Payload bytes the activation holds for runs not started yet (queued or waiting runs, open
batches, a held poll item, subscription deliveries in flight). A delivery that would take it past
this is ``deferred``: nothing consumed, deliver it again later."""
MAX_CARRIED_STATE_BYTES = 1536 * KIB
"""The continue-as-new state (compressed). Over it the activation does not continue-as-new: it
records a ``carry_over_limit`` error, defers deliveries until the state fits and tries again."""
CARRY_RETRY_EVENTS = 200
"""History events between two attempts to continue-as-new while the state is over its limit."""
CAPACITY_BYTES = 1344 * KIB
"""What the activation lets its carried state grow to (7/8 of ``MAX_CARRIED_STATE_BYTES``, the rest
a margin for the estimate): its *capacity*. The state is estimated from what it holds (retained
delivery ids, their records, payloads held for runs not started yet) with the constants below, which
bound the measured encoding from above. At capacity a new delivery id is deferred, or the oldest
released ids are shed (the deployment's ``at_capacity`` policy), so continue-as-new always fits."""
BYTES_PER_RETIRED_ID = 16
"""A released dedup entry in the compact form (measured 14-15 bytes at 10k-100k ids)."""
BYTES_PER_LIVE_RECORD = 32
"""A dedup entry kept as a full record (a run not ended, or among the 500 most recent released):
measured 21-25 bytes compressed with 36-character ids. Longer ids compress less: should the estimate
fall short, continue-as-new sheds the oldest released ids until the state fits (recorded)."""
STATE_BASE_BYTES = 24 * KIB
"""Everything else the state carries (schedules, polls, errors, operator log), at most."""
CAPACITY_WARNING = 0.8
"""Fill level (estimated state / capacity) past which the activation warns: an error record
``capacity_warning``, a line on the operator page, the ``wfi.capacity.fill`` gauge (again after it fell below 0.7)."""
GROW_CHECK_EVERY = timedelta(minutes=1)
"""How often shard 0 of an activation that grows itself (``scale.grow_at``) asks every shard how full
it is (one activity of queries; core/engine/_growth.py)."""
MAX_SIGNALS_PER_RUN = 9000
"""Signals one activation run takes before it continues as new (Temporal refuses a run's 10,001st
signal, ``history.maximumSignalsPerExecution``)."""
RECORDS_PER_RUN = 2000
"""Released dedup entries one activation run adds as full records before it continues as new: past
the 500 newest it carries as full records (``engine._ledger.KEEP_LIVE_RELEASED``) plus this many, it continues as new, which retires the
rest into the compact form. A full record takes ~0.5 KB of the worker's memory (``EventRecord``, a
slotted dataclass, with its strings; ~1.7 KB as a model before 7 Dec 2026), a retired id ~25 bytes;
without this bound a run taking bulk deliveries (``deliver_many``, 500 an update) kept tens of
thousands (the server suggests continue-as-new only at 4 MiB of history, ~37,000 such deliveries):
~20 MB per shard, against ~2 MB for a full shard after continue-as-new."""

# ---------------------------------------------------------------------------- one workflow task
MAX_START_BYTES = 1 * MIB
"""Run inputs in one start activity's input; more runs go to further activities."""
MAX_TASK_BYTES = 2 * MIB
"""Bytes of activity inputs and signal payloads one workflow task schedules; the rest waits for
the next task (the task's completion must stay under the 4 MiB gRPC limit)."""
MAX_RUN_INPUT_BYTES = 1536 * KIB
"""One run's input. Past it the run cannot be started: recorded as a ``start_fault``."""
ADMIT_PER_TASK = 100
"""Scheduled occurrences admitted in one workflow task (backfill, overflow decisions, catch-up):
larger operator actions continue over the following tasks. Measured inside the workflow sandbox
on a loaded 2-core machine: ~2.5 ms per admitted occurrence, ~0.4 ms per enumerated one; a task
must stay far below the worker's 2 s deadlock timeout."""
DELIVERIES_PER_TASK = 300
"""Deliveries (updates, ``deliver_many`` items, signals, lifecycle events) one workflow task takes:
the rest wait in the activation's inbox, in arrival order, for the next task (workflows/_inbox.py;
~0.15-2 ms a delivery in the sandbox, quiet to loaded 2-core machine)."""
MAX_WAITING_SIGNALS = 1000
"""Signalled deliveries one activation keeps waiting in its workflow's memory (rebuilt from history
on replay) while its held-bytes budget has no room; past it the oldest is deferred and listed
(``MAX_DEFERRED_SIGNALS``). Those still waiting at continue-as-new are carried as references to
their signals in the run's history and taken first by the next run (``workflows/_inbox.py``)."""
MAX_WAITING_BYTES = 8 * MIB
"""Payload bytes of the signalled deliveries kept waiting (see ``MAX_WAITING_SIGNALS``)."""
MAX_DEFERRED_SIGNALS = 2500
"""Signalled deliveries deferred anyway (past the waiting bounds, at capacity, while the state is
over its carry limit) that the activation lists, each with a reference to its signal in its run's
history, until the id is delivered again or re-driven (``wfi operate redrive``): ``deferred_signal``. Past it a
deferred signal is only counted (``counters.deferred_signals_unlisted``, one error). Listed at
capacity too: their references are not counted against capacity but held in its margin (measured
44 bytes each compressed with 36-character ids: 2,500 take ~110 KiB of the 192 KiB margin)."""
BYTES_PER_SIGNAL_REF = 128
"""A carried reference to a waiting signal (entry, delivery id, digest, run id, time) in the
capacity estimate (measured 44 bytes compressed with 36-character ids; longer ids take more)."""
MAX_RECOVER_BYTES = 1 * MIB
"""Payload bytes of carried waiting signals one recovery activity reads back from history."""
ENUMERATE_PER_TASK = 1000
"""Schedule occurrences enumerated in one workflow task (a long outage under ``skip``, counting a
backfill's range)."""

# ---------------------------------------------------------------------------- the throttle
MAX_THROTTLE_MARKS = 10_000
"""Start marks (an instant and how many runs of one throttle key started then) the throttle keeps
across its keys (core/engine/_throttle.py). Past it a key's two oldest marks merge into the later
one: those runs count as started later, so a later run may wait longer than the window requires,
never less. With this many keys holding one mark each, a run of another key waits until one of
them leaves its window."""
MAX_THROTTLE_KEY_CHARS = 200
"""A throttle key's canonical text kept as it is; a longer one is kept as its digest."""
BYTES_PER_THROTTLE_MARK = 16
"""A start mark in the capacity estimate (measured 7-10 bytes compressed: 10,000 marks ~100 KB),
each key's text counted besides."""

# ---------------------------------------------------------------------------- operators
MAX_BACKFILL = 10_000
"""Occurrences in one backfill range. Past it: refused; split the range."""
MAX_ACTION_ID_CHARS = 256
"""An operator ``action_id`` or a caller's ``update_id``. Past it: refused."""
MAX_REDRIVE_KEPT = 100
"""Events that did not run kept for re-drive (``wfi operate redrive``): invalid deliveries and
quarantined poll items with their payloads, start faults with their runs' inputs. Past it the
oldest kept one is let go (``counters.redrive_evicted``). Each is kept for the workflow's
``dedup_retention`` from when it was kept. Deferred signals are listed apart (``MAX_DEFERRED_SIGNALS``)."""
MAX_REDRIVE_KEPT_BYTES = 256 * KIB
"""Payload bytes (a start fault: its run input's) of the events kept for re-drive, together; the
oldest are let go to make room, and one larger than this alone is not kept (``counters.redrive_not_kept``).
Counted in the activation's capacity."""
BYTES_PER_KEPT_EVENT = 256
"""What an event kept for re-drive carries besides its payload (ids, reason, times), in the capacity estimate."""
MAX_REDRIVE_PER_ACTION = 100
"""Events one ``redrive`` action offers again (and deferred signals' payloads it carries); a larger
selection is worked off in pages, each an action of its own (``WfiClient.redrive`` pages it)."""
MAX_REDRIVE_REQUEST_BYTES = 1 * MIB
"""Payload bytes of the deferred signals one ``redrive`` action carries (read back from history by
the client). Past it: refused before sending; ``WfiClient.redrive`` makes smaller pages."""
MAX_OPERATOR_TEXT_CHARS = 1024
"""Any other text field of an operator action (note, entry, run key, range id, instants)."""
MAX_CURSOR_CHARS = 64 * KIB
"""A cursor set by an operator. Past it: refused. Cursor logs keep a digest of longer cursors."""
MAX_CURSOR_LOG_CHARS = 256
"""Characters of a cursor kept verbatim in the cursor-change log; longer ones are kept as a digest."""
MAX_POLL_RETRY_AFTER = timedelta(hours=24)
"""The longest wait a failing poll source can ask for (HTTP ``Retry-After``): the next poll waits at
least what it asked, up to this, even past the deployment's ``poll.backoff_max``."""
MAX_POLL_NOTICES = 8
"""Notices one poll response may record (``poll_notice`` errors: a mailbox's UIDVALIDITY changed); the rest are dropped."""

# ---------------------------------------------------------------------------- subscriptions
MAX_SUBSCRIPTIONS = 1000
"""Active subscriptions per activation. Past it: the subscription is refused (the run is told)."""
MAX_MATCH_BYTES = 2 * KIB
"""A subscription's ``match`` as JSON. Past it: refused."""
MAX_WORKFLOW_ID_CHARS = 1000
"""A workflow id (Temporal's own limit); a subscription id may add a run id and a counter."""

# ---------------------------------------------------------------------------- queries
MAX_QUERY_BYTES = 2 * MIB
"""A query result (``state``); past it lists are trimmed and the trim is reported (gRPC: 4 MiB)."""

_INT_BITS = math.ceil(MAX_INT_DIGITS * math.log2(10))
_INT_CAP = 10**MAX_INT_DIGITS
# Python turns at most 4,300 digits into text (sys.int_info.default_max_str_digits): past that a
# digest of the payload cannot even be computed. The legacy bound of runs begun before the budgets.
LEGACY_INT_DIGITS = 4300


def json_problem(value: Any, *, max_depth: int = MAX_PAYLOAD_DEPTH, max_int_digits: int = MAX_INT_DIGITS) -> str | None:
    """Why ``value`` is not a plain JSON value within the limits, or None.

    Iterative (no recursion limit to hit): objects with string keys, arrays, strings that encode
    as UTF-8 (no lone surrogates), finite numbers, integers of at most ``MAX_INT_DIGITS`` digits,
    booleans and null, nested at most ``max_depth`` levels.

    Dispatches on ``type()``, not ``isinstance``: inside the workflow sandbox ``isinstance`` is a
    wrapped builtin costing tens of microseconds a call, and a 256 KiB payload has ~100k values.
    A node's path is only spelled out for the message.
    """
    stack: list[tuple[Any, int, Any]] = [(value, 0, None)]
    while stack:
        item, depth, path = stack.pop()
        kind = type(item)
        if kind is dict or kind is list or kind is tuple:
            if depth + 1 > max_depth:
                return f"{_where(path)}: nested more than {max_depth} levels deep (the limit); flatten the payload"
            if kind is dict:
                for key, child in item.items():
                    if type(key) is not str:
                        return f"{_where(path)}: object key {key!r} is not a string"
                    if not key.isascii() and not is_utf8_text(key):
                        return f"{_where(path)}: an object key contains a lone surrogate (not valid Unicode text)"
                    if not _plain_scalar(child):
                        stack.append((child, depth + 1, (path, key)))
            else:
                stack.extend((child, depth + 1, (path, i)) for i, child in enumerate(item) if not _plain_scalar(child))
        elif problem := _scalar_problem(item, max_int_digits):
            return f"{_where(path)}: {problem}"
    return None


_SIMPLE = frozenset({bool, type(None)})


def _plain_scalar(item: Any) -> bool:
    """True for the common scalars that need no further look: the walk skips them."""
    kind = type(item)
    if kind is str:
        return item.isascii()
    if kind is int:
        return item.bit_length() < _INT_BITS - 4
    if kind is float:
        return math.isfinite(item)
    return kind in _SIMPLE


def _where(path: Any) -> str:
    parts: list[str] = []
    while path is not None:
        path, key = path
        parts.append(str(key)[:40])
    return "/".join(["payload", *reversed(parts)])


def _scalar_problem(item: Any, max_int_digits: int = MAX_INT_DIGITS) -> str | None:
    """Numbers (and, for a subclass of a JSON type, what it is) - the rare, slower path."""
    if isinstance(item, bool):
        return None
    if isinstance(item, int):
        if item.bit_length() < _INT_BITS - 4:  # the cheap test first
            return None
        cap = _INT_CAP if max_int_digits == MAX_INT_DIGITS else 10**max_int_digits
        return None if abs(item) < cap else f"an integer has more than {max_int_digits} digits"
    if isinstance(item, float):
        return None if math.isfinite(item) else f"{item!r} is not a JSON number (NaN and infinities have no JSON form)"
    if isinstance(item, str):
        return None if is_utf8_text(item) else "a string contains a lone surrogate (not valid Unicode text)"
    if isinstance(item, (dict, list, tuple)):
        return f"{type(item).__name__} is not a plain JSON object or array"
    return f"{type(item).__name__} is not a JSON value"


def is_utf8_text(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (it holds no lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def json_size(value: Any) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON (what the data converter sends, near enough).

    A measure, never a check: values JSON has no form for are measured by their text."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str).encode("utf-8", "replace"))


def strict_json(text: str, *, max_int_digits: int = MAX_INT_DIGITS) -> Any:
    """Parse JSON text by JSON's own number rules: the one parser of the CLI, the ingress and the engine.

    Python's ``json`` takes ``NaN`` and ``Infinity`` (JSON has neither), turns ``1e999`` into an
    infinity, and converts an integer of any length (past 4,300 digits it fails with a message
    that reads like "not JSON"); each is refused here, integers by their digits before conversion.

    Raises:
        JsonNumberError: a number JSON text may not hold (``kind``: ``constant``, ``range`` or
            ``digits``); its message names it.
        ValueError: the text is not JSON (``json.JSONDecodeError``).
    """
    def no_constant(name: str) -> Any:
        raise JsonNumberError(f"{name} is not a JSON number", text=name, kind="constant")

    def finite(number: str) -> float:
        parsed = float(number)
        if not math.isfinite(parsed):
            raise JsonNumberError(f"{number[:40]} is out of the range of a JSON number (a double)", text=number, kind="range")
        return parsed

    def bounded(number: str) -> int:
        digits = len(number.lstrip("-"))
        if digits > max_int_digits:
            raise JsonNumberError(f"an integer of more than {max_int_digits} digits: send such a number as a string",
                                  text=number, kind="digits", digits=digits)
        return int(number)

    return json.loads(text, parse_constant=no_constant, parse_float=finite, parse_int=bounded)


def nesting_depth(value: Any, *, stop_past: int | None = None) -> int:
    """Levels of arrays and objects in a JSON value (a scalar is 0, ``[]`` is 1), without recursion
    (so without a limit of its own).

    Args:
        value: A parsed JSON value.
        stop_past: Stop once a level deeper than this is found (the result is then ``stop_past + 1``).
    """
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth + 1)
        if stop_past is not None and deepest > stop_past:
            return deepest
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def length_problem(what: str, text: str, limit: int) -> str | None:
    """Why ``text`` is too long (``"<what> has <n> characters; the limit is <limit>"``), or None.

    The one wording of an identifier or text field over its limit: update ids at the client, action
    ids and operator fields, delivery ids in the engine.
    """
    return f"{what} has {len(text)} characters; the limit is {limit}" if len(text) > limit else None


def payload_size_problem(size: int, what: str = "the payload") -> str | None:
    """Why a payload of ``size`` bytes (compact JSON) is too large to deliver, or None.

    Args:
        size: The payload's size (``json_size``).
        what: How the message names the payload (the CLI names where it came from).
    """
    if size <= MAX_DELIVERY_BYTES:
        return None
    return (f"{what} is {size} bytes; the limit is {MAX_DELIVERY_BYTES}: send a reference (URL, object key) "
            "instead of the content")


def digest_text(text: str) -> str:
    """A short, stable stand-in for an over-long text: ``sha256:<32 hex>(<n> chars)``."""
    return f"sha256:{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:32]}({len(text)} chars)"


def retained_id(ident: str | None, limit: int = MAX_DELIVERY_ID_CHARS) -> str | None:
    """An identity as it may be kept in a record: itself, or its digest when longer than ``limit``
    or not valid Unicode text."""
    if ident is None or (len(ident) <= limit and is_utf8_text(ident)):
        return ident
    return digest_text(ident)


def clip(text: str | None, limit: int = MAX_MESSAGE_CHARS) -> str | None:
    """``text`` cut to ``limit`` characters (with a note of how much was cut), made valid UTF-8."""
    if text is None:
        return None
    if not is_utf8_text(text):
        text = text.encode("utf-8", "replace").decode("utf-8")
    if len(text) <= limit:
        return text
    # The middle goes: a message quoting a huge value keeps its start and what it says about it
    # (jsonschema: "'xxxx…' is too long").
    keep = (limit - 40) // 2
    return f"{text[:keep]}… [{len(text) - 2 * keep} characters cut] …{text[-keep:]}"


def fit_to_bytes(data: dict[str, Any], limit: int = MAX_QUERY_BYTES) -> dict[str, Any]:
    """Trim a JSON-able query result until it is at most ``limit`` bytes, noting what was cut.

    Repeatedly halves the part that holds most of the bytes (the newest half of a list is kept, the
    first half of a mapping, the start of a string) and lists the trimmed paths under ``trimmed``.
    A result within the limit is returned unchanged.
    """
    trimmed: list[str] = []
    for _ in range(200):
        if json_size(data) <= limit:
            break
        found = _largest(data, [])
        if found is None:
            break
        parent, key, path = found
        node = parent[key]
        if isinstance(node, list):
            parent[key] = node[len(node) // 2 :]
        elif isinstance(node, dict):
            parent[key] = dict(list(node.items())[: len(node) // 2])
        else:
            parent[key] = clip(node, max(len(node) // 2, 200))
        trimmed.append("/".join(path))
    if trimmed:
        data["trimmed"] = sorted(set(trimmed))
    return data


def _largest(root: Any, path: list[str]) -> tuple[Any, Any, list[str]] | None:
    """(parent, key, path) of the node to trim: descend while one child holds most of the bytes; trim
    the container where the bytes spread over many children, or the long string they lead to."""
    parent, key, node, at_root = None, None, root, True
    while True:
        if isinstance(node, str):
            return (parent, key, path) if len(node) > 400 else None
        if not isinstance(node, (dict, list)) or not node:
            return None
        items = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
        sizes = [(json_size(v), k) for k, v in items]
        size, biggest = max(sizes, key=lambda sk: sk[0])
        spread = len(items) > 1 and size * 2 <= sum(s for s, _ in sizes)
        if spread and not at_root:
            return parent, key, path
        parent, key, node, at_root, path = node, biggest, node[biggest], False, [*path, str(biggest)]
        if spread and isinstance(node, (dict, list)) and len(node) > 1:
            return parent, key, path  # at the top: trim its largest part
