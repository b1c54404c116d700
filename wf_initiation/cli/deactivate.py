"""`wfi deactivate`: stop an activation accepting, settle its queued work, and let it complete.

Reference: ``docs/cli.md`` (section ``wfi deactivate``) and ``docs/lifecycle.md``. Talks to
Temporal, so marked ``exit_hard`` like the other client commands (sdk-python#300).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from wf_initiation.cli import EXIT_FAILED, EXIT_OK, UserError
from wf_initiation.cli._common import add_request_flags, emit, load, progress, request
from wf_initiation.wire import DeactivatedResult, DeactivateRequest

RUNNING_CHOICES = ("leave", "cancel", "terminate")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``deactivate`` to ``wfi``."""
    p = subparsers.add_parser(
        "deactivate", help="deactivate an activation: refuse deliveries, stop schedules and polls, settle queued work",
        description="Deactivate the activation of a workflow: from now on it refuses deliveries (disposition "
        "'deactivated'), its schedules and polls stop, and its queued work drains (--drain) or is dropped "
        "(--cancel-queued). Once nothing is left to settle the activation workflow completes; its final state "
        "stays readable with `wfi state`, and `wfi activate` starts it again from that state (`wfi help lifecycle`).",
    )
    add_request_flags(p)
    p.add_argument("--workflow", required=True, metavar="NAME", help="Workflow identity (the Workfile's name).")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--drain", dest="queued", action="store_const", const="drain",
                      help="Queued runs and open batches start and finish first (batches close at their max_wait).")
    mode.add_argument("--cancel-queued", dest="queued", action="store_const", const="cancel",
                      help="Drop queued runs and open batches (recorded as dropped).")
    p.add_argument("--running", choices=RUNNING_CHOICES, default="leave",
                   help="Runs already running: leave them alone (default), or cancel / terminate them and wait "
                   "for their outcomes (needs --cancel-queued).")
    p.add_argument("--note", metavar="TEXT", help="Why: recorded with the deactivation.")
    p.add_argument("--action-id", metavar="ID", help="Makes the deactivation once-only, also across continue-as-new "
                   "and a later re-activation.")
    p.add_argument("--wait", action="store_true", help="Wait (within --timeout) until the activation has completed.")
    # --running cancel/terminate needs --cancel-queued: a rule between two flags that argparse cannot
    # declare, reported through the parser's own usage error.
    p.set_defaults(handler=_deactivate, exit_hard=True, usage_error=p.error)


def _deactivate(args: argparse.Namespace) -> int:
    if args.queued == "drain" and args.running != "leave":
        args.usage_error("--drain lets every run finish; to cancel or terminate running runs use "
                         f"--cancel-queued --running {args.running}")
    deployment = load(args.deployment)
    deactivate = DeactivateRequest(queued=args.queued, running=args.running, note=args.note, action_id=args.action_id)
    started = time.monotonic()

    async def go(wfi: Any) -> tuple[str, dict[str, Any]]:
        closed = await _closed(wfi, args.workflow)
        if closed is not None:
            return closed
        result = await _send(wfi, args.workflow, deactivate)
        if isinstance(result, tuple):
            return result  # it completed between the two calls
        data = {"workflow": args.workflow, **result.model_dump(mode="json")}
        if not result.ok or not args.wait or result.status != "deactivating":
            return ("refused" if not result.ok else result.status), data
        if not args.json:
            print(_human(args, "deactivating", data), flush=True)
        # Leave a moment of the whole command's --timeout to report "still deactivating" in.
        left = max(args.timeout - (time.monotonic() - started) - 1.0, 0.1)
        final = await _wait(wfi, args, left)
        if final is None:
            return "still_deactivating", data
        return "deactivated", _final(args.workflow, final)

    outcome, data = request(args, deployment, go, workflow=args.workflow)
    emit({**data, "outcome": outcome}, _human(args, outcome, data), args.json)
    return EXIT_OK if outcome in ("deactivating", "deactivated", "already_deactivated", "not_running", "active") else EXIT_FAILED


PROGRESS_EVERY = 1.0  # seconds between two reads of what is left to settle


async def _wait(wfi: Any, args: argparse.Namespace, seconds: float) -> DeactivatedResult | None:
    """The activation's final result once it completes, showing what is left to settle whenever that
    changes; None after ``seconds``."""
    loop = asyncio.get_running_loop()
    deadline, shown = loop.time() + seconds, ""
    result = asyncio.ensure_future(wfi.deactivated(args.workflow))  # every shard of it
    try:
        while True:
            done, _ = await asyncio.wait([result], timeout=max(min(PROGRESS_EVERY, deadline - loop.time()), 0))
            if done:
                final: DeactivatedResult = result.result()
                last = _control_progress({**final.deactivation, "controlled_runs": len(final.deactivation.get("controlled", {}))})
                if last and not shown.endswith(last):  # the tally it ended with, shown once even if no sample caught it
                    progress(args, "  done" + last)
                return final
            if loop.time() >= deadline:
                return None
            line = _left_line(await wfi.summary(args.workflow))
            if line != shown:
                progress(args, line)
                shown = line
    finally:
        result.cancel()


def _left_line(summary: dict[str, Any]) -> str:
    """``  left: 1 pending, 0 starting, 2 running run(s), 0 open batch(es)``, and while runs are
    cancelled or terminated (in pages, as a backfill admits them) how far that got:
    ``; cancel: 300 of 2,100 (14%): 290 applied, 10 had closed``."""
    line = (f"  left: {summary.get('runs_pending', 0)} pending, {summary.get('runs_starting', 0)} starting, "
            f"{summary.get('runs_running', 0)} running run(s), {summary.get('open_batches', 0)} open batch(es)")
    return line + _control_progress(summary.get("deactivation") or {})


def _control_progress(d: dict[str, Any]) -> str:
    total = d.get("controlled_runs", 0)
    if not total or d.get("running") not in ("cancel", "terminate"):
        return ""
    applied, closed = d.get("controls_applied", 0), d.get("controls_not_applied", 0)
    settled = min(applied + closed, total)
    return (f"; {d['running']}: {settled:,} of {total:,} ({100 * settled // total}%): {applied:,} applied, "
            f"{closed:,} had closed")


async def _closed(wfi: Any, workflow: str) -> tuple[str, dict[str, Any]] | None:
    """(outcome, data) when the activation is not running any more; None while it runs."""
    from wf_initiation.errors import ActivationNotFound

    try:
        status = await wfi.activation_status(workflow)
    except ActivationNotFound:
        raise UserError(f"there is no activation of workflow {workflow!r} to deactivate") from None
    if status == "running":
        return None
    if status == "completed":
        return "already_deactivated", _final(workflow, await wfi.deactivated(workflow))
    return "not_running", {"workflow": workflow, "status": status,
                           "message": f"the activation is not running ({status}); nothing to deactivate"}


async def _send(wfi: Any, workflow: str, request: DeactivateRequest) -> Any:
    from wf_initiation.errors import ActivationNotFound

    try:
        return await wfi.deactivate(workflow, request)
    except ActivationNotFound:
        closed = await _closed(wfi, workflow)
        if closed is not None:
            return closed
        raise


def _final(workflow: str, final: DeactivatedResult) -> dict[str, Any]:
    return {"workflow": workflow, "status": "deactivated", "activation_id": final.activation_id,
            "deactivation": final.deactivation, "summary": final.summary}


def _human(args: argparse.Namespace, outcome: str, data: dict[str, Any]) -> str:
    name = args.workflow
    if outcome in ("deactivated", "already_deactivated"):
        d = data["deactivation"]
        done = "already deactivated" if outcome == "already_deactivated" else "deactivated"
        controlled = len(d.get("controlled", {}))
        verb = "cancelled" if d["running"] == "cancel" else "terminated"
        return (f"{name}: {done} at {d['completed_at']}: {d['dropped_runs']} pending run(s) and {d['dropped_batches']} "
                f"open batch(es) dropped, {controlled} running run(s) {verb}, {d['left_running']} left running, "
                f"{d['refused']} delivery(ies) refused\n  activate it again with `wfi activate WORKFILE "
                f"--deployment {args.deployment}` (it resumes from this final state)")
    if outcome == "not_running":
        return f"{name}: {data['message']}"
    if outcome == "refused":
        return f"{name}: deactivate refused: {data['message']}"
    line = f"{name}: {data['message']}"
    remaining = {k: v for k, v in data.get("remaining", {}).items() if v}
    if outcome == "active":
        return f"{line} (action id {data.get('action_id')}); the activation was activated again since"
    if outcome == "still_deactivating":  # what it started with was printed when --wait began
        return (f"  still deactivating after {args.timeout:g}s; it goes on: follow it with "
                f"`wfi state --workflow {name} --deployment {args.deployment}`")
    left = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in remaining.items()) or "nothing"
    line += f"\n  left to settle: {left}; deliveries are refused from now on"
    return line + ("" if args.wait else "\n  it completes once that is settled (wait for it with --wait)")
