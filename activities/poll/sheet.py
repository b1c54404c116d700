"""`sheet.row_added`: rows appended to a sheet kept as a CSV file on disk.

The connection maps sheet names to files: ``{"sheets": {"Content Calendar": "/abs/cal.csv"}}``
or ``{"dir": "/abs/dir"}`` meaning ``<dir>/<sheet>.csv``. The first record is the header; data
rows are numbered from 1 (the header is not counted). The cursor is the JSON of the last emitted
row number. A last line without its newline is treated as still being written and is read on a
later poll, so a half-appended row is never emitted.
"""

from __future__ import annotations

import asyncio
import csv
import io
import pathlib
from dataclasses import dataclass
from typing import Any

from temporalio import activity

from wf_initiation.activities.poll._contract import (
    PollItem,
    PollRequest,
    PollResponse,
    config_invalid,
    decode_cursor,
    encode_cursor,
    require_str,
    respond,
    source_unavailable,
)

CONNECTOR = "sheet.row_added"


@dataclass(frozen=True)
class SheetRow:
    """A data row: its number (from 1) and its cells by header name."""

    number: int
    cells: dict[str, str]


@activity.defn(name="wfi.poll.sheet.row_added")
async def poll_sheet(req: PollRequest) -> PollResponse:
    """Return the rows appended after the cursor's row number, in row order.

    Raises:
        ApplicationError: ``PollSourceUnavailable`` when the file is missing or unreadable;
            ``PollConfigInvalid`` for an unmapped sheet, an unknown id column or a bad cursor.
    """
    sheet = require_str(req.config, "sheet", CONNECTOR)
    id_column = req.config.get("id_column") or None
    path = sheet_path(req.connection, sheet)
    after = parse_cursor(req.cursor)
    text = await asyncio.to_thread(read_text, path, sheet)
    header, rows = parse_rows(text)
    if id_column is not None and header and id_column not in header:
        raise config_invalid(
            f"{CONNECTOR}: sheet {sheet!r} ({path}) has no column {id_column!r}; its columns are {header}"
        )
    return select_after(rows, after, id_column, req.cursor, limit=req.limit)


def sheet_path(connection: dict[str, Any], sheet: str) -> pathlib.Path:
    """The CSV file of ``sheet`` according to the connection."""
    sheets, directory = connection.get("sheets"), connection.get("dir")
    if isinstance(sheets, dict) and sheet in sheets:
        return _absolute(str(sheets[sheet]), "sheets")
    if directory is not None:
        return _absolute(str(directory), "dir") / f"{sheet}.csv"
    known = sorted(sheets) if isinstance(sheets, dict) else []
    raise config_invalid(
        f"{CONNECTOR}: the connection maps no file to sheet {sheet!r} (mapped: {known}); add it under "
        "'sheets' or give a 'dir' holding '<sheet>.csv'"
    )


def _absolute(path: str, key: str) -> pathlib.Path:
    resolved = pathlib.Path(path)
    if not resolved.is_absolute():
        raise config_invalid(f"{CONNECTOR}: connection '{key}' must hold absolute paths, got {path!r}")
    return resolved


def parse_cursor(cursor: str | None) -> int:
    """The last emitted row number (0 before the first row)."""
    if cursor is None:
        return 0
    value = decode_cursor(CONNECTOR, cursor)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise config_invalid(
            f"cursor {cursor[:80]!r} is not a {CONNECTOR} cursor (a row number); "
            "clear it to read the sheet from row 1"
        )
    return value


def read_text(path: pathlib.Path, sheet: str) -> str:
    """The file's text (blocking; run it in a thread); a missing file is an unavailable source."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise source_unavailable(
            f"sheet {sheet!r} could not be read from {path} ({exc.__class__.__name__}: {exc}); "
            "check the deployment's connection for this sheet, polling retries with backoff"
        ) from None


def parse_rows(text: str) -> tuple[list[str], list[SheetRow]]:
    """Header and complete data rows; blank records keep their number but are not rows."""
    complete = text if text.endswith(("\n", "\r")) else text[: max(text.rfind("\n"), 0)]
    records = list(csv.reader(io.StringIO(complete, newline="")))
    if not records:
        return [], []
    header, data = records[0], records[1:]
    rows = [
        SheetRow(number, dict(zip(header, record + [""] * (len(header) - len(record)))))
        for number, record in enumerate(data, start=1)
        if any(cell.strip() for cell in record)
    ]
    return header, rows


def select_after(
    rows: list[SheetRow], after: int, id_column: str | None, request_cursor: str | None, *, limit: int
) -> PollResponse:
    """The rows numbered after ``after``, at most ``limit``, each with its resume cursor."""
    pending = [row for row in rows if row.number > after]
    items = [_item(row, id_column) for row in pending[:limit]]
    return respond(items, request_cursor, more=len(pending) > limit)


def _item(row: SheetRow, id_column: str | None) -> PollItem:
    row_id = row.cells.get(id_column, "").strip() if id_column else str(row.number)
    payload = {**row.cells, "row_id": row_id, "row_number": row.number}
    return PollItem(payload=payload, cursor_after=encode_cursor(row.number))
