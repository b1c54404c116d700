"""The `sql.row_inserted` poll activity: rows of a table after a strictly increasing column.

SQLite by default (connection ``{"sqlite": "/abs/path/file.db"}``, opened read-only, read on a
source thread that the deadline interrupts); PostgreSQL through ``{"dsn": ...}`` (psycopg 3, the
``postgres`` extra, async), its password best kept in a reference (``dsn: env:ORDERS_DSN``, or a
password-less DSN plus ``password: env:ORDERS_PASSWORD``). The cursor is the JSON of the last emitted
row's ``column`` value; the query asks for rows with a greater value, in that column's order.
Identifiers come from configuration (validated and quoted); values are always bound parameters.
"""

from __future__ import annotations

from typing import Any

from temporalio import activity

from wf_initiation.activities.poll._contract import PollRequest, PollResponse, activity_name_for, config_invalid
from wf_initiation.activities.poll._runtime import LIMITS, run_poll
from wf_initiation.activities.poll.sql._postgres import describe_dsn, read_postgres
from wf_initiation.activities.poll.sql._query import CONNECTOR, parse_cursor, parse_query
from wf_initiation.activities.poll.sql._sqlite import SqliteRead
from wf_initiation.core.connections import ResolvedConnection


@activity.defn(name=activity_name_for(CONNECTOR))
async def poll_sql(req: PollRequest) -> PollResponse:
    """Return the rows whose ``column`` is greater than the cursor, in ``column`` order.

    Raises:
        ApplicationError: ``PollSourceUnavailable`` when the database cannot be opened or read in
            time; ``PollConfigInvalid`` for bad identifiers, an unknown table or column, a bad
            connection or cursor.
    """
    return await run_poll(req, _poll)


async def _poll(req: PollRequest, connection: ResolvedConnection, deadline: float) -> PollResponse:
    query = parse_query(req.config, req.limit)
    after = parse_cursor(req.cursor)
    settings = connection.settings
    sqlite_path, dsn = settings.get("sqlite"), settings.get("dsn")
    if (sqlite_path is None) == (dsn is None):
        raise config_invalid(
            f"{CONNECTOR}: the connection must give exactly one of 'sqlite' (an absolute file path) "
            "or 'dsn' (postgresql://..., best as a reference: dsn: env:NAME)"
        )
    if sqlite_path is not None:
        read = SqliteRead(str(sqlite_path), query, after, req.cursor)
        with LIMITS.poll(read.source, CONNECTOR):
            return await LIMITS.run_blocking(read.source, read, abort=read.abort)
    password = _password(settings)
    with LIMITS.poll(describe_dsn(str(dsn)), CONNECTOR):
        return await read_postgres(str(dsn), password, query, after, req.cursor, deadline)


def _password(settings: dict[str, Any]) -> str | None:
    password = settings.get("password")
    if password is not None and not isinstance(password, str):
        raise config_invalid(f"{CONNECTOR}: connection 'password' must be a reference such as env:NAME")
    return password
