"""The `sheet.row_added` poll activity: rows appended to a sheet kept as a CSV file on disk.

The connection maps sheet names to files: ``{"sheets": {"Content Calendar": "/abs/cal.csv"}}``
or ``{"dir": "/abs/dir"}`` meaning ``<dir>/<sheet>.csv``. A sheet name comes from a Workfile, so
with ``dir`` it must name a file *inside* that directory: no path separators, no ``..``, and the
file (after following symlinks) must resolve inside the directory. Only regular files are read
(a FIFO or device is refused, never waited on), at most :data:`MAX_SHEET_BYTES`.

The first record is the header; data rows are numbered from 1 (the header is not counted). The
cursor is the JSON of the last emitted row number. A last line without its newline is treated as
still being written and is read on a later poll, so a half-appended row is never emitted.
"""

from __future__ import annotations

import os
import pathlib
import stat
from typing import Any

from temporalio import activity

from wf_initiation.activities.poll._contract import (
    PollRequest,
    PollResponse,
    activity_name_for,
    config_invalid,
    require_str,
    source_unavailable,
)
from wf_initiation.activities.poll._runtime import LIMITS, run_poll
from wf_initiation.activities.poll.sheet._rows import CONNECTOR, parse_cursor, parse_rows, select_after
from wf_initiation.core.connections import ResolvedConnection

MAX_SHEET_BYTES = 32 * 1024 * 1024


@activity.defn(name=activity_name_for(CONNECTOR))
async def poll_sheet(req: PollRequest) -> PollResponse:
    """Return the rows appended after the cursor's row number, in row order.

    Raises:
        ApplicationError: ``PollSourceUnavailable`` when the file is missing, unreadable or too big;
            ``PollConfigInvalid`` for an unmapped sheet, a sheet name that leaves the connection's
            directory, an unknown id column or a bad cursor.
    """
    return await run_poll(req, _poll)


async def _poll(req: PollRequest, connection: ResolvedConnection, deadline: float) -> PollResponse:
    sheet = require_str(req.config, "sheet", CONNECTOR)
    id_column = req.config.get("id_column") or None
    path = sheet_path(connection.settings, sheet)
    after = parse_cursor(req.cursor)
    source = str(path)
    with LIMITS.poll(source, CONNECTOR):
        text = await LIMITS.run_blocking(source, lambda: read_text(path, sheet))
    header, rows = parse_rows(text)
    if id_column is not None and header and id_column not in header:
        raise config_invalid(
            f"{CONNECTOR}: sheet {sheet!r} ({path}) has no column {id_column!r}; its columns are {header}"
        )
    return select_after(rows, after, id_column, req.cursor, limit=req.limit)


def sheet_path(connection: dict[str, Any], sheet: str) -> pathlib.Path:
    """The CSV file of ``sheet`` according to the connection (checked to stay inside ``dir``)."""
    sheets, directory = connection.get("sheets"), connection.get("dir")
    if isinstance(sheets, dict) and sheet in sheets:
        return _absolute(str(sheets[sheet]), "sheets")
    if directory is not None:
        return inside(_absolute(str(directory), "dir"), sheet)
    known = sorted(sheets) if isinstance(sheets, dict) else []
    raise config_invalid(
        f"{CONNECTOR}: the connection maps no file to sheet {sheet!r} (mapped: {known}); add it under "
        "'sheets' or give a 'dir' holding '<sheet>.csv'"
    )


def inside(root: pathlib.Path, sheet: str) -> pathlib.Path:
    """``<root>/<sheet>.csv``, refused unless it resolves (symlinks followed) inside ``root``."""
    if not sheet_name_ok(sheet):
        raise config_invalid(
            f"{CONNECTOR}: sheet name {sheet!r} is not a plain name (it holds a path separator, '..' or a NUL): "
            f"with 'dir' a sheet must be a file directly inside {root}; rename it or map it under 'sheets'"
        )
    candidate = root / f"{sheet}.csv"
    real_root, real = os.path.realpath(root), os.path.realpath(candidate)
    if os.path.commonpath([real_root, real]) != real_root:
        raise config_invalid(
            f"{CONNECTOR}: sheet {sheet!r} resolves to a file outside the connection's directory {root} "
            "(a symlink pointing out); only files inside it are read"
        )
    return candidate


def sheet_name_ok(sheet: str) -> bool:
    """A sheet name that can only name a file directly inside a directory."""
    return sheet not in (".", "..") and not any(c in sheet for c in ("/", "\\", "\x00"))


def _absolute(path: str, key: str) -> pathlib.Path:
    resolved = pathlib.Path(path)
    if not resolved.is_absolute():
        raise config_invalid(f"{CONNECTOR}: connection '{key}' must hold absolute paths, got {path!r}")
    return resolved


def read_text(path: pathlib.Path, sheet: str) -> str:
    """The file's text (blocking: run it on a source thread); a missing file is an unavailable source."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise config_invalid(f"{CONNECTOR}: sheet {sheet!r} ({path}) is not a regular file; map a CSV file")
            data = file.read(MAX_SHEET_BYTES + 1)
        if len(data) > MAX_SHEET_BYTES:
            raise source_unavailable(
                f"sheet {sheet!r} ({path}) is larger than {MAX_SHEET_BYTES:,} bytes; archive old rows into "
                "another file (the cursor is a row number: start the new file's cursor over)"
            )
        return data.decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise source_unavailable(
            f"sheet {sheet!r} could not be read from {path} ({exc.__class__.__name__}: {exc}); "
            "check the deployment's connection for this sheet, polling retries with backoff"
        ) from None
