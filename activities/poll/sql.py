"""`sql.row_inserted`: rows of a table after a strictly increasing column.

SQLite by default (connection ``{"sqlite": "/abs/path/file.db"}``, opened read-only); PostgreSQL
through ``{"dsn": "postgresql://..."}`` with psycopg 3 (the ``postgres`` extra). The cursor is the
JSON of the last emitted row's ``column`` value; the query asks for rows with a greater value, in
that column's order. Identifiers come from configuration (validated and quoted); values are
always bound parameters.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import decimal
import pathlib
import re
import sqlite3
import uuid
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

CONNECTOR = "sql.row_inserted"
CONNECT_TIMEOUT_S = 10
_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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


@dataclass(frozen=True)
class Rows:
    """A result set: column names and row tuples."""

    columns: list[str]
    values: list[tuple[Any, ...]]


@activity.defn(name="wfi.poll.sql.row_inserted")
async def poll_sql(req: PollRequest) -> PollResponse:
    """Return the rows whose ``column`` is greater than the cursor, in ``column`` order.

    Raises:
        ApplicationError: ``PollSourceUnavailable`` when the database cannot be opened or read;
            ``PollConfigInvalid`` for bad identifiers, an unknown table or column, a bad
            connection or cursor.
    """
    query = parse_query(req.config, req.limit)
    after = parse_cursor(req.cursor)
    rows = await asyncio.to_thread(read_rows, req.connection, query, after)
    return to_response(rows, query, req.cursor)


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
    return value


def read_rows(connection: dict[str, Any], query: SqlQuery, after: Any) -> Rows:
    """Run the query on the connection's database (blocking; run it in a thread)."""
    sqlite_path, dsn = connection.get("sqlite"), connection.get("dsn")
    if (sqlite_path is None) == (dsn is None):
        raise config_invalid(
            f"{CONNECTOR}: the connection must give exactly one of 'sqlite' (an absolute file path) "
            "or 'dsn' (postgresql://...)"
        )
    if sqlite_path is not None:
        return read_sqlite(str(sqlite_path), query, after)
    return read_postgres(str(dsn), query, after)


def _params(query: SqlQuery, after: Any) -> tuple[Any, ...]:
    # One row more than the limit tells whether the limit cut the response.
    return ((after,) if after is not None else ()) + (query.limit + 1,)


def read_sqlite(path: str, query: SqlQuery, after: Any) -> Rows:
    """Read from a SQLite file opened read-only; a missing file is an unavailable source."""
    file = pathlib.Path(path)
    if not file.is_absolute():
        raise config_invalid(f"{CONNECTOR}: connection 'sqlite' must be an absolute path, got {path!r}")
    source = f"SQLite database {path}"
    try:
        conn = sqlite3.connect(f"{file.as_uri()}?mode=ro", uri=True, timeout=CONNECT_TIMEOUT_S)
    except sqlite3.Error as exc:
        raise _unavailable(source, exc) from None
    try:
        cursor = conn.execute(query.text("?", after=after is not None), _params(query, after))
        return Rows([d[0] for d in cursor.description], cursor.fetchall())
    except sqlite3.OperationalError as exc:
        if str(exc).startswith(("no such table", "no such column")):
            raise _unknown_name(source, query, exc) from None
        raise _unavailable(source, exc) from None
    except sqlite3.Error as exc:
        raise _unavailable(source, exc) from None
    finally:
        conn.close()


def read_postgres(dsn: str, query: SqlQuery, after: Any) -> Rows:
    """Read from PostgreSQL through psycopg 3; connection failures are an unavailable source."""
    try:
        import psycopg
        from psycopg import errors
    except ImportError:
        raise config_invalid(
            f"{CONNECTOR}: a 'dsn' connection needs psycopg 3: pip install 'wf-initiation[postgres]'"
        ) from None
    source = _describe_dsn(dsn)
    try:
        with psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as conn:
            cursor = conn.execute(query.text("%s", after=after is not None), _params(query, after))
            return Rows([d.name for d in cursor.description or ()], cursor.fetchall())
    except (errors.UndefinedTable, errors.UndefinedColumn, errors.InvalidSchemaName) as exc:
        raise _unknown_name(source, query, exc) from None
    except psycopg.ProgrammingError as exc:
        raise config_invalid(
            f"{CONNECTOR}: {source} rejected the connection or query ({exc}); fix the DSN"
        ) from None
    except psycopg.Error as exc:
        raise _unavailable(source, exc) from None


def _describe_dsn(dsn: str) -> str:
    # Name the database without echoing credentials.
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        info = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:  # a malformed DSN is reported by connect() right after
        return "PostgreSQL database (DSN from the connection)"
    where = f"{info.get('host', 'localhost')}:{info.get('port', 5432)}"
    return f"PostgreSQL database {info.get('dbname', '?')} at {where}"


def _unavailable(source: str, exc: Exception) -> Exception:
    return source_unavailable(
        f"{source} could not be read ({str(exc).strip()}); check that it exists and is reachable, "
        "polling retries with backoff"
    )


def _unknown_name(source: str, query: SqlQuery, exc: Exception) -> Exception:
    return config_invalid(
        f"{CONNECTOR}: {source} has no table {query.table!r} with column {query.column!r} "
        f"({str(exc).strip()}); fix 'table' or 'column' in the trigger configuration"
    )


def to_response(rows: Rows, query: SqlQuery, request_cursor: str | None) -> PollResponse:
    """One item per row (at most ``query.limit``); ``more`` when a further row exists."""
    # Needed for SQLite too: it reads an unknown double-quoted identifier as a string literal.
    for needed in sorted({query.column, query.id_column}):
        if needed not in rows.columns:
            raise config_invalid(
                f"{CONNECTOR}: table {query.table!r} has no column {needed!r} (it has {rows.columns}); "
                "fix 'table' or 'column'/'id_column' in the trigger configuration"
            )
    records = [dict(zip(rows.columns, values)) for values in rows.values]
    items = [_item(record, query) for record in records[: query.limit]]
    return respond(items, request_cursor, more=len(records) > query.limit)


def _item(record: dict[str, Any], query: SqlQuery) -> PollItem:
    row = {name: json_safe(value) for name, value in record.items()}
    # An empty identity is still returned: validation then holds or quarantines it (POLL-11).
    row_id = "" if record[query.id_column] is None else str(row[query.id_column])
    payload = {"row_id": row_id, "table": query.table, "row": row}
    return PollItem(payload=payload, cursor_after=encode_cursor(row[query.column]))


def json_safe(value: Any) -> Any:
    """A JSON value for a database value: temporal types as ISO 8601, decimals and uuids as text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
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
