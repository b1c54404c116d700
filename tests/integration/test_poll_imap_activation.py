"""The README's support-triage Workfile, unchanged, polled over IMAP: a deployment connection with
``via: imap`` makes its ``mail.received`` entry a poll of a real dovecot mailbox (the session's, see
tests/support/pollsources.py), the password a reference in the worker's environment. Runs are
``wfi.EchoRun`` on a real dev server."""

from __future__ import annotations

import pathlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.pollsources import ImapServer, mail
from tests.support.replay import replay_failure
from tests.support.waits import assert_eventually
from wf_initiation.activities.poll.imap import _mailbox
from wf_initiation.client import WfiClient
from wf_initiation.core.deployment import parse_deployment
from wf_initiation.plugin import WfiPlugin

PASSWORD_ENV = "WFI_T_IMAP_ACTIVATION_PASSWORD"
FAST_POLL = {"interval": "300ms", "backoff_initial": "200ms", "backoff_max": "1s", "limit": 50, "timeout": "15s"}
WORKFILE = """
name: {name}
on:
  mail.received:
    inbox: support@acme.test
  as: message
  when: "{{{{ message.recipient != 'noreply@acme.test' }}}}"
  queue_by: "{{{{ message.thread_id }}}}"
"""


def ids_by_disposition(state: dict[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for record in sorted(state["events"].values(), key=lambda r: r["seq"]):
        out.setdefault(record["disposition"], []).append(record["delivery_id"])
    return out


async def test_a_mailbox_polled_over_imap_starts_one_run_per_message_across_a_uidvalidity_change(
    dev_env, task_queue: str, tmp_path: pathlib.Path, imap_server: ImapServer, monkeypatch
) -> None:
    # proves: POLL-1, POLL-5, POLL-6, POLL-9, POLL-11, POLL-12
    monkeypatch.setenv(PASSWORD_ENV, imap_server.password)
    monkeypatch.setattr(_mailbox, "MAX_MESSAGE_BYTES", 64 * 1024)  # the worker runs in this process
    box = f"S{uuid.uuid4().hex[:10]}"
    imap_server.create(box)
    t0 = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)

    def deliver(message_id: str, minute: int, **kw: Any) -> None:
        imap_server.append(box, mail(message_id, f"about {message_id}", **kw), t0 + timedelta(minutes=minute))

    connections = {"support-imap": {
        "connector": "mail", "via": "imap", "host": imap_server.host, "port": imap_server.port, "security": "none",
        "username": imap_server.username, "password": f"env:{PASSWORD_ENV}", "mailbox": box, "timeout": 10}}
    name = unique("imap")
    spec = make_spec(tmp_path, WORKFILE.format(name=name), task_queue=task_queue, connections=connections,
                     poll=FAST_POLL)
    assert spec.entries[0].kind == "poll"
    deliver("m1@example.test", 0)
    deliver("m2@example.test", 1, to="noreply@acme.test")
    deliver("big@example.test", 2, body="x" * 100_000)
    deliver("m3@example.test", 3, extra="In-Reply-To: <m1@example.test>\r\n")
    deployment = parse_deployment({"temporal": {"task_queue": task_queue}, "connections": connections})
    client = dev_env.client
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True, deployment=deployment)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(spec)

        async def first_messages() -> dict[str, Any]:
            state = await wfi.state(name, include_events=True)
            seen = ids_by_disposition(state)
            assert seen.get("suppressed") == ["m2@example.test"] and len(seen.get("quarantined", [])) == 1, seen
            assert set(seen.get("accepted", [])) | set(seen.get("queued", [])) == {"m1@example.test", "m3@example.test"}
            in_order = [r["delivery_id"] for r in sorted(state["events"].values(), key=lambda r: r["seq"])]
            assert [i.split(":")[0] for i in in_order] == ["m1@example.test", "m2@example.test", "quarantine",
                                                           "m3@example.test"], "in UID order"
            return state

        state = await assert_eventually(first_messages, timeout=60)
        assert "big@example.test" in str(state["errors"]), "the oversized message is recorded with its id"
        assert imap_server.password not in str(state), "the password is resolved on the worker, never carried"
        cursor = state["polls"]["message"]["cursor"]
        assert '"uid":4' in cursor

        imap_server.recreate(box)  # the mailbox is restored elsewhere: every UID renumbered
        deliver("m1@example.test", 0)
        deliver("m3@example.test", 3, extra="In-Reply-To: <m1@example.test>\r\n")
        deliver("m4@example.test", 4)

        async def after_the_change() -> dict[str, Any]:
            state = await wfi.state(name, include_events=True)
            notices = [e["message"] for e in state["errors"] if e["kind"] == "poll_notice"]
            assert len(notices) == 1 and "UIDVALIDITY changed" in notices[0], notices
            assert "m4@example.test" in str(state["events"]) and state["counters"].get("duplicates") == 1, state["counters"]
            return state

        state = await assert_eventually(after_the_change, timeout=60)
        assert state["summary"]["status"] == "active"

        deliver("m5@example.test", 5)

        async def runs() -> None:
            query = f'WfiActivation = "{spec.activation_id}" AND WorkflowType = "wfi.EchoRun"'
            found = sorted([w.id async for w in client.list_workflows(query)])
            assert found == sorted(f"{spec.activation_id}/message/m{n}@example.test" for n in (1, 3, 4, 5)), found

        await assert_eventually(runs, timeout=60)
        history = await wfi._handle(name).fetch_history()
    assert await replay_failure(history) is None, "the notice and the rescan replay"


async def test_a_refused_login_is_recorded_without_the_password_and_a_rotated_secret_is_used_at_the_next_poll(
    dev_env, task_queue: str, tmp_path: pathlib.Path, imap_server: ImapServer, monkeypatch
) -> None:
    # proves: POLL-10, POLL-2
    monkeypatch.setenv(PASSWORD_ENV, "stale-pw-0b9e")
    box = f"R{uuid.uuid4().hex[:10]}"
    imap_server.create(box)
    imap_server.append(box, mail("first@example.test", "first"), datetime(2026, 12, 5, 10, 0, tzinfo=UTC))
    connections = {"support-imap": {
        "connector": "mail", "via": "imap", "host": imap_server.host, "port": imap_server.port, "security": "none",
        "username": imap_server.username, "password": f"env:{PASSWORD_ENV}", "mailbox": box, "timeout": 10}}
    name = unique("imapauth")
    spec = make_spec(tmp_path, WORKFILE.format(name=name), task_queue=task_queue, connections=connections,
                     poll=FAST_POLL)
    deployment = parse_deployment({"temporal": {"task_queue": task_queue}, "connections": connections})
    client = dev_env.client
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True, deployment=deployment)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(spec)

        async def refused() -> dict[str, Any]:
            state = await wfi.state(name, include_events=True)
            poll = state["polls"]["message"]
            assert poll["failures"] >= 2 and "refused the login" in (poll["last_error"] or ""), poll
            return state

        state = await assert_eventually(refused, timeout=60)
        assert "stale-pw-0b9e" not in str(state) and state["polls"]["message"]["cursor"] is None
        assert state["counters"].get("runs_started", 0) == 0
        monkeypatch.setenv(PASSWORD_ENV, imap_server.password)  # the secret rotated behind the same reference

        async def started() -> None:
            query = f'WfiActivation = "{spec.activation_id}" AND WorkflowType = "wfi.EchoRun"'
            found = [w.id async for w in client.list_workflows(query)]
            assert found == [f"{spec.activation_id}/message/first@example.test"], found
            assert (await wfi.state(name))["polls"]["message"]["failures"] == 0

        await assert_eventually(started, timeout=60)
