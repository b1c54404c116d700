"""`sql.row_inserted` against a real SQLite file and a real PostgreSQL server (no mocks)."""

from __future__ import annotations

import pathlib
import socket
import sqlite3
import uuid

import pytest
from temporalio.exceptions import ApplicationError

from tests.support.pollsources import activity_env, assert_manifest_names_activity, assert_payloads_conform
from wf_initiation.activities.poll import POLL_CONFIG_INVALID, POLL_SOURCE_UNAVAILABLE, PollRequest, PollResponse, poll_sql

CONNECTOR = "sql.row_inserted"
EVENTS = {"table": "events", "column": "id"}


async def poll(connection: dict, cursor: str | None = None, *, limit: int = 500, **config) -> PollResponse:
    req = PollRequest(
        connector=CONNECTOR, config=config or EVENTS, connection=connection, cursor=cursor, limit=limit
    )
    return await activity_env().run(poll_sql, req)


async def poll_error(connection: dict, cursor: str | None = None, **config) -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        await poll(connection, cursor, **config)
    return caught.value


def row_ids(response: PollResponse) -> list[str]:
    return [item.payload["row_id"] for item in response.items]


# --- SQLite ---------------------------------------------------------------------------------------


@pytest.fixture
def sqlite_db(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT, amount REAL, raw BLOB)"
        )
    return path


def insert(path: pathlib.Path, *bodies: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.executemany("INSERT INTO events (body, amount, raw) VALUES (?, 1.5, x'00ff')", [(b,) for b in bodies])


async def test_rows_inserted_between_polls_are_returned_once_in_column_order(sqlite_db):
    # proves: POLL-6
    insert(sqlite_db, "a", "b", "c")
    connection = {"sqlite": str(sqlite_db)}
    first = await poll(connection)
    insert(sqlite_db, "d", "e")
    second = await poll(connection, first.cursor)
    third = await poll(connection, second.cursor)
    assert row_ids(first) == ["1", "2", "3"] and row_ids(second) == ["4", "5"]
    assert row_ids(third) == [] and third.cursor == second.cursor == '5' and first.stable_order
    assert second.items[0].payload == {
        "row_id": "4",
        "table": "events",
        "row": {"id": 4, "body": "d", "amount": 1.5, "raw": "AP8="},
    }
    assert_payloads_conform(CONNECTOR, [i.payload for i in first.items + second.items])


async def test_resuming_from_the_cursor_after_any_row_returns_exactly_the_rows_after_it(sqlite_db):
    insert(sqlite_db, *"abcdef")
    connection = {"sqlite": str(sqlite_db)}
    full = await poll(connection)
    for k, item in enumerate(full.items):
        assert row_ids(await poll(connection, item.cursor_after)) == row_ids(full)[k + 1 :]


async def test_limit_and_batch_limit_page_through_rows_and_say_there_is_more(sqlite_db):
    insert(sqlite_db, *"abcdefg")
    connection, pages, cursor = {"sqlite": str(sqlite_db)}, [], None
    for limit in (3, 500, 500, 500):
        page = await poll(connection, cursor, limit=limit, **EVENTS, batch_limit=3 if limit == 500 else 100)
        pages.append((row_ids(page), page.more))
        cursor = page.cursor
    assert pages == [(["1", "2", "3"], True), (["4", "5", "6"], True), (["7"], False), ([], False)]


async def test_identifiers_are_quoted_and_id_column_gives_the_identity(tmp_path):
    path = tmp_path / "quoted.db"
    with sqlite3.connect(path) as conn:
        conn.execute('CREATE TABLE "order" ("group" INTEGER, "select" TEXT)')
        conn.executemany('INSERT INTO "order" VALUES (?, ?)', [(20, "b"), (10, "a"), (None, "skipped")])
    response = await poll({"sqlite": str(path)}, table="order", column="group", id_column="select")
    assert row_ids(response) == ["a", "b"] and response.cursor == "20"


async def test_a_missing_database_file_raises_source_unavailable_naming_it(tmp_path):
    missing = tmp_path / "gone" / "app.db"
    error = await poll_error({"sqlite": str(missing)})
    assert error.type == POLL_SOURCE_UNAVAILABLE and error.non_retryable and str(missing) in error.message
    assert not missing.parent.exists(), "polling must not create the database"


async def test_a_database_that_comes_back_is_read_from_the_same_cursor(tmp_path):
    path = tmp_path / "later.db"
    assert (await poll_error({"sqlite": str(path)}, "0")).type == POLL_SOURCE_UNAVAILABLE
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, body TEXT)")
        conn.executemany("INSERT INTO events (body) VALUES (?)", [("a",), ("b",)])
    assert row_ids(await poll({"sqlite": str(path)}, "0")) == ["1", "2"]


@pytest.mark.parametrize(
    ("config", "connection", "fix"),
    [
        ({"table": "nope", "column": "id"}, None, "fix 'table' or 'column'"),
        ({"table": "events", "column": "nope"}, None, "fix 'table' or 'column'"),
        ({"table": "events; DROP TABLE events", "column": "id"}, None, "must match"),
        ({"table": "events", "column": "id", "batch_limit": 0}, None, "batch_limit"),
        (EVENTS, {}, "exactly one of 'sqlite'"),
        (EVENTS, {"sqlite": "relative.db"}, "absolute path"),
    ],
)
async def test_bad_configuration_or_connection_is_invalid_and_says_what_to_fix(sqlite_db, config, connection, fix):
    insert(sqlite_db, "a")
    error = await poll_error({"sqlite": str(sqlite_db)} if connection is None else connection, **config)
    assert error.type == POLL_CONFIG_INVALID and error.non_retryable and fix in error.message
    with sqlite3.connect(sqlite_db) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (1,)


@pytest.mark.parametrize("cursor", ["{", "null", "[1]", "true"])
async def test_a_cursor_this_connector_did_not_write_is_invalid(sqlite_db, cursor):
    error = await poll_error({"sqlite": str(sqlite_db)}, cursor)
    assert error.type == POLL_CONFIG_INVALID and "clear it" in error.message


def test_the_manifest_names_this_activity():
    assert_manifest_names_activity(CONNECTOR, poll_sql)


# --- PostgreSQL -----------------------------------------------------------------------------------


@pytest.fixture
def pg_table(postgres_dsn: str) -> tuple[str, str]:
    """A fresh table `app.orders_<uuid>` on the session's server: (dsn, table)."""
    import psycopg

    table = f"app.orders_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS app")
        conn.execute(
            f"CREATE TABLE {table} (id bigserial PRIMARY KEY, ref uuid NOT NULL DEFAULT gen_random_uuid(),"
            " placed timestamptz NOT NULL, total numeric(10,2) NOT NULL, tags text[])"
        )
    return postgres_dsn, table


def pg_insert(pg: tuple[str, str], *rows: tuple[str, str]) -> None:
    import psycopg

    dsn, table = pg
    with psycopg.connect(dsn, autocommit=True) as conn:
        for placed, total in rows:
            conn.execute(f"INSERT INTO {table} (placed, total, tags) VALUES (%s, %s, %s)", (placed, total, ["x"]))


async def test_postgres_rows_after_a_timestamp_column_are_returned_in_order_across_polls(pg_table):
    # proves: POLL-6
    connection = {"dsn": pg_table[0]}
    config = {"table": pg_table[1], "column": "placed", "id_column": "ref"}
    pg_insert(pg_table, ("2024-05-01T10:00:00Z", "9.99"), ("2024-05-01T09:00:00Z", "1.00"))
    first = await poll(connection, **config)
    pg_insert(pg_table, ("2024-05-01T11:00:00Z", "5.50"))
    second = await poll(connection, first.cursor, **config)
    assert [i.payload["row"]["total"] for i in first.items] == ["1.00", "9.99"]
    assert [i.payload["row"]["placed"] for i in second.items] == ["2024-05-01T11:00:00+00:00"]
    assert second.items[0].payload["row"]["tags"] == ["x"] and len(second.items[0].payload["row_id"]) == 36
    assert (await poll(connection, second.cursor, **config)).items == []
    assert_payloads_conform(CONNECTOR, [i.payload for i in first.items + second.items])


async def test_postgres_paging_by_limit_resumes_after_each_row(pg_table):
    connection = {"dsn": pg_table[0]}
    config = {"table": pg_table[1], "column": "id"}
    pg_insert(pg_table, *[(f"2024-06-01T0{n}:00:00Z", "1.00") for n in range(5)])
    full = await poll(connection, **config)
    page = await poll(connection, limit=2, **config)
    assert row_ids(page) == row_ids(full)[:2] and page.more
    rest = await poll(connection, page.items[0].cursor_after, **config)
    assert row_ids(rest) == row_ids(full)[1:] and not rest.more


async def test_postgres_unknown_table_is_an_invalid_configuration(pg_table):
    error = await poll_error({"dsn": pg_table[0]}, table="app.missing", column="id")
    assert error.type == POLL_CONFIG_INVALID and "app.missing" in error.message


async def test_an_unreachable_postgres_raises_source_unavailable_without_echoing_the_password():
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    error = await poll_error({"dsn": f"postgresql://app:hunter2@127.0.0.1:{port}/shop"})
    assert error.type == POLL_SOURCE_UNAVAILABLE and f"shop at 127.0.0.1:{port}" in error.message
    assert "hunter2" not in error.message


async def test_a_malformed_dsn_is_an_invalid_connection():
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    error = await poll_error({"dsn": "host=127.0.0.1 port"})
    assert error.type == POLL_CONFIG_INVALID and "fix the DSN" in error.message
