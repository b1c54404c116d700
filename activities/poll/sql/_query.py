"""The `sql.row_inserted` query, cursor and items (no I/O; shared by the SQLite and PostgreSQL readers)."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from wf_initiation.activities.poll._budget import ResponseBuilder
from wf_initiation.activities.poll._contract import (
    PollResponse,
    config_invalid,
    decode_cursor,
    encode_cursor,
    require_str,
)

CONNECTOR = "sql.row_inserted"
_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class SqlQuery:
    """What to read: table, ordering column, identity column and how many rows."""

    table: str
    column: str
    id_column: str
    limit: int

    def text(self, placeholder: str, *, after: bool) -> str:
        """The SELECT, with ``placeholder`` for the bound cursor value (if ``after``) and limit."""
        col = quote(self.column)
        where = f"{col} IS NOT NULL" + (f" AND {col} > {placeholder}" if after else "")
        return f"SELECT * FROM {quote(self.table)} WHERE {where} ORDER BY {col} LIMIT {placeholder}"

    def params(self, after: Any) -> tuple[Any, ...]:
        # One row more than the limit tells whether the limit cut the response.
        return ((after,) if after is not None else ()) + (self.limit + 1,)


def parse_query(config: dict[str, Any], limit: int) -> SqlQuery:
    """Validate the configuration; the effective limit is the smaller of request and `batch_limit`."""
    table = _identifier(config, "table", _TABLE)
    column = _identifier(config, "column", _COLUMN)
    id_column = _identifier(config, "id_column", _COLUMN) if config.get("id_column") else column
    batch_limit = config.get("batch_limit", limit)
    if not isinstance(batch_limit, int) or isinstance(batch_limit, bool) or batch_limit < 1:
        raise config_invalid(f"{CONNECTOR}: batch_limit must be a positive integer, got {batch_limit!r}")
    return SqlQuery(table=table, column=column, id_column=id_column, limit=min(limit, batch_limit))


def _identifier(config: dict[str, Any], key: str, pattern: re.Pattern[str]) -> str:
    value = require_str(config, key, CONNECTOR)
    if not pattern.match(value):
        raise config_invalid(f"{CONNECTOR}: {key} {value!r} must match {pattern.pattern}")
    return value


def quote(identifier: str) -> str:
    """Quote a possibly schema-qualified identifier for SQLite and PostgreSQL."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in identifier.split("."))


def parse_cursor(cursor: str | None) -> Any:
    """The last emitted ``column`` value; None means "from the start of the table"."""
    if cursor is None:
        return None
    value = decode_cursor(CONNECTOR, cursor)
    if value is None or isinstance(value, (dict, list, bool)):
        raise config_invalid(
            f"cursor {cursor[:80]!r} is not an {CONNECTOR} cursor (the JSON of a column value); "
            "clear it to read the table from the start"
        )
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        # No SQL integer column holds it (SQLite's and PostgreSQL's are at most 64 bits; NUMERIC
        # values come back as text), so no poll returned it; binding it fails in the driver.
        raise config_invalid(
            f"cursor {cursor[:40]!r}... is an integer of {len(str(abs(value))):,} digits, outside the 64-bit "
            f"range of SQL integer columns, so no {CONNECTOR} poll returned it: set the cursor to a value of the "
            "table's 'column' (wfi operate set_cursor --entry ENTRY --cursor VALUE), or clear it (omit --cursor) to read the table from the start"
        )
    return value


class RowCollector:
    """Turns rows into items within the response's count and byte limits, as they are fetched.

    Feed it rows (``add``) until it returns False; then ``response()``.
    """

    def __init__(self, query: SqlQuery, columns: list[str], request_cursor: str | None) -> None:
        # Needed for SQLite too: it reads an unknown double-quoted identifier as a string literal.
        for needed in sorted({query.column, query.id_column}):
            if needed not in columns:
                raise config_invalid(
                    f"{CONNECTOR}: table {query.table!r} has no column {needed!r} (it has {columns}); "
                    "fix 'table' or 'column'/'id_column' in the trigger configuration"
                )
        self.query, self.columns = query, columns
        self.builder = ResponseBuilder(request_cursor, limit=query.limit)
        self.more = False

    def add(self, values: Iterable[Any]) -> bool:
        """Add one row; False when the response is complete (this row is then left for the next poll)."""
        record = dict(zip(self.columns, values))
        payload, cursor_after = _item(record, self.query)
        if not self.builder.add(payload, cursor_after, id_field="row_id"):
            self.more = True
            return False
        return True

    def response(self) -> PollResponse:
        return self.builder.response(more=self.more)


def _item(record: dict[str, Any], query: SqlQuery) -> tuple[dict[str, Any], str]:
    row = {name: json_safe(value) for name, value in record.items()}
    # An empty identity is still returned: validation then holds or quarantines it (POLL-11).
    row_id = "" if record[query.id_column] is None else str(row[query.id_column])
    return {"row_id": row_id, "table": query.table, "row": row}, encode_cursor(row[query.column])


def json_safe(value: Any) -> Any:
    """A JSON value for a database value: temporal types as ISO 8601, decimals and uuids as text."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        # NaN and infinities are not JSON: as text, like numerics, rather than a payload nobody can send.
        return value if value == value and value not in (float("inf"), float("-inf")) else str(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (decimal.Decimal, uuid.UUID, dt.timedelta)):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    return str(value)
