"""Checks of a trigger entry's configuration beyond its manifest's JSON schema, shared by the
validator (``wfi validate``, on the Workfile's own values) and activation (``wfi activate`` and
``wfi validate --deployment``, on the evaluated values with the overlay applied), so both refuse
the same configurations with the same diagnostic before anything runs."""

from __future__ import annotations

from typing import Any

import jsonschema

from ._catalog import Manifest

FORMAT_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER


def semantic_problems(manifest: Manifest, config: dict[str, Any]) -> tuple[str, list[str]]:
    """``(code, problems)`` of a configuration that passed the schema; no problems when it is fine."""
    if manifest.kind == "schedule":
        from .schedule import ScheduleConfigError, parse_schedule

        try:
            parse_schedule(config)
        except ScheduleConfigError as exc:
            return "SCHED-INVALID", [f"schedule cannot be evaluated (SCHED-3): {'; '.join(exc.problems)}"]
    return "", []


def schema_problems(manifest: Manifest, config: dict[str, Any]) -> list[str]:
    """The manifest's input schema applied to an evaluated configuration (TRIG-2), one line each."""
    validator = jsonschema.Draft202012Validator(manifest.input_schema, format_checker=FORMAT_CHECKER)
    out = []
    for error in sorted(validator.iter_errors(config), key=lambda e: [str(p) for p in e.absolute_path]):
        where = ".".join(str(p) for p in error.absolute_path) or "configuration"
        message = error.message if len(error.message) <= 160 else error.message[:157] + "..."
        out.append(f"{where}: {message}")
    return out
