"""Hostile poll sources against real activations on the dev server (issue 11 items 6, 8, 9, 10, 11).

Each test sends exactly the hostile input of its item, checks that it is contained (a failed poll
recorded, a quarantined item, a refused path, a secret nowhere), and ends by proving the activation
still polls and starts its run once the source behaves.
"""

from __future__ import annotations

import asyncio
import pathlib
import sqlite3
import subprocess
import sys
from typing import Any

import pytest
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.pollsources import CliWorker, Entry, FeedServer, rss_document
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.deployment import parse_deployment
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import OperatorRequest

FAST_POLL = {"interval": "200ms", "backoff_initial": "200ms", "backoff_max": "1s", "limit": 50, "timeout": "3s"}


def posts(*numbers: int, summary: str = "") -> list[Entry]:
    return [Entry(guid=f"post-{n}", title=f"Post {n}", link=f"http://example.test/{n}",
                  published=f"2024-05-01T10:{n:02d}:00Z", summary=summary) for n in numbers]


def rss_spec(tmp_path: pathlib.Path, name: str, task_queue: str, url: str, **settings: Any):
    return make_spec(tmp_path, f"""
        name: {name}
        on:
          rss.item_published: {{feed: "{url}"}}
          as: post
    """, task_queue=task_queue, poll=settings.pop("poll", FAST_POLL), **settings)


def make_table(path: pathlib.Path) -> pathlib.Path:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE items (seq INTEGER PRIMARY KEY AUTOINCREMENT, item_id TEXT, body TEXT)")
    return path


def insert(path: pathlib.Path, *rows: tuple[str, str]) -> None:
    with sqlite3.connect(path) as db:
        db.executemany("INSERT INTO items (item_id, body) VALUES (?, ?)", rows)


def sql_spec(tmp_path: pathlib.Path, name: str, task_queue: str, db: pathlib.Path, **settings: Any):
    return make_spec(tmp_path, f"""
        name: {name}
        on:
          sql.row_inserted: {{table: items, column: seq, id_column: item_id}}
          as: row
    """, task_queue=task_queue, connections={"db": {"connector": "sql", "sqlite": str(db)}},
        poll=settings.pop("poll", FAST_POLL), **settings)


def by_disposition(state: dict[str, Any], entry: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for record in sorted(state["events"].values(), key=lambda r: r["seq"]):
        if record["entry"] == entry:
            out.setdefault(record["disposition"], []).append(record["delivery_id"])
    return out


async def accepted(wfi: WfiClient, name: str, entry: str, expected: list[str], timeout: float = 60.0) -> dict:
    """Wait until exactly ``expected`` were accepted (so their runs were started); the state."""
    async def check() -> dict:
        state = await wfi.state(name, include_events=True)
        assert by_disposition(state, entry).get("accepted", []) == expected, by_disposition(state, entry)
        assert state["counters"].get("runs_started", 0) == len(expected)
        return state

    return await assert_eventually(check, timeout=timeout)


async def failed_polls(wfi: WfiClient, name: str, entry: str, at_least: int, text: str, timeout: float = 60.0) -> dict:
    async def check() -> dict:
        state = await wfi.state(name, include_events=True)
        poll = state["polls"][entry]
        assert poll["failures"] >= at_least and text in (poll["last_error"] or ""), poll
        return state

    return await assert_eventually(check, timeout=timeout)


# --- item 6: a trickling feed ----------------------------------------------------------------------


async def test_a_trickling_feed_starves_no_other_poll_and_its_activation_recovers(
    wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path, feed_server: FeedServer, other_server: FeedServer
) -> None:
    # proves: POLL-10
    feed_server.trickle(2.0)  # the feed: one byte every 2 s, never finishing
    slow = [unique("trickle") for _ in range(3)]
    for name in slow:
        await wfi.activate(rss_spec(tmp_path, name, task_queue, feed_server.url))
    db = make_table(tmp_path / "orders.db")
    sheets = tmp_path / "sheets"
    sheets.mkdir()
    (sheets / "Plan.csv").write_text("id,title\n")
    fast_sql, fast_sheet, fast_feed = unique("sqlfast"), unique("sheetfast"), unique("feedfast")
    other_server.serve(rss_document([]))
    await wfi.activate(rss_spec(tmp_path, fast_feed, task_queue, other_server.url))
    await wfi.activate(sql_spec(tmp_path, fast_sql, task_queue, db))
    await wfi.activate(make_spec(tmp_path, f"""
        name: {fast_sheet}
        on:
          sheet.row_added: {{sheet: Plan, id_column: id}}
          as: row
    """, task_queue=task_queue, connections={"s": {"connector": "sheet", "dir": str(sheets)}}, poll=FAST_POLL))
    for name in slow:  # each trickling poll was cut at its deadline, twice: every stuck read is gone
        await failed_polls(wfi, name, "post", 2, "deadline")
    for round_ in range(3):  # the other sources keep being polled on time, round after round
        insert(db, (f"o{round_}", "x"))
        with (sheets / "Plan.csv").open("a") as sheet:
            sheet.write(f"s{round_},row\n")
        other_server.serve(rss_document(posts(*range(1, round_ + 2))))
        await accepted(wfi, fast_sql, "row", [f"o{i}" for i in range(round_ + 1)], timeout=20)
        await accepted(wfi, fast_sheet, "row", [f"s{i}" for i in range(round_ + 1)], timeout=20)
        await accepted(wfi, fast_feed, "post", [f"post-{i}" for i in range(1, round_ + 2)], timeout=20)
    feed_server.serve(rss_document(posts(1)))
    for name in slow:
        await accepted(wfi, name, "post", ["post-1"])


async def test_sigterm_stops_a_worker_within_its_graceful_timeout_while_a_feed_trickles(
    dev_env, task_queue: str, tmp_path: pathlib.Path, feed_server: FeedServer
) -> None:
    feed_server.trickle(2.0)
    address = dev_env.client.service_client.config.target_host
    name = unique("sigterm")
    wfi = WfiClient(dev_env.client, task_queue=task_queue)
    worker = CliWorker(tmp_path, address, task_queue).start()
    try:
        # A long poll timeout: the worker, not the deadline, must end this poll.
        await wfi.activate(rss_spec(tmp_path, name, task_queue, feed_server.url, poll={**FAST_POLL, "timeout": "60s"}))

        async def trickling() -> None:
            assert feed_server.active() >= 1

        await assert_eventually(trickling, timeout=30)
        # wfi worker's graceful shutdown timeout is 0: in-flight activities are cancelled at once.
        elapsed = await asyncio.to_thread(worker.terminate, 15.0)
        assert elapsed < 15.0 and "worker stopped" in worker.log()
    finally:
        worker.kill()
    restarted = CliWorker(tmp_path, address, task_queue)
    restarted.log_path = tmp_path / "worker-restarted.log"
    restarted.start()
    try:
        feed_server.serve(rss_document(posts(1)))
        await accepted(wfi, name, "post", ["post-1"])
    finally:
        restarted.kill()


# --- item 8: connection secrets stay out of history, state, the UI and the worker log ---------------

SECRETS = {
    "pg": "Pg-s3cret-PLANTED-1",
    "bad_dsn": "Bad-dsn-s3cret-PLANTED-2",
    "down": "Down-s3cret-PLANTED-3",
    "mail": "Mail-s3cret-PLANTED-4",
    "token": "Feed-t0ken-PLANTED-5",
}


def cli(*args: str, env: dict[str, str] | None = None) -> str:
    """Run ``wfi`` as a user would; its combined output (it must succeed)."""
    done = subprocess.run([sys.executable, "-m", "wf_initiation", *args], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, f"wfi {' '.join(args)} failed ({done.returncode}): {done.stdout}{done.stderr}"
    return done.stdout + done.stderr


async def clis(*commands: tuple[str, ...]) -> list[str]:
    """Several ``wfi`` commands, two at a time (each is mostly interpreter start-up)."""
    limit = asyncio.Semaphore(2)

    async def one(args: tuple[str, ...]) -> str:
        async with limit:
            return await asyncio.to_thread(cli, *args)

    return list(await asyncio.gather(*(one(args) for args in commands)))


async def everything_recorded(client, names: list[str]) -> bytes:
    """Every event of every activation (and every run it started), serialized: inputs, results, failures."""
    out = bytearray()
    ids = [f"wfi-activation:{n}" for n in names]
    for name in names:
        ids += [w.id async for w in client.list_workflows(f'WfiWorkflow = "{name}" AND WorkflowType = "wfi.EchoRun"')]
    for workflow_id in ids:
        async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
            out += event.SerializeToString()
    return bytes(out)


async def current_details(client, name: str) -> str:
    from temporalio.api.sdk.v1 import WorkflowMetadata

    metadata = await client.get_workflow_handle(f"wfi-activation:{name}").query(
        "__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return metadata.current_details


@pytest.fixture
def pg_table(postgres_dsn: str) -> tuple[str, str]:
    import uuid

    import psycopg

    table = f"orders_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigserial PRIMARY KEY, item_id text NOT NULL)")
    return postgres_dsn, table


async def test_planted_secrets_appear_in_no_history_state_summary_current_details_or_worker_log(
    dev_env, task_queue: str, tmp_path: pathlib.Path, feed_server: FeedServer, pg_table: tuple[str, str]
) -> None:
    # proves: TRIG-6, INIT-3
    import socket

    import psycopg

    dsn, table = pg_table
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    token_file = tmp_path / "feed-token"
    token_file.write_text(f"Bearer {SECRETS['token']}\n")
    worker_env = {
        # PostgreSQL trusts local connections here: the planted password is sent, and ignored.
        "WFI_T_PG_DSN": dsn.replace("postgresql://postgres@", f"postgresql://postgres:{SECRETS['pg']}@"),
        "WFI_T_BAD_DSN": f"host=127.0.0.1 password={SECRETS['bad_dsn']} port",
        "WFI_T_DOWN_DSN": f"postgresql://app:{SECRETS['down']}@127.0.0.1:{closed_port}/shop",
        "WFI_T_MAIL_PW": SECRETS["mail"],
    }
    names = {key: unique(f"sec-{key}") for key in ("pg", "bad", "down", "feed", "mail")}
    sql = "sql.row_inserted: {{table: {table}, column: id, id_column: item_id, connection: {conn}}}"
    workfiles = {
        "pg": sql.format(table=table, conn="pg"), "bad": sql.format(table=table, conn="pg-bad"),
        "down": sql.format(table=table, conn="pg-down"),
        "feed": f'rss.item_published: {{feed: "{feed_server.url}", connection: blog}}',
        "mail": "mail.received: {inbox: help@acme.com, connection: mailbox}",
    }
    for key, trigger in workfiles.items():
        (tmp_path / f"{key}.yaml").write_text(f"name: {names[key]}\non:\n  {trigger}\n  as: item\n")
    address = dev_env.client.service_client.config.target_host
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text("\n".join([
        f"temporal: {{address: '{address}', task_queue: '{task_queue}'}}",
        "defaults: {poll: {interval: 300ms, backoff_initial: 300ms, backoff_max: 1s, timeout: 10s}}",
        "connections:",
        "  pg: {connector: sql, dsn: 'env:WFI_T_PG_DSN'}",
        "  pg-bad: {connector: sql, dsn: 'env:WFI_T_BAD_DSN'}",
        "  pg-down: {connector: sql, dsn: 'env:WFI_T_DOWN_DSN'}",
        f"  blog: {{connector: rss, origins: ['{feed_server.origin}'], headers: {{Authorization: 'file:{token_file}'}}}}",
        "  mailbox: {connector: mail, password: 'env:WFI_T_MAIL_PW'}",
        "workflows:",
        *[f"  {n}: {{workfile: {k}.yaml, run: {{workflow_type: wfi.EchoRun, task_queue: {task_queue}}}}}"
          for k, n in names.items()],
    ]) + "\n")
    feed_server.serve(rss_document(posts(1)))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"INSERT INTO {table} (item_id) VALUES ('order-1')")
    worker = CliWorker(tmp_path, address, task_queue, env=worker_env, deployment=deployment).start()
    wfi = WfiClient(dev_env.client, task_queue=task_queue)
    try:
        outputs = await clis(*[("activate", str(tmp_path / f"{key}.yaml"), "--deployment", str(deployment))
                               for key in names])
        outputs.append(cli("deliver", "--deployment", str(deployment), "--workflow", names["mail"], "--payload",
                           '{"message_id": "m-1", "from": "a@b.c", "recipient": "help@acme.com", "subject": "hi"}'))
        await accepted(wfi, names["pg"], "item", ["order-1"])  # the poll used the resolved DSN
        await accepted(wfi, names["feed"], "item", ["post-1"])
        await accepted(wfi, names["mail"], "item", ["m-1"])
        assert feed_server.received_headers()[-1]["Authorization"] == f"Bearer {SECRETS['token']}"
        await failed_polls(wfi, names["bad"], "item", 2, "not a valid PostgreSQL connection string")
        await failed_polls(wfi, names["down"], "item", 2, "refused or did not answer")
        target = ("--deployment", str(deployment), "--workflow")
        outputs += await clis(*[("state", *target, name, "--json") for name in names.values()],
                              *[("state", *target, names[key], *flag) for key in ("bad", "down")
                                for flag in (("--summary",), ())])
        outputs += [await current_details(dev_env.client, name) for name in names.values()]
        recorded = await everything_recorded(dev_env.client, list(names.values()))
    finally:
        await asyncio.to_thread(worker.terminate, 30.0)
    log = worker.log()
    assert "not a valid PostgreSQL connection string" in log and "refused or did not answer" in log  # the log has failures
    assert b"env:WFI_T_PG_DSN" in recorded and b"order-1" in recorded  # what history does carry
    shown = "\n".join(outputs)
    assert "env:WFI_T_PG_DSN" in shown and "refused or did not answer" in shown
    for label, secret in SECRETS.items():
        assert secret.encode() not in recorded, f"{label} secret in workflow history"
        assert secret not in shown, f"{label} secret in wfi output or current details"
        assert secret not in log, f"{label} secret in the worker log"


# --- item 9: redirects -----------------------------------------------------------------------------


async def test_a_feed_redirecting_elsewhere_gets_no_credentials_and_one_to_a_file_is_refused(
    dev_env, task_queue: str, tmp_path: pathlib.Path, feed_server: FeedServer, other_server: FeedServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WFI_T_REDIRECT_TOKEN", "Bearer redirect-s3cret")  # this worker's environment
    other_server.serve(rss_document(posts(1)))
    feed_server.redirect(other_server.url)  # another origin: another port
    name = unique("redirect")
    connections = {"blog": {"connector": "rss", "headers": {"Authorization": "env:WFI_T_REDIRECT_TOKEN"},
                            "origins": [feed_server.origin, other_server.origin]}}  # even one it may go to
    plugin = WfiPlugin(sample_runs=True, deployment=parse_deployment({"connections": connections}))
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[plugin]):
        wfi = WfiClient(dev_env.client, task_queue=task_queue)
        await _redirects(wfi, tmp_path, name, task_queue, feed_server, other_server, connections)


async def _redirects(wfi: WfiClient, tmp_path: pathlib.Path, name: str, task_queue: str, feed_server: FeedServer,
                     other_server: FeedServer, connections: dict[str, Any]) -> None:
    await wfi.activate(rss_spec(tmp_path, name, task_queue, feed_server.url, connections=connections))
    await accepted(wfi, name, "post", ["post-1"])
    assert feed_server.received_headers()[0]["Authorization"] == "Bearer redirect-s3cret"
    assert all("Authorization" not in h for h in other_server.received_headers())
    feed_server.redirect("file:///etc/passwd")
    state = await failed_polls(wfi, name, "post", 2, "only http:// and https://")
    assert "root:" not in str(state)
    feed_server.serve(rss_document(posts(1, 2)))
    await accepted(wfi, name, "post", ["post-1", "post-2"])
    assert feed_server.received_headers()[-1]["Authorization"] == "Bearer redirect-s3cret"


# --- item 10: a sheet path that leaves its directory ------------------------------------------------


async def test_a_sheet_leading_out_of_its_directory_is_refused_and_a_real_one_then_starts_runs(
    wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path
) -> None:
    sheets, outside = tmp_path / "sheets", tmp_path / "outside"
    sheets.mkdir()
    outside.mkdir()
    (outside / "private.csv").write_text("id,secret\np1,PRIVATE-ROW\n")
    (sheets / "Plan.csv").symlink_to(outside / "private.csv")  # a symlink pointing out
    name = unique("sheetpath")
    await wfi.activate(make_spec(tmp_path, f"""
        name: {name}
        on:
          sheet.row_added: {{sheet: Plan, id_column: id}}
          as: row
    """, task_queue=task_queue, connections={"s": {"connector": "sheet", "dir": str(sheets)}}, poll=FAST_POLL))
    state = await failed_polls(wfi, name, "row", 2, "outside the connection's directory")
    assert "PRIVATE-ROW" not in str(state) and state["counters"].get("runs_started", 0) == 0
    (sheets / "Plan.csv").unlink()
    (sheets / "Plan.csv").write_text("id,title\nr1,first\n")
    await accepted(wfi, name, "row", ["r1"])


async def test_a_workfile_naming_a_sheet_outside_the_directory_is_refused_by_validate(tmp_path: pathlib.Path) -> None:
    workfile = tmp_path / "escape.yaml"
    workfile.write_text("name: escape\non:\n  sheet.row_added: {sheet: ../../outside/private}\n")
    done = subprocess.run([sys.executable, "-m", "wf_initiation", "validate", str(workfile)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1 and "sheet" in done.stdout + done.stderr and "Traceback" not in done.stderr


# --- item 11: responses too big for one payload ------------------------------------------------------


@pytest.mark.parametrize("policy", ["quarantine", "hold"])
async def test_rows_too_big_for_one_response_are_paged_and_a_row_too_big_for_a_run_is_quarantined(
    wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path, policy: str
) -> None:
    # proves: POLL-11, POLL-8
    db = make_table(tmp_path / "wide.db")
    rows = [(f"w{n:02d}", "b" * 40_000) for n in range(40)]  # 1.6 MB: more than one response
    rows[20] = ("huge", "H" * 300_000)  # over the 256 KiB item limit
    insert(db, *rows)
    name = unique(f"wide-{policy}")
    await wfi.activate(sql_spec(tmp_path, name, task_queue, db, invalid_items=policy))
    small = [r[0] for r in rows if r[0] != "huge"]
    if policy == "hold":
        async def held() -> dict:
            state = await wfi.state(name, include_events=True)
            held_item = state["polls"]["row"]["held"]
            assert held_item is not None and "at most 262,144 bytes" in held_item["reason"], state["polls"]["row"]
            return state

        await assert_eventually(held, timeout=60)
        await accepted(wfi, name, "row", small[:20])
        result = await wfi.operate(name, OperatorRequest(action="release_held", entry="row", choice="quarantine"))
        assert result.ok, result.message
    state = await accepted(wfi, name, "row", small, timeout=90)
    poll = state["polls"]["row"]
    assert poll["cursor"] == "40" and poll["failures"] == 0 and state["error_counts"].get("quarantined") == 1
    (quarantined,) = [e for e in state["events"].values() if e["disposition"] == "quarantined"]
    assert "'huge'" in quarantined["detail"] and "cannot start a run" in quarantined["detail"]
    insert(db, ("after", "small"))
    await accepted(wfi, name, "row", [*small, "after"])


async def test_a_feed_of_six_half_megabyte_items_is_quarantined_and_the_next_item_starts_a_run(
    wfi: WfiClient, task_queue: str, tmp_path: pathlib.Path, feed_server: FeedServer
) -> None:
    # proves: POLL-11
    feed_server.serve(rss_document(posts(*range(1, 7), summary="s" * 500_000)))
    name = unique("bigfeed")
    await wfi.activate(rss_spec(tmp_path, name, task_queue, feed_server.url))

    async def quarantined() -> dict:
        state = await wfi.state(name, include_events=True)
        assert state["error_counts"].get("quarantined") == 6 and state["polls"]["post"]["failures"] == 0
        return state

    state = await assert_eventually(quarantined, timeout=60)
    assert state["counters"].get("runs_started", 0) == 0
    feed_server.serve(rss_document(posts(*range(1, 7), summary="s" * 500_000)[:6] + posts(7)))
    await accepted(wfi, name, "post", ["post-7"])
