"""`wfi deliver`: deliver one external event to an activation and print its disposition.

By default a Temporal update that returns once the disposition is durable (EXT-8); the update id
is derived from the entry and the payload, so running the same command again is answered by the
first attempt. `--signal` sends a signal instead: in the activation's history when the command
returns, no disposition (read it with `wfi state --events`); the activation keeps it until it is
disposed, or lists it as deferred (up to 1,000 per shard, `wfi state --deferred-signals`; `wfi help
webhooks` has the exact contract). `--redrive ID` re-drives such a deferred signal, its payload read
back from the activation's history: the same as `wfi operate redrive --kind deferred_signal
--delivery-id ID`. The payload is checked before it is sent.

Exit status: 0 accepted, queued, batched, duplicate, suppressed, skipped, delivered or unmatched
(nothing to fix or retry), and a sent signal; 1 any other disposition, no activation, no worker,
Temporal unreachable; 2 no payload, or a payload refused before sending (not UTF-8 or JSON,
NaN/Infinity, too deep, too large, a lone surrogate).
"""

from __future__ import annotations

import argparse
from typing import Any

from wf_initiation.cli import EXIT_FAILED, EXIT_OK
from wf_initiation.cli._common import add_request_flags, emit, load, request
from wf_initiation.cli._payload import read_payload

# Dispositions after which the caller has nothing to fix or retry: exit 0. Any other exits 1.
OK_DISPOSITIONS = frozenset({"accepted", "queued", "batched", "duplicate", "suppressed", "skipped", "delivered", "unmatched"})


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `deliver`."""
    p = subparsers.add_parser(
        "deliver", help="deliver one external event to an activation; print its disposition",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_request_flags(p)
    p.add_argument("--workflow", required=True, metavar="NAME", help="Workflow identity (the Workfile's name).")
    p.add_argument("--entry", metavar="E", help="Trigger entry (its 'as' name); optional with one external entry.")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--payload", metavar="JSON", help="The payload as JSON text.")
    source.add_argument("--payload-file", metavar="FILE", help="A file holding the JSON payload ('-' = stdin).")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--signal", action="store_true", help="Send as a signal (kept until disposed or listed as "
                      "deferred; no disposition) instead of an update.")
    mode.add_argument("--redrive", metavar="ID", help="Re-drive the deferred signal with this delivery id (`wfi state "
                      "--redrivable` lists them): `wfi operate redrive --kind deferred_signal --delivery-id ID`; no payload.")
    mode.add_argument("--update-id", metavar="ID", help="Update id (default: derived from entry and payload).")
    p.set_defaults(handler=_deliver, exit_hard=True)


def _deliver(args: argparse.Namespace) -> int:
    deployment = load(args.deployment)
    if args.redrive is not None:
        from wf_initiation._redrive import redrive

        result = request(args, deployment, lambda wfi: redrive(wfi, args.workflow, args.redrive, args.entry),
                         workflow=args.workflow)
        emit(result.model_dump(mode="json"), render_delivery(result), args.json)
        return EXIT_OK if result.disposition.value in OK_DISPOSITIONS else EXIT_FAILED
    payload = read_payload(args.payload, args.payload_file)

    async def send(wfi: Any) -> Any:
        if args.signal:
            return await wfi.signal_delivery(args.workflow, payload, entry=args.entry)
        return await wfi.deliver(args.workflow, payload, entry=args.entry, update_id=args.update_id)

    result = request(args, deployment, send, workflow=args.workflow)
    if args.signal:
        data = {"workflow": args.workflow, "entry": args.entry, "signalled": True}
        emit(data, f"{args.workflow}: signalled: in the activation's history, kept until disposed or listed as "
                   f"deferred (`wfi help webhooks`, signals); see its disposition with `wfi state --events --workflow "
                   f"{args.workflow} --deployment {args.deployment}`", args.json)
        return EXIT_OK
    emit(result.model_dump(mode="json"), render_delivery(result), args.json)
    return EXIT_OK if result.disposition.value in OK_DISPOSITIONS else EXIT_FAILED


def render_delivery(result: Any) -> str:
    """`disposition  entry=...  delivery_id=...  run=...` and the message, if any; what is missing is said in words."""
    parts = [
        result.disposition.value,
        f"entry={result.entry}" if result.entry else "entry not resolved",
        f"delivery_id={result.delivery_id}" if result.delivery_id else "no delivery id in the payload",
    ]
    if result.run_key:
        parts.append(f"run={result.run_key}")
    if result.retained:
        parts.append(f"retained={result.retained.value}")
    parts.append(f"activation={result.activation_id}")
    return "  ".join(parts) + (f"\n  {result.message}" if result.message else "")
