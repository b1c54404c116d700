"""`wfi state`: query an activation and show its state.

Default: a readable view (status, entries, counters, schedules, polls, then queue heads,
unfinished runs and the last 10 initiation errors). `--summary` queries only the summary;
`--events` adds every live dedup entry (fetched in pages), which is how the disposition of a
`deliver --signal` is read; `--redrivable` lists every event the activation keeps for re-drive
(`wfi operate redrive`): invalid deliveries, quarantined poll items, start faults and deferred signals,
each with its number (fetched in pages); `--deferred-signals` lists the deferred signals alone; `--json`
prints the query result. Exit status: 0, or 1 when there is no activation of that name, no worker
answers, or Temporal is unreachable.
"""

from __future__ import annotations

import argparse
from typing import Any

from wf_initiation.cli import EXIT_OK
from wf_initiation.cli._common import add_request_flags, emit, load, request
from wf_initiation.core.limits import CAPACITY_WARNING


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `state`."""
    p = subparsers.add_parser(
        "state", help="show an activation's state (or --summary)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    add_request_flags(p)
    p.add_argument("--workflow", required=True, metavar="NAME", help="Workflow identity (the Workfile's name).")
    p.add_argument("--summary", action="store_true", help="Only the short summary.")
    p.add_argument("--events", action="store_true",
                   help="Also every live dedup entry (delivery id, disposition, run), fetched in pages.")
    kept = p.add_mutually_exclusive_group()
    kept.add_argument("--redrivable", action="store_true",
                      help="Only the events kept for re-drive (`wfi operate redrive`), each shard's, by number "
                      "(all, fetched in pages).")
    kept.add_argument("--deferred-signals", action="store_true",
                      help="Only the deferred signals (all, fetched in pages): `wfi deliver --redrive ID` re-drives one.")
    p.set_defaults(handler=_state, exit_hard=True)


def _state(args: argparse.Namespace) -> int:
    deployment = load(args.deployment)

    if args.deferred_signals:
        return _deferred_signals(args, deployment)
    if args.redrivable:
        return _redrivable(args, deployment)

    async def read(wfi: Any) -> Any:
        if args.summary:
            return await wfi.summary(args.workflow)
        return await wfi.state(args.workflow, include_events=args.events)

    data = request(args, deployment, read, workflow=args.workflow)
    emit(data, render_state(data if args.summary else data["summary"], None if args.summary else data), args.json)
    return EXIT_OK


def _deferred_signals(args: argparse.Namespace, deployment: Any) -> int:
    from wf_initiation._redrive import deferred_signals

    async def read(wfi: Any) -> list[dict[str, Any]]:
        return [{"shard": shard, **signal} async for shard, signal in deferred_signals(wfi, args.workflow)]

    listed = request(args, deployment, read, workflow=args.workflow)
    lines = [f"{args.workflow}: {len(listed)} deferred signal(s); deliver one again with `wfi deliver --redrive ID "
             f"--workflow {args.workflow}`"]
    lines += [f"  {s['entry']}  {s['delivery_id']}  shard {s['shard']}  at {s['at']}  run {s['run_id']}  {s.get('reason') or ''}"
              for s in listed]
    emit(listed, "\n".join(lines), args.json)
    return EXIT_OK


def _redrivable(args: argparse.Namespace, deployment: Any) -> int:
    async def read(wfi: Any) -> list[dict[str, Any]]:
        return [event async for event in wfi.redrivable(args.workflow)]

    listed = request(args, deployment, read, workflow=args.workflow)
    emit(listed, render_redrivable(args.workflow, listed), args.json)
    return EXIT_OK


def render_redrivable(workflow: str, listed: list[dict[str, Any]]) -> str:
    """One line per event kept for re-drive: number, kind, entry/delivery id, when, until when, why."""
    lines = [f"{workflow}: {len(listed)} event(s) kept for re-drive; once the cause is fixed: `wfi operate redrive "
             f"--workflow {workflow} --delivery-id ID` (or --first N --last M, --kind K, --all-events)"]
    for e in listed:
        ident = e["delivery_id"] if e.get("delivery_id") else "(no delivery id)"
        shard = f" shard {e['shard']}" if e.get("shard") else ""
        until = f" until {e['kept_until']}" if e.get("kept_until") else f" (signal in run {e.get('run_id')})"
        run = f" run {e['run_key']}" if e.get("run_key") else ""
        tries = f" (tried {e['tries']}x)" if e.get("tries") else ""
        lines.append(f"  #{e['number']}{shard} {e['kind']} {e['entry']}/{ident} at {e['at']}{until}{run}{tries}: "
                     f"{e.get('reason') or ''}")
    return "\n".join(lines)


def render_state(summary: dict[str, Any], full: dict[str, Any] | None) -> str:
    """A readable view: the summary, then (full state) queues, unfinished runs, recent errors, dedup entries."""
    c = summary.get("counters", {})
    lines = [
        f"{summary['workflow']}  activation {summary['activation_id']}  [{summary['status']}]",
        "  entries: " + ", ".join(f"{e['name']} ({e['connector']})" for e in summary.get("entries", [])),
        f"  deliveries {c.get('deliveries', 0)}, runs started {c.get('runs_started', 0)}, running "
        f"{summary.get('runs_running', 0)}, pending {summary.get('runs_pending', 0)}, dedup ids "
        f"{summary.get('dedup_entries', 0)}, errors {sum(summary.get('error_counts', {}).values())}",
    ]
    lines += _capacity_line(summary)
    lines += _throttle_line(summary.get("throttle"))
    if summary.get("closed"):
        closed = summary["closed"]
        lines.append(f"  the activation workflow was {closed['status'].replace('_', ' ')} at {closed['at']} (run "
                     f"{closed['run_id']}); it serves nothing until `wfi activate WORKFILE` starts it again")
    deactivation = summary.get("deactivation") or {}
    if deactivation.get("note"):  # e.g. a cancellation request (docs/operator-view.md)
        lines.append(f"  deactivation: {deactivation['note']}")
    if summary.get("previous_activations"):
        lines.append(f"  previous activations: {', '.join(summary['previous_activations'])}")
    lines += _shard_lines(summary.get("shards"))
    lines += _growth_lines(summary.get("growth"))
    lines += _stopped_lines(summary.get("shards_not_running"))
    for name, s in summary.get("schedules", {}).items():
        lines += _schedule_lines(name, s)
    for name, p in summary.get("polls", {}).items():
        cursor = f"cursor {p['cursor']!r}" if p.get("cursor") is not None else "no cursor yet (reads from the start)"
        paused = (f" (paused: {p['note']})" if p.get("note") else " (paused)") if p.get("paused") else ""
        flags = paused + (" HELD ITEM: operator action needed" if p.get("held") else "")
        failing = f" failing ({p['failures']}): {p['last_error']}" if p.get("failures") else ""
        lines.append(f"  poll {name}: {cursor}{flags}{failing}")
    if full is not None:
        lines += _full_lines(full)
    return "\n".join(lines)


def _schedule_lines(name: str, s: dict[str, Any]) -> list[str]:
    """``  schedule nightly: next 2026-12-02T02:00:00+00:00 (admitted at ...: jitter) (paused: ...)`` and
    what its options did: the note of its last pause or resume, runs remaining, runs triggered."""
    when = f"next {s['next']}" if s.get("next") else "no next occurrence"
    if s.get("next_at"):
        when += f" (admitted at {s['next_at']}: jitter)"
    paused = (f" (paused at {s.get('paused_at')}: {s['note']})" if s.get("note") else " (paused)") if s.get("paused") else ""
    reason = f" (inactive: {s['inactive_reason']})" if s.get("inactive_reason") else ""
    lines = [f"  schedule {name}: {when}{paused}{reason}"]
    if not s.get("paused") and s.get("resumed_at") and s.get("note"):
        lines.append(f"    resumed at {s['resumed_at']}: {s['note']}")
    if s.get("run_limit") is not None:
        lines.append(f"    remaining runs: {s.get('remaining_runs')} of {s['run_limit']} (remaining_runs)")
    for t in s.get("triggers") or []:
        lines.append(f"    triggered at {t['at']} by {t['action_id']}: {t['disposition']}, run {t.get('run_key')}")
    return lines


def _capacity_line(summary: dict[str, Any]) -> list[str]:
    """``  capacity 12% full (123 KiB of 1.0 MiB carried, 812 dedup ids; at capacity: refuse)``."""
    cap = summary.get("capacity")
    if not isinstance(cap, dict) or not isinstance(cap.get("fill"), int | float):
        return []
    fullest = " on the fullest shard" if isinstance(summary.get("shards"), list) else ""
    warn = " WARNING: near capacity (docs/limits.md)" if cap["fill"] >= CAPACITY_WARNING else ""
    return [f"  capacity {cap['fill']:.0%} full{fullest} ({_size(cap.get('estimated_state_bytes', 0))} of "
            f"{_size(cap.get('capacity_bytes', 0))} carried, {cap.get('retained_ids', 0):,} dedup ids; at capacity: "
            f"{cap.get('policy', 'refuse')}){warn}"]


def _throttle_line(throttle: Any) -> list[str]:
    """``  throttle: at most 5 run(s) per 1m per key {{ o.customer }}: 12 waiting (3 keys), next start at ...``."""
    if not isinstance(throttle, dict):
        return []
    key = f" per key {throttle['key']}" if throttle.get("key") else ""
    count = throttle.get("keys_waiting", 0)
    keys = f" ({count} key{'s' if count != 1 else ''})" if throttle.get("key") else ""
    upcoming = throttle.get("next_start_at")
    when = f", next start at {upcoming}" if upcoming else ", a run may start now"
    return [f"  throttle: at most {throttle.get('runs')} run(s) per {throttle.get('per')}{key}: "
            f"{throttle.get('waiting', 0)} waiting{keys}{when}"]


def _size(n: int) -> str:
    return f"{n / 1024:,.0f} KiB" if n < 1024 * 1024 else f"{n / (1024 * 1024):,.1f} MiB"


def _shard_lines(shards: Any) -> list[str]:
    """A sharded activation: its shard count, and each shard's part in a split going on."""
    if not isinstance(shards, list):
        return []
    fills = [(p.get("shard"), p["capacity"]) for p in shards if isinstance(p.get("capacity"), int | float)]
    lines = [f"  shards: {len(shards)}" + (" · fill per shard: " + " · ".join(f"{k} {f:.0%}" for k, f in fills) if fills else "")]
    for part in shards:
        lines += _lane_lines(part)
        split = part.get("split")
        if not split:
            continue
        k, n = part.get("shard"), split.get("from_shards")
        if isinstance(k, int) and isinstance(n, int) and k >= n:
            lines.append(f"  shard {k}: new in the split from {n} shards; asks shard {k % n} about ids it does not know")
        elif split.get("drained"):
            lines.append(f"  shard {k}: split from {n} shards, drained")
        elif split.get("drain_after"):
            lines.append(f"  shard {k}: split from {n} shards; the ids it held then expire by {split['drain_after']}")
        else:
            lines.append(f"  shard {k}: split from {n} shards; runs of ids it held then are still going")
    return lines


def _growth_lines(growth: Any) -> list[str]:
    """An activation that grows itself (scale.grow_at): its bounds and its next automatic step."""
    if not isinstance(growth, dict):
        return []
    return [f"  grows itself (scale.grow_at {growth.get('grow_at', 0):.0%}, at most {growth.get('max_shards')} shards, "
            f"grown {growth.get('grown', 0)} time(s)): next: {growth.get('next')}"]


def _stopped_lines(stopped: Any) -> list[str]:
    """Shards whose workflow is not running: their ids are answered 503 until started again."""
    if not isinstance(stopped, list):
        return []
    return [f"  shard {s.get('shard')}: NOT RUNNING ({s.get('status')}"
            + (f" at {s['at']}" if s.get("at") else "") + "): its deliveries are answered 503 and its queue keys wait; "
            f"`{s.get('restart')}` starts it again with its complete state" for s in stopped]


def _lane_lines(part: dict[str, Any]) -> list[str]:
    """A shard's part in moving queue keys and batch partitions at a split (docs/deployment.md)."""
    lanes, k = part.get("lanes"), part.get("shard")
    if not isinstance(lanes, dict):
        return []
    if lanes.get("awaiting_parent") is not None:
        return [f"  shard {k}: holds every queue key and batch partition until shard {lanes['awaiting_parent']} hands "
                "over the ones still busy there"]
    lines = []
    if lanes.get("held") or lanes.get("batches_waiting"):
        lines.append(f"  shard {k}: {lanes.get('held', 0)} moved key(s)/partition(s) wait for their earlier events on "
                     f"the shard they moved from ({lanes.get('batches_waiting', 0)} closed batch(es) waiting)")
    if lanes.get("handed_over"):
        lines.append(f"  shard {k}: {lanes['handed_over']} moved key(s)/partition(s) still busy here; their new shard "
                     "is told as each ends")
    return lines


def _full_lines(full: dict[str, Any]) -> list[str]:
    lines = []
    for key, q in full.get("queues", {}).items():
        head = f"head {q['head']}" if q.get("head") else "empty"
        lines.append(f"  queue {key!r}: {q['length']} run(s), {head}")
    for run in full.get("runs", {}).values():
        lines.append(f"  run {run['run_key']}: {run['status']}"
                     + (f" (waiting for {run['waiting_for']})" if run.get("waiting_for") else ""))
    for err in full.get("errors", [])[-10:]:
        where = "/".join(str(part) for part in (err.get("entry"), err.get("delivery_id")) if part)
        lines.append(f"  error {err['kind']}{f' [{where}]' if where else ''}: {err['message']}")
    for event in full.get("events", {}).values():
        lines.append(f"  event #{event['seq']} {event['entry']}/{event['delivery_id']}: {event['disposition']}"
                     + (f" run {event['run_key']}" if event.get("run_key") else ""))
    return lines
