"""Sheet rows and the `sheet.row_added` cursor (no I/O)."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from wf_initiation.activities.poll._budget import ResponseBuilder
from wf_initiation.activities.poll._contract import PollResponse, config_invalid, decode_cursor, encode_cursor

CONNECTOR = "sheet.row_added"
# The csv module refuses a cell over 128 KiB by default, which would fail every poll of the sheet
# for good. The file is already bounded (MAX_SHEET_BYTES), and an item too big for a run is cut out
# by the response budget, so let the parser read any cell the file can hold. Only ever raised.
_FIELD_LIMIT = 64 * 1024 * 1024
if csv.field_size_limit() < _FIELD_LIMIT:
    csv.field_size_limit(_FIELD_LIMIT)


@dataclass(frozen=True)
class SheetRow:
    """A data row: its number (from 1) and its cells by header name."""

    number: int
    cells: dict[str, str]


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
    """The rows numbered after ``after``, within the response's count and byte limits."""
    builder = ResponseBuilder(request_cursor, limit=limit)
    for row in rows:
        if row.number <= after:
            continue
        row_id = row.cells.get(id_column, "").strip() if id_column else str(row.number)
        payload = {**row.cells, "row_id": row_id, "row_number": row.number}
        if not builder.add(payload, encode_cursor(row.number), id_field="row_id"):
            return builder.response(more=True)
    return builder.response(more=False)
