"""`wfi schedule preview WORKFILE [--entry NAME] [--from ISO-INSTANT] [--count N] [--json]`.

Prints the next intended instants of a `time.schedule` trigger, computed by the same code the
activation uses (`wf_initiation.core.schedule`), so DST days can be checked before activating: one line per
instant with its local time (ISO-8601 with the zone's offset) and its UTC instant, under a header
naming the zone and the tzdata version.

`--json` prints a JSON array of `{"scheduled_at", "utc", "entry", "timezone", "tzdata_version"}`.

Exit status: 0 ok (also when no occurrence follows); 1 invalid Workfile, no schedule entry, or a
configuration that cannot be evaluated; 2 usage error (e.g. a bad `--from`).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from datetime import UTC, datetime

from wf_initiation.core._model import TriggerEntry, Workfile
from wf_initiation.core._validate import load_workfile
from wf_initiation.core.schedule import (
    ScheduleConfigError,
    ScheduleSpec,
    next_occurrences,
    occurrence_record,
    parse_instant,
    parse_schedule,
)

SCHEDULE_CONNECTOR = "time.schedule"
MAX_PREVIEW_COUNT = 10_000


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``schedule`` command group (``preview``) to the ``wfi`` dispatcher."""
    group = subparsers.add_parser("schedule", help="inspect time.schedule triggers",
                                  description="Inspect the time.schedule triggers of a Workfile without activating it.")
    sub = group.add_subparsers(dest="schedule_command", metavar="SUBCOMMAND", required=True)
    preview = sub.add_parser(
        "preview",
        help="print the next intended instants of a schedule trigger",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    preview.add_argument("workfile", metavar="WORKFILE", type=pathlib.Path, help="The Workfile to read.")
    preview.add_argument("--entry", metavar="NAME", help="The trigger entry (its `as` name) when there are several.")
    preview.add_argument("--from", dest="from_", type=_instant, metavar="ISO-INSTANT",
                         help="List instants strictly after this one (default: now), e.g. 2026-03-08T00:00:00Z.")
    preview.add_argument("--count", type=_positive, default=10, metavar="N", help="How many instants (default: %(default)s).")
    preview.add_argument("--json", action="store_true", help="Print a JSON array of occurrence objects.")
    preview.set_defaults(handler=run_preview)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number: write e.g. --count 10") from None
    if not 1 <= value <= MAX_PREVIEW_COUNT:
        raise argparse.ArgumentTypeError(f"{text!r} must be from 1 to {MAX_PREVIEW_COUNT:,}")
    return value


def run_preview(args: argparse.Namespace) -> int:
    """Load the Workfile, pick the schedule entry, print its next instants."""
    from wf_initiation.cli import UserError

    after = args.from_ or datetime.now(UTC)  # the shell may read the clock; the sequence itself never does
    result = load_workfile(args.workfile)
    errors = [d for d in result.diagnostics if d.severity == "error"]
    for diagnostic in result.diagnostics:
        print(diagnostic.render(result.file), file=sys.stderr)
    if result.workfile is None or errors:
        return 1
    entry = pick_entry(result.workfile, args.entry)
    try:
        spec = parse_schedule(entry.config)
    except ScheduleConfigError as exc:
        raise UserError(f"entry {entry.name!r}: {exc}") from None
    records = [occurrence_record(spec, t) | {"entry": entry.name} for t in next_occurrences(spec, after, args.count)]
    print(json.dumps(records, indent=2) if args.json else render_text(entry, spec, after, records))
    return 0


def _instant(text: str) -> datetime:
    """An argparse type: an ISO-8601 instant with an offset."""
    try:
        return parse_instant(text)
    except ScheduleConfigError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO-8601 instant with an offset from 1970 to 2199: write e.g. 2026-03-08T00:00:00Z") from None


def pick_entry(workfile: Workfile, name: str | None) -> TriggerEntry:
    """The ``time.schedule`` entry named ``name``, or the only one.

    Raises:
        wfi.cli.UserError: naming the choices when there is none, several, or no such entry.
    """
    from wf_initiation.cli import UserError

    schedules = [e for e in workfile.entries if e.connector == SCHEDULE_CONNECTOR]
    choices = ", ".join(e.name for e in schedules) or "none"
    if name is not None:
        chosen = next((e for e in schedules if e.name == name), None)
        if chosen is None:
            raise UserError(f"no {SCHEDULE_CONNECTOR} entry named {name!r} in workflow {workfile.name!r}: choose one of: {choices}")
        return chosen
    if not schedules:
        raise UserError(f"workflow {workfile.name!r} has no {SCHEDULE_CONNECTOR} trigger to preview")
    if len(schedules) > 1:
        raise UserError(f"workflow {workfile.name!r} has several {SCHEDULE_CONNECTOR} entries: pass --entry with one of: {choices}")
    return schedules[0]


def render_text(entry: TriggerEntry, spec: ScheduleSpec, after: datetime, records: list[dict[str, str]]) -> str:
    """A header naming entry, zone and tzdata version, then ``local  utc`` per instant."""
    head = f"# {entry.name} ({SCHEDULE_CONNECTOR}) in {spec.timezone}, tzdata {spec.tzdata_version}, after {after.isoformat().replace('+00:00', 'Z')}"
    if not records:
        return f"{head}\n# no occurrence follows (end passed, every candidate excluded, or no date matches the cron): the schedule is inactive (SCHED-4)"
    width = max(len(r["scheduled_at"]) for r in records)
    return "\n".join([head] + [f"{r['scheduled_at']:<{width}}  {r['utc']}" for r in records])
