"""Connection references resolved on the worker and sent to a real feed server; PostgreSQL failures never
repeat the password (split from tests/core/test_poll_connections.py: sockets)."""

from __future__ import annotations

import socket
from contextlib import AbstractContextManager, nullcontext

import pytest
from temporalio.exceptions import ApplicationError

from tests.support.pollsources import Entry, FeedServer, activity_env, rss_document
from wf_initiation.activities.poll import POLL_CONFIG_INVALID, POLL_SOURCE_UNAVAILABLE, PollRequest, poll_rss, poll_sql
from wf_initiation.activities.poll._runtime import worker_connections
from wf_initiation.core.connections import WorkerConnections
from wf_initiation.core.deployment import parse_deployment

SECRET = "pl4nted-S3CRET-value"


def bound(**connections: dict) -> tuple[AbstractContextManager[None], dict[str, dict]]:
    """Polls run as on a worker started with a deployment of these connections; their settings as sent."""
    dep = parse_deployment({"connections": connections})
    sent = {name: c.model_dump() for name, c in dep.connections.items()}
    return worker_connections(WorkerConnections(dep.connections)), sent


async def test_a_header_reference_is_resolved_on_the_worker_and_sent(feed_server: FeedServer, monkeypatch):
    monkeypatch.setenv("WFI_TEST_FEED_TOKEN", f"Bearer {SECRET}")
    feed_server.serve(rss_document([Entry("p1", "P1", "http://e.test/1", "2024-05-01T10:00:00Z")]))
    worker, sent = bound(blog={"connector": "rss", "headers": {"Authorization": "env:WFI_TEST_FEED_TOKEN"},
                               "origins": [feed_server.origin]})
    req = PollRequest(connector="rss.item_published", config={"feed": feed_server.url}, connection=sent["blog"])
    with worker:
        response = await activity_env().run(poll_rss, req)
    assert len(response.items) == 1 and feed_server.received_headers()[-1]["Authorization"] == f"Bearer {SECRET}"


async def test_an_unset_reference_fails_the_poll_as_an_invalid_connection(feed_server: FeedServer):
    worker, sent = bound(blog={"connector": "rss", "headers": {"Authorization": "env:WFI_TEST_NOT_SET_ANYWHERE"},
                               "origins": [feed_server.origin]})
    req = PollRequest(connector="rss.item_published", config={"feed": feed_server.url}, connection=sent["blog"])
    with worker, pytest.raises(ApplicationError) as caught:
        await activity_env().run(poll_rss, req)
    assert caught.value.type == POLL_CONFIG_INVALID and "env:WFI_TEST_NOT_SET_ANYWHERE" in caught.value.message


@pytest.mark.parametrize("dsn", [
    f"host=127.0.0.1 password={SECRET} port",  # malformed: the parser's message would quote it
    f"postgresql://app:{SECRET}@127.0.0.1:99999999/shop",  # an impossible port
    f"postgresql://app:{SECRET}@127.0.0.1:{{port}}/shop",  # nothing listens there
])
async def test_no_postgres_failure_repeats_the_password(dsn: str, monkeypatch):
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("WFI_TEST_DSN", dsn.replace("{port}", str(port)))
    worker, sent = bound(pg={"connector": "sql", "dsn": "env:WFI_TEST_DSN"})
    for connection in (sent["pg"], {"dsn": dsn.replace("{port}", str(port))}):  # and one sent inline (no deployment)
        req = PollRequest(connector="sql.row_inserted", config={"table": "t", "column": "id"}, connection=connection)
        with (worker if connection is sent["pg"] else nullcontext()), pytest.raises(ApplicationError) as caught:
            await activity_env().run(poll_sql, req)
        assert caught.value.type in (POLL_CONFIG_INVALID, POLL_SOURCE_UNAVAILABLE)
        assert SECRET not in caught.value.message and caught.value.__cause__ is None
