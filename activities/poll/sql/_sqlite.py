"""Reading `sql.row_inserted` rows from a SQLite file (blocking: run on a source thread)."""

from __future__ import annotations

import pathlib
import sqlite3
from typing import Any

from wf_initiation.activities.poll._contract import PollResponse, config_invalid, source_unavailable
from wf_initiation.activities.poll.sql._query import CONNECTOR, RowCollector, SqlQuery

BUSY_TIMEOUT_S = 10


class SqliteRead:
    """One read of a SQLite file; :meth:`abort` (from another thread) interrupts the running query."""

    def __init__(self, path: str, query: SqlQuery, after: Any, request_cursor: str | None) -> None:
        file = pathlib.Path(path)
        if not file.is_absolute():
            raise config_invalid(f"{CONNECTOR}: connection 'sqlite' must be an absolute path, got {path!r}")
        self.file, self.query, self.after, self.request_cursor = file, query, after, request_cursor
        self.source = f"SQLite database {path}"
        self._conn: sqlite3.Connection | None = None
        self._aborted = False

    def abort(self) -> None:
        self._aborted = True
        if self._conn is not None:
            self._conn.interrupt()

    def __call__(self) -> PollResponse:
        try:
            conn = sqlite3.connect(f"{self.file.as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S,
                                   check_same_thread=False)
        except sqlite3.Error as exc:
            raise unavailable(self.source, exc) from None
        self._conn = conn
        try:
            return self._read(conn)
        finally:
            conn.close()

    def _read(self, conn: sqlite3.Connection) -> PollResponse:
        try:
            cursor = conn.execute(self.query.text("?", after=self.after is not None), self.query.params(self.after))
            collector = RowCollector(self.query, [d[0] for d in cursor.description], self.request_cursor)
            for values in cursor:  # row by row: only what fits the response is held in memory
                if self._aborted or not collector.add(values):
                    break
            return collector.response()
        except sqlite3.OperationalError as exc:
            if str(exc).startswith(("no such table", "no such column")):
                raise unknown_name(self.source, self.query, exc) from None
            raise unavailable(self.source, exc) from None
        except sqlite3.Error as exc:
            raise unavailable(self.source, exc) from None


def unavailable(source: str, exc: Exception) -> Exception:
    return source_unavailable(
        f"{source} could not be read ({str(exc).strip()}); check that it exists and is reachable, "
        "polling retries with backoff"
    )


def unknown_name(source: str, query: SqlQuery, exc: Exception) -> Exception:
    return config_invalid(
        f"{CONNECTOR}: {source} has no table {query.table!r} with column {query.column!r} "
        f"({str(exc).strip()}); fix 'table' or 'column' in the trigger configuration"
    )
