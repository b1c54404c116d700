"""Reading `sql.row_inserted` rows from PostgreSQL (psycopg 3, async: no thread to get stuck).

The DSN usually comes from a reference (``dsn: env:ORDERS_DSN``) or leaves its password out and the
connection gives ``password: env:...``; either way no message repeats the DSN or a driver text that
could quote it. The read runs in a read-only transaction with ``statement_timeout`` set to the poll
deadline, through a server-side cursor fetched a few rows at a time, so only what fits the response
is held in memory.
"""

from __future__ import annotations

from typing import Any

from wf_initiation.activities.poll._contract import PollResponse, config_invalid, source_unavailable
from wf_initiation.activities.poll.sql._query import CONNECTOR, RowCollector, SqlQuery

CONNECT_TIMEOUT_S = 10
FETCH_ROWS = 16


def describe_dsn(dsn: str) -> str:
    """`PostgreSQL database <db> at <host>:<port>`, from the DSN without any credential."""
    info = _conninfo(dsn)
    where = f"{info.get('host', 'localhost')}:{info.get('port', 5432)}"
    return f"PostgreSQL database {info.get('dbname', '?')} at {where}"


def _conninfo(dsn: str) -> dict[str, Any]:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        return conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        # The parser's message quotes the DSN, password included: never shown.
        raise config_invalid(
            f"{CONNECTOR}: the connection's 'dsn' is not a valid PostgreSQL connection string (the parser's "
            "message is not shown: it can contain the password); fix the DSN"
        ) from None


async def read_postgres(
    dsn: str, password: str | None, query: SqlQuery, after: Any, request_cursor: str | None, deadline: float,
) -> PollResponse:
    """Rows after ``after`` as a response; PollSourceUnavailable / PollConfigInvalid on failure."""
    try:
        import psycopg
        from psycopg import errors
    except ImportError:
        raise config_invalid(
            f"{CONNECTOR}: a 'dsn' connection needs psycopg 3: pip install 'wf-initiation[postgres]'"
        ) from None
    source = describe_dsn(dsn)
    extra: dict[str, Any] = {"password": password} if password is not None else {}
    try:
        conn = await psycopg.AsyncConnection.connect(
            dsn, connect_timeout=max(1, min(CONNECT_TIMEOUT_S, int(deadline))), **extra)
    except psycopg.Error as exc:
        raise source_unavailable(
            f"{source} refused or did not answer the connection ({_first_line(exc)}); check the host, the "
            "credentials and that the server is up, polling retries with backoff"
        ) from None
    try:
        return await _read(conn, query, after, request_cursor, deadline)
    except (errors.UndefinedTable, errors.UndefinedColumn, errors.InvalidSchemaName) as exc:
        raise config_invalid(
            f"{CONNECTOR}: {source} has no table {query.table!r} with column {query.column!r} "
            f"({_first_line(exc)}); fix 'table' or 'column' in the trigger configuration"
        ) from None
    except psycopg.Error as exc:
        raise source_unavailable(
            f"{source} could not be read ({_first_line(exc)}); polling retries with backoff"
        ) from None
    finally:
        await conn.close()


async def _read(conn: Any, query: SqlQuery, after: Any, request_cursor: str | None, deadline: float) -> PollResponse:
    await conn.set_read_only(True)  # a poll never writes
    async with conn.transaction():
        # The server gives up too when the deadline passes, even if the cancel request is lost.
        await conn.execute("SELECT set_config('statement_timeout', %s, true)", (f"{int(deadline * 1000)}ms",))
        async with conn.cursor(name="wfi_poll") as cursor:
            await cursor.execute(query.text("%s", after=after is not None), query.params(after))
            collector = RowCollector(query, [d.name for d in cursor.description or ()], request_cursor)
            while rows := await cursor.fetchmany(FETCH_ROWS):
                if not all(collector.add(values) for values in rows):
                    break
            return collector.response()


def _first_line(exc: Exception) -> str:
    # libpq's texts name host and port, never the password; run_poll redacts the resolved secrets anyway.
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
