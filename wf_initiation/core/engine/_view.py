"""The operator's page: the markdown an activation shows as *Current Details* in the Temporal UI.

What an operator needs first, per activation: its status; what needs them, with the exact command
that resolves it; per entry the schedule (cron or interval in its zone, next and last instants),
the poll (cursor, last success, failures with their text), and the last dispositions with their
reasons; queue depths; the recent initiation errors with their text and what to do about them.
Every instant in one zone, UTC, each labelled so (a schedule's own zone is named with its cron).

Bounded: at most :data:`MAX_BYTES` (the UI fetches it with every page view and it travels through
the data converter): lists are cut to a few items, texts to :data:`TEXT_CHARS`, and the whole is
rebuilt with less detail until it fits. Never a secret: connection settings are never shown, and
every text is passed through :func:`redact` (credentials in URLs, sensitive query parameters, the
values of sensitive connection settings). Deterministic: built from the state only (no clock).
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from .. import connections, unencoded
from .._durations import format_duration
from . import _batch, _throttle
from ._schedule import due_at
from ._types import Disposition, ErrorRecord, EventRecord

MAX_BYTES = 8 * 1024
TEXT_CHARS = 160
NOTE_CHARS = 320  # an operator's note, or the run that paused a schedule (pause_on_failure): shown whole
MAX_ENTRIES = 12
DETAIL_LEVELS = (5, 3, 1, 0)  # dispositions per entry, tried in turn until the page fits
MAX_OCCURRENCES = 3  # recent occurrences shown per schedule entry
MAX_ERROR_GROUPS = 4  # recent errors, grouped by kind and entry

# A reference to the specification's clauses, "(EXT-3, EXT-4)" or "(BATCH-1..7)": the page is read by
# operators, who have no use for them (the messages keep them for `wfi state` and the logs).
_CLAUSES = re.compile(r"\s*\((?:(?:INIT|BATCH|SCHED|EXT|POLL|CAP|TRIG|COMP)-\d+(?:\.\.\d+)?(?:,\s*)?)+\)")
# An instant in a message's text (ISO-8601 with its offset): shown as every instant of the page is.
_INSTANT = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")
_URL_CREDENTIALS = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]{0,30}://[^:/@\s]*):[^@\s/]+@")
_SECRET_KEY = re.compile(r"pass|secret|token|key|credential|auth|dsn|conninfo|connection_string", re.I)
# What an operator does about an error of each kind that a sender causes (docs/webhooks.md, "Responses").
WHAT_TO_DO = {
    "conflict": "nothing changed and no second run started: the sender re-used a delivery id for another payload, and "
                "the first payload stands. A new event needs an id of its own (fix the sender); if the payloads differ "
                "only in what the sender adds per attempt, narrow what is compared (docs/webhooks.md, \"The payload\")",
    "invalid": "no run started and the id is not consumed: fix the payload at the sender (or the entry's schema in the "
               "Workfile, then `wfi activate`) and send it again, with the same delivery id",
    unencoded.REFUSED: "a sender (a bridge) signals without the team's payload codec: give it the codec (docs/wire.md, "
                       "\"Payload encoding\") and have it send those deliveries again; nothing of them was taken",
    unencoded.RECORDED: "a sender (a bridge) delivers without the team's payload codec, so its payloads are in history in "
                        "plaintext: give it the codec (docs/wire.md, \"Payload encoding\"); they were taken",
}
_REASONS = {
    Disposition.SUPPRESSED: "`when` was false",
    Disposition.SKIPPED: "overlap skip: a run was in flight",
    Disposition.DROPPED: "dropped by an operator",
}


# ---------------------------------------------------------------------------- secrets
def secrets_of(connection_settings: Iterable[dict[str, Any]]) -> list[str]:
    """Values that must never be shown: sensitive settings and passwords inside URLs, longest first."""
    found: set[str] = set()

    def walk(value: Any, sensitive: bool) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, sensitive or bool(_SECRET_KEY.search(str(k))))
        elif isinstance(value, list):
            for v in value:
                walk(v, sensitive)
        elif isinstance(value, str):
            if sensitive and len(value) >= 4:
                found.add(value)
            found.update(m.group(0).rsplit(":", 1)[-1].rstrip("@") for m in _URL_CREDENTIALS.finditer(value))

    for settings in connection_settings:
        walk(settings, False)
    return sorted((s for s in found if len(s) >= 3), key=len, reverse=True)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without credentials: known secret values and URL/DSN passwords (as everywhere in
    wf-initiation, :func:`wf_initiation.core.connections.redact`), and token-like query parameters."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, "***")
    if "://" in text or "=" in text:  # the patterns only where they can match (every page build)
        text = connections.redact(text)
    return text


def clip(text: str, secrets: Iterable[str] = (), limit: int = TEXT_CHARS, *, prose: bool = False) -> str:
    """One line, redacted, at most ``limit`` characters, safe inside a markdown code span.

    A long text keeps its start and its end (where an error usually says what went wrong). A
    ``prose`` text (a message, not an identifier) loses its references to spec clauses."""
    text = _INSTANT.sub(lambda m: utc(m.group(0).replace("Z", "+00:00")), _CLAUSES.sub("", str(text))) if prose else str(text)
    one = " ".join(redact(text, secrets).split())
    if "`" in one:
        one = one.replace("`", "'")
    if len(one) <= limit:
        return one
    head = limit // 3
    return one[:head] + " … " + one[len(one) - (limit - head - 3):]


def view_secrets(engine: Any) -> list[str]:
    return secrets_of(e.connection_settings for e in engine.spec.entries)


# ---------------------------------------------------------------------------- formatting
def utc(moment: datetime | str | None) -> str:
    """``2026-12-01 21:08:55 UTC``: the instant in UTC, to the second, labelled. The page shows every
    instant so: one zone for an operator to read (a schedule's local zone is named beside its cron)."""
    if moment is None:
        return "—"
    when = datetime.fromisoformat(moment) if isinstance(moment, str) else moment
    when = when if when.tzinfo else when.replace(tzinfo=UTC)  # never the host's zone
    return when.astimezone(UTC).isoformat(sep=" ", timespec="seconds")[:19] + " UTC"


def operate(workflow: str, action: str, *args: str) -> str:
    """The ``wfi operate`` command line resolving something, as a code span."""
    return "`" + " ".join(["wfi operate --deployment FILE --workflow", workflow, action, *args]) + "`"


# ---------------------------------------------------------------------------- the page
def markdown(engine: Any, status: str, max_bytes: int = MAX_BYTES, notes: Iterable[str] = ()) -> str:
    """The Current Details page of an activation; at most ``max_bytes`` UTF-8 bytes.

    ``notes`` are paragraphs shown right under the heading (e.g. the deactivation's progress)."""
    view = _View(engine, status, [_CLAUSES.sub("", redact(n, view_secrets(engine))) for n in notes])
    for level in DETAIL_LEVELS:
        text = view.render(level)
        if len(text.encode()) <= max_bytes:
            return text
    cut = text.encode()[: max_bytes - 80].decode(errors="ignore")
    return cut.rsplit("\n", 1)[0] + "\n\n… cut to fit: query `state` for everything"


class _View:
    def __init__(self, engine: Any, status: str, notes: list[str]) -> None:
        self.engine, self.state, self.spec, self.status, self.notes = engine, engine.state, engine.spec, status, notes
        self.secrets = view_secrets(engine)
        self.ended = {r.run_key: r.status for r in engine.recent_runs}
        self._recent: dict[str, list[str]] | None = None  # at the most detailed level, built once
        self._fixed: list[str] | None = None
        self._error_lines: list[str] | None = None

    def render(self, detail: int) -> str:
        if self._fixed is None:  # what does not depend on the level of detail, built once
            self._fixed = [self._head(), *self.notes, *self._attention()]
        blocks = [*self._fixed, *self._entries(detail), *self._errors(detail)]
        return "\n\n".join(b for b in blocks if b)

    # -------------------------------------------------------------- header and counters
    def _head(self) -> str:
        st, spec = self.state, self.spec
        c = st.counters
        running, starting = self.engine.running, self.engine.starting
        pending = len(st.runs) - running - starting
        earlier = f" · {len(st.previous_activations)} earlier" if st.previous_activations else ""
        lines = [
            f"## {spec.workflow} · {self.status.replace('_', ' ').upper()}",
            "- times in UTC",
            f"- activation `{spec.activation_id}`{earlier}; runs: `{spec.run.workflow_type}` on `{spec.run.task_queue}`",
            f"- **runs** {c.get('runs_started', 0)} started · {running} running · {starting} starting · "
            f"{pending} pending",
            f"- **deliveries** {c.get('deliveries', 0)} · duplicates {c.get('duplicates', 0)} · "
            f"**errors** {sum(st.error_counts.values())} · dedup ids {len(st.events) + len(self.engine.retired)}",
        ]
        queues = self._queues()
        if queues:
            lines.append(f"- {queues}")
        return "\n".join(lines)

    def _queues(self) -> str:
        st = self.state
        parts = []
        if st.queues:
            deepest = heapq.nlargest(3, st.queues.items(), key=lambda kv: len(kv[1]))
            shown = ", ".join(f"`{clip(k, self.secrets, 40)}` {len(v)}" for k, v in deepest)
            parts.append(f"{len(st.queues)} queue key(s), deepest: {shown}")
        if st.waiting:
            parts.append(f"{len(st.waiting)} waiting for the overlap policy `{self.spec.policies.overlap}` or the concurrency cap")
        if st.batches:
            parts.append(f"{len(st.batches)} open batch(es), {sum(len(b.events) for b in st.batches.values())} event(s)")
        throttle = self._throttle()
        queues = "**queues** " + " · ".join(parts) if parts else ""
        return "\n- ".join(x for x in (queues, throttle) if x)

    def _throttle(self) -> str:
        """``**throttle** 5 per 1m (key `{{ ... }}`) · 12 waiting (3 keys) · next start ...``."""
        policy, state = self.spec.policies.throttle, self.state.throttle
        if policy is None:
            return ""
        key = f" per key `{clip(policy.key, (), 60)}`" if policy.key else ""
        line = f"**throttle** {policy.runs} run(s) per {_throttle.per_text(policy)}{key}"
        if not state.lines:
            return line + " · none waiting"
        held = set(self.state.waiting)
        instants = [i for k, q in state.lines.items() if q[0] not in held
                    if (i := _throttle.next_start(state, k, policy)) is not None]
        keys = f" ({len(state.lines)} key{'s' if len(state.lines) != 1 else ''})" if policy.key else ""
        return (f"{line} · **{_throttle.waiting(state)} waiting**{keys}"
                + (f" · next start {utc(min(instants))}" if instants else ""))

    # -------------------------------------------------------------- needs an operator
    def _attention(self) -> list[str]:
        wf, items = self.spec.workflow, []
        for name, p in self.state.polls.items():
            if p.held is not None:
                items.append(
                    f"- poll `{name}` holds an invalid item since {utc(p.held.since)}: `{clip(p.held.reason, self.secrets, prose=True)}`  \n"
                    f"  resolve: {operate(wf, 'release_held', '--entry', name, '--choice', 'quarantine')} (or `--choice retry` once the source is fixed)")
        for name, s in self.state.schedules.items():
            for r in s.overflow:
                if r.status == "awaiting_operator":
                    items.append(
                        f"- schedule `{name}`: {r.count} missed occurrence(s) {utc(r.first)} → {utc(r.last)} "
                        f"beyond the catch-up bound  \n  resolve: {operate(wf, 'decide_overflow', '--range-id', r.range_id, '--choice', 'admit_all')} "
                        f"(or `--choice skip`, or `--choice admit_first --count N`)")
        for batch in _pending_batches(self.engine):
            items.append(
                f"- closed batch of `{batch['entry']}` ({batch['events']} events) waits: "
                f"{clip(batch['waiting_for'], (), 100, prose=True) if batch['waiting_for'] else 'admission'}  \n"
                f"  resolve: {operate(wf, 'admit_pending', '--run-key', batch['run_key'])} (or `drop_pending`)")
        paused = {n: s.note for n, s in [*self.state.schedules.items(), *self.state.polls.items()] if s.paused}
        if paused:
            noted = [f"`{n}`" + (f" ({clip(note, self.secrets, NOTE_CHARS, prose=True)})" if note else "") for n, note in paused.items()]
            items.append(f"- paused: {', '.join(noted)}  \n  resume: {operate(wf, 'resume')}")
        if not items:
            return []
        return ["### ⚠ Needs an operator\n" + "\n".join(items)]

    # -------------------------------------------------------------- entries
    def _entries(self, detail: int) -> list[str]:
        if self._recent is None:
            self._recent = self._recent_by_entry(DETAIL_LEVELS[0])
        recent = {name: lines[:detail] for name, lines in self._recent.items()} if detail else {}
        entries = self.spec.entries[:MAX_ENTRIES]
        blocks = [self._entry(e, recent.get(e.name, []), detail) for e in entries]
        if len(self.spec.entries) > MAX_ENTRIES:
            blocks.append(f"… and {len(self.spec.entries) - MAX_ENTRIES} more entries (query `summary`)")
        return blocks

    def _entry(self, entry: Any, recent: list[str], detail: int) -> str:
        lines = [f"#### `{entry.name}` · {entry.connector}"]
        if entry.name in self.state.schedules:
            lines += self._schedule(entry, detail)
        elif entry.name in self.state.polls:
            lines += self._poll(entry.name)
        lines += recent
        if len(lines) == 1:
            lines.append("- nothing yet")
        return "\n".join(lines[:1] + [line if line.startswith("- ") else f"- {line}" for line in lines[1:]])

    def _zone(self, name: str) -> str:
        try:
            return self.engine.parsed_schedule(name).timezone
        except (KeyError, ValueError):
            return "UTC"

    def _schedule(self, entry: Any, detail: int) -> list[str]:
        s = self.state.schedules[entry.name]
        zone = self._zone(entry.name)
        what = " + ".join(f"{k} `{clip(entry.config[k], (), 60)}`" for k in ("cron", "interval") if entry.config.get(k))
        policy = s.policy + (f" (bound {s.bound})" if s.bound is not None else "")
        lines = [f"{what or 'schedule'} in **{zone}** · missed: {policy}{self._options(entry.name)}"]
        if s.paused:
            lines.append(f"**paused** since {utc(s.paused_at)}" + (f": {clip(s.note, self.secrets, NOTE_CHARS, prose=True)}" if s.note else ""))
        elif not s.active:
            lines.append(f"inactive: {clip(s.inactive_reason or 'no future occurrence', self.secrets, prose=True)}")
        else:
            admitted = due_at(self.engine, entry.name, s.next_instant) if s.next_instant is not None else None
            jittered = f" (jitter: admitted {utc(admitted)[11:]})" if admitted not in (None, s.next_instant) else ""
            lines.append(f"next **{utc(s.next_instant)}**{jittered}")
        lines += self._schedule_notes(s)
        counts = ", ".join(f"{k} {v}" for k, v in sorted(s.counts.items()))
        if counts:
            lines.append(f"occurrences: {counts}")
        for i, o in enumerate(reversed(s.occurrences[-max(min(detail, MAX_OCCURRENCES), 1):])):
            fired = ""
            if o.fired_at:
                at, due = utc(o.fired_at), utc(o.scheduled_at)
                fired = f", fired {at[11:] if at[:10] == due[:10] else at}"
            run = f" ({self._run_state(o.run_key)})" if o.run_key else ""
            lines.append(f"{'last' if i == 0 else 'before'} {utc(o.scheduled_at)} → **{o.disposition}**{fired}{run}")
        return lines

    def _schedule_notes(self, s: Any) -> list[str]:
        """A resume's note, the runs remaining (remaining_runs) and the last run triggered."""
        lines = []
        if not s.paused and s.resumed_at is not None and s.note:
            lines.append(f"resumed {utc(s.resumed_at)}: {clip(s.note, self.secrets, NOTE_CHARS, prose=True)}")
        if s.run_limit is not None:
            lines.append(f"remaining runs: {max(0, s.run_limit - s.runs_counted)} of {s.run_limit}")
        if s.triggers:
            t = s.triggers[-1]
            run = f" ({self._run_state(t.run_key)})" if t.run_key else ""
            lines.append(f"triggered {utc(t.at)} → **{t.disposition}**{run}")
        return lines

    def _options(self, name: str) -> str:
        """The schedule options that change what happens (deployment `schedule:`), e.g. `` · jitter 30s``."""
        options = self.spec.policies.schedule.options(name)
        shown = [f"jitter {format_duration(options.jitter)}" if options.jitter else "",
                 "pause on failure" if options.pause_on_failure else ""]
        return "".join(f" · {part}" for part in shown if part)

    def _poll(self, name: str) -> list[str]:
        p = self.state.polls[name]
        cursor = f"`{clip(p.cursor, self.secrets, 60)}`" if p.cursor is not None else "start"
        state = "**paused**" if p.paused else ("held" if p.held else f"next {utc(p.next_poll_at)}")
        if p.note:
            state += f" ({clip(p.note, self.secrets, NOTE_CHARS, prose=True)})"
        lines = [f"cursor {cursor} · last success {utc(p.last_success_at)} · {state} · items {p.items_seen}"]
        if p.failures:
            lines.append(f"**failing** ({p.failures} in a row): `{clip(p.last_error or 'unknown error', self.secrets, prose=True)}`")
        return lines

    def _recent_by_entry(self, per_entry: int) -> dict[str, list[str]]:
        """The last dispositions of each shown entry, newest first: retained events and recorded
        errors merged. Picks first, formats only what is shown (this runs on every page build)."""
        shown = {e.name for e in self.spec.entries[:MAX_ENTRIES] if e.kind != "schedule"}
        picked: dict[str, list[tuple[datetime, Any]]] = {n: [] for n in shown}
        open_ = len(shown)
        for record in reversed(self.state.events.values()):  # acceptance order: newest last
            bucket = picked.get(record.entry)
            if bucket is None or len(bucket) >= per_entry:
                continue
            bucket.append((record.accepted_at, record))
            open_ -= len(bucket) == per_entry
            if open_ == 0:
                break
        for error in self.state.errors[-50:]:
            if error.entry in picked and error.kind in ("invalid", "conflict"):
                picked[error.entry].append((error.at, error))
        out = {}
        for name, items in picked.items():
            newest = sorted(items, key=lambda t: t[0], reverse=True)[:per_entry]
            if newest:
                out[name] = [self._event(x) if isinstance(x, EventRecord) else self._error_disposition(x) for _, x in newest]
        return out

    def _event(self, r: EventRecord) -> str:
        ident = "" if r.delivery_id.startswith("@") else f"`{clip(r.delivery_id, self.secrets, 40)}` "
        when = utc(r.accepted_at)  # a date and its zone: a time alone is ambiguous to an operator elsewhere
        reason = _REASONS.get(r.disposition)
        if r.detail and r.detail != "retired":
            reason = f"`{clip(r.detail, self.secrets, 100, prose=True)}`"
        elif r.run_key:
            reason = self._run_state(r.run_key)
        return f"{when} {ident}**{r.disposition.value}**" + (f" — {reason}" if reason else "")

    def _run_state(self, run_key: str) -> str:
        run = self.state.runs.get(run_key)
        if run is not None:
            return f"run {run.status}" + (f" ({clip(run.waiting_for, (), 100, prose=True)})" if run.waiting_for else "")
        return f"run {self.ended.get(run_key, 'ended')}"

    def _error_disposition(self, e: ErrorRecord) -> str:
        ident = f"`{clip(e.delivery_id, self.secrets, 40)}` " if e.delivery_id else ""
        # The line names the id already: an invalid one's message keeps its problems alone.
        message = e.message.removeprefix(f"delivery {e.delivery_id!r} failed validation: ")
        return f"{utc(e.at)} {ident}**{e.kind}** — `{clip(message, self.secrets, 100, prose=True)}`"

    # -------------------------------------------------------------- errors
    def _errors(self, detail: int) -> list[str]:
        """Recent initiation errors, newest kind first; repeats of a kind folded into one line."""
        if not detail or not self.state.errors:
            return []
        if self._error_lines is None:
            self._error_lines = self._error_groups()
        total = sum(self.state.error_counts.values())
        return ["\n".join([f"### Recent errors ({total} recorded)", *self._error_lines[:min(detail, MAX_ERROR_GROUPS)],
                           *self._error_lines[MAX_ERROR_GROUPS:]])]

    def _error_groups(self) -> list[str]:
        groups: dict[str, list[ErrorRecord]] = {}
        for e in reversed(self.state.errors):
            groups.setdefault(e.kind, []).append(e)
        lines = []
        for kind, found in list(groups.items())[:MAX_ERROR_GROUPS]:
            latest = found[0]
            entries = list(dict.fromkeys(e.entry for e in found if e.entry))
            where = " on " + ", ".join(f"`{n}`" for n in entries[:3]) + (" …" if len(entries) > 3 else "") if entries else ""
            times = f" ×{len(found)} recently" if len(found) > 1 else ""
            todo = f"  \n  what to do: {WHAT_TO_DO[kind]}" if kind in WHAT_TO_DO else ""
            lines.append(f"- **{kind}**{times}{where}, latest {utc(latest.at)}: `{clip(latest.message, self.secrets, prose=True)}`{todo}")
        if len(groups) > MAX_ERROR_GROUPS:
            lines.append(f"- … {len(groups) - MAX_ERROR_GROUPS} more kinds: query `state` (field `errors`)")
        return lines


def _pending_batches(engine: Any) -> list[dict[str, Any]]:
    """Closed batches an operator may want to admit or drop: not those the throttle lets start by themselves."""
    return [b for b in _batch.pending_batches(engine) if not b["throttled"]][:5]
