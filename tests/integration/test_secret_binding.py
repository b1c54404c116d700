"""Whoever can start a workflow cannot read the worker's secrets (issue 18 item 3).

The attack: a client with start permission (a webhook bridge's credentials) starts ``wfi.Activation``
with update-with-start, as ``WfiClient.activate`` does, but with a spec it built by hand, whose feed
connection names the worker's secret (``env:``) and a file of the worker (``file:/etc/hostname``)
in its headers and points at a server of its own. The worker resolves references only of a
connection equal to one of its own deployment's, and sends an rss connection's credentials only to
the origins that connection names; everything else is a recorded poll failure naming the fix.
"""

from __future__ import annotations

import pathlib
import uuid
from typing import Any

import pytest
from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.hostile import HOOK, still_serves
from tests.support.pollsources import Entry, FeedServer, activity_env, rss_document
from tests.support.waits import assert_eventually
from wf_initiation.activities.poll import POLL_CONFIG_INVALID, PollRequest, poll_rss
from wf_initiation.activities.poll._runtime import worker_connections
from wf_initiation.client import WfiClient
from wf_initiation.core._diagnostics import DiagnosticError
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.connections import WorkerConnections
from wf_initiation.core.deployment import parse_deployment
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import ACTIVATE_UPDATE, ACTIVATION_WORKFLOW, workflow_id_for

SECRET = "worker-only-s3cret-7f3a"
HOSTNAME_FILE = "/etc/hostname"
FAST_POLL = {"interval": "300ms", "backoff_initial": "300ms", "backoff_max": "1s", "timeout": "5s"}
FEED = """
name: {name}
on:
  rss.item_published: {{feed: "{url}", connection: blog}}
  as: post
"""


def hostname() -> str | None:
    try:
        text = pathlib.Path(HOSTNAME_FILE).read_text().strip()
    except OSError:
        return None
    return text if len(text) >= 3 else None


def posts(*numbers: int) -> list[Entry]:
    return [Entry(guid=f"post-{n}", title=f"Post {n}", link=f"http://example.test/{n}",
                  published=f"2024-05-01T10:{n:02d}:00Z") for n in numbers]


def forged(spec: ActivationSpec, *, feed: str, connection: dict[str, Any]) -> ActivationSpec:
    """The legitimate spec with its feed entry's URL and connection replaced: what an attacker writes."""
    (entry,) = spec.entries
    return spec.model_copy(update={"entries": [entry.model_copy(update={
        "config": {**entry.config, "feed": feed}, "connection_settings": connection})]})


async def start_with_update(client: Client, spec: ActivationSpec, task_queue: str) -> None:
    """Update-with-start of the activation with a plain Temporal client, as WfiClient.activate does."""
    operation = WithStartWorkflowOperation(
        ACTIVATION_WORKFLOW, args=[spec, None], id=workflow_id_for(spec.workflow), task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
    await client.execute_update_with_start_workflow(ACTIVATE_UPDATE, spec, start_workflow_operation=operation,
                                                    id=f"activate-{uuid.uuid4().hex}")


async def refused_poll(wfi: WfiClient, workflow: str, *expected: str) -> str:
    async def check() -> str:
        poll = (await wfi.state(workflow))["polls"]["post"]
        assert poll["failures"] >= 1 and poll["last_error"], poll
        for text in expected:
            assert text in poll["last_error"], poll["last_error"]
        return poll["last_error"]

    return await assert_eventually(check, timeout=60)


async def test_a_spec_written_by_whoever_can_start_a_workflow_never_makes_the_worker_send_its_secrets(
    dev_env, task_queue: str, tmp_path: pathlib.Path, feed_server: FeedServer, other_server: FeedServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # proves: TRIG-6
    monkeypatch.setenv("WFI_T_WORKER_SECRET", SECRET)  # the in-process worker's environment
    legit, attacker = feed_server, other_server
    legit.serve(rss_document(posts(1)))
    attacker.serve(rss_document(posts(1)))
    blog = {"connector": "rss", "headers": {"Authorization": "env:WFI_T_WORKER_SECRET"}, "origins": [legit.origin]}
    deployment = parse_deployment({"temporal": {"task_queue": task_queue}, "connections": {"blog": blog}})
    client = dev_env.client
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True, deployment=deployment)]):
        wfi = WfiClient(client, task_queue=task_queue)
        feed = unique("feed")
        spec = make_spec(tmp_path, FEED.format(name=feed, url=legit.url), task_queue=task_queue, poll=FAST_POLL,
                         connections={"blog": blog})
        await wfi.activate(spec)  # the deployment's own binding: its feed gets the secret
        await assert_eventually(lambda: _accepted(wfi, feed, "post-1"), timeout=60)
        assert legit.received_headers()[-1]["Authorization"] == SECRET

        def attack(feed_url: str, connection: dict[str, Any]) -> ActivationSpec:
            return forged(spec.model_copy(update={"workflow": unique("attack")}), feed=feed_url, connection=connection)

        # 1. The attack: the worker's env secret and one of its files in the headers, sent elsewhere.
        named = attack(attacker.url, {"connector": "rss", "origins": [attacker.origin], "headers": {
            "Authorization": "env:WFI_T_WORKER_SECRET", "X-Host": f"file:{HOSTNAME_FILE}"}})
        # 2. The deployment's connection copied exactly, the feed pointed elsewhere.
        copied = attack(attacker.url, spec.entries[0].connection_settings)
        # 3. The same connection spelled otherwise: a setting changed; a reference respelled (then it is
        # no reference: a plain value, sent as it is).
        respelled = attack(attacker.url, {**spec.entries[0].connection_settings, "origins": [attacker.origin]})
        upper = attack(attacker.url, {"connector": "rss", "headers": {"Authorization": "ENV:WFI_T_WORKER_SECRET"}})
        # 4. References where no reference is resolved: the feed URL's query, no connection at all.
        in_url = attack(f"{attacker.url}?token=env:WFI_T_WORKER_SECRET&h=file:{HOSTNAME_FILE}", {})
        for hostile in (named, copied, respelled, upper, in_url):
            await start_with_update(client, hostile, task_queue)

        not_ours = "is not one of this worker's deployment's connections"
        await refused_poll(wfi, named.workflow, not_ours, "'headers.X-Host'", "--deployment")
        await refused_poll(wfi, copied.workflow, "is not one of the connection's origins", legit.origin.split("//")[1])
        await refused_poll(wfi, respelled.workflow, not_ours, "'origins'")
        for fetched in (upper, in_url):  # fetched, with the literal texts
            await assert_eventually(lambda w=fetched.workflow: _accepted(wfi, w, "post-1"), timeout=60)

        received = attacker.received()
        assert "ENV:WFI_T_WORKER_SECRET" in received and "token=env:WFI_T_WORKER_SECRET" in received, received
        assert SECRET not in received, "the worker's secret reached the attacker's server"
        if (host := hostname()) is not None:
            assert host not in received, "the worker's file reached the attacker's server"
        for hostile in (named, copied, respelled, upper):
            recorded = await _history_bytes(client, hostile.workflow)
            assert SECRET.encode() not in recorded, "the secret's value in the attacker's activation's history"

        hook = unique("hook")  # a normal activation: a normal delivery starts its run
        await wfi.activate(make_spec(tmp_path, HOOK.format(name=hook, extra=""), task_queue=task_queue))
        await still_serves(wfi, client, hook)
        legit.serve(rss_document(posts(1, 2)))  # and the deployment's own feed is still polled, with its secret
        await assert_eventually(lambda: _accepted(wfi, feed, "post-2"), timeout=60)
        assert legit.received_headers()[-1]["Authorization"] == SECRET


async def _accepted(wfi: WfiClient, workflow: str, ident: str) -> None:
    state = await wfi.state(workflow, include_events=True)
    accepted = [e["delivery_id"] for e in state["events"].values() if e["disposition"] == "accepted"]
    assert ident in accepted and state["counters"].get("runs_started", 0) == len(accepted), accepted


async def _history_bytes(client: Client, workflow: str) -> bytes:
    history = await client.get_workflow_handle(workflow_id_for(workflow)).fetch_history()
    return history.to_json().encode()


async def test_a_worker_without_a_deployment_resolves_no_reference_and_says_so(feed_server: FeedServer, monkeypatch):
    monkeypatch.setenv("WFI_T_WORKER_SECRET", SECRET)
    feed_server.serve(rss_document(posts(1)))
    req = PollRequest(connector="rss.item_published", config={"feed": feed_server.url}, connection={
        "connector": "rss", "headers": {"Authorization": "env:WFI_T_WORKER_SECRET"}, "origins": [feed_server.origin]})
    with pytest.raises(ApplicationError) as caught:
        await activity_env().run(poll_rss, req)
    assert caught.value.type == POLL_CONFIG_INVALID
    assert "started without a deployment, so it resolves no secret reference" in caught.value.message
    assert "WfiPlugin(deployment=...)" in caught.value.message and SECRET not in caught.value.message
    assert feed_server.received_headers() == [], "nothing was fetched"
    plain = PollRequest(connector="rss.item_published", config={"feed": feed_server.url}, connection={"timeout": 5})
    assert len((await activity_env().run(poll_rss, plain)).items) == 1, "a connection of plain settings is used"


def test_a_connection_of_plain_settings_is_used_as_sent_on_any_worker() -> None:
    own = parse_deployment({"connections": {"blog": {"connector": "rss", "timeout": 1}}}).connections
    plain = {"connector": "rss", "timeout": 7, "headers": {"Accept": "text/xml", "Authorization": "ENV:NOT_A_REF"}}
    assert WorkerConnections(own).bind("rss.item_published", plain) == {k: v for k, v in plain.items() if k != "connector"}
    assert WorkerConnections.none().bind("rss.item_published", {}) == {}


@pytest.mark.parametrize("sent", [
    {"connector": "rss", "headers": {"Authorization": "env:WFI_T_WORKER_SECRET"}, "origins": ["http://a.test"],
     "timeout": 10},                                                               # one setting more
    {"connector": "rss", "headers": {"Authorization": "env:WFI_T_WORKER_SECRET"}, "origins": ["http://a.test"],
     "extra": {"nested": "file:/etc/hostname"}},                                    # a reference nested deeper
    {"connector": "rss", "headers": {"Authorization": "env:WFI_T_OTHER"}, "origins": ["http://a.test"]},
    {"connector": "sql", "headers": {"Authorization": "env:WFI_T_WORKER_SECRET"}, "origins": ["http://a.test"]},
    {"connector": "rss", "headers": {"Authorization": "env:WFI_T_WORKER_SECRET"}, "origins": ["http://a.test"],
     "timeout": True},                                                              # True is not 1
])
def test_only_a_connection_equal_to_the_deployments_own_is_bound(sent: dict) -> None:
    own = parse_deployment({"connections": {"blog": {
        "connector": "rss", "headers": {"Authorization": "env:WFI_T_WORKER_SECRET"}, "origins": ["http://a.test"],
        "timeout": 1}}}).connections
    bound = WorkerConnections(own)
    assert bound.bind("rss.item_published", own["blog"].model_dump()) == own["blog"].settings()
    with pytest.raises(ValueError, match="is not one of this worker's deployment's connections"):
        bound.bind("rss.item_published", sent)


def test_an_rss_connection_whose_headers_hold_a_secret_must_name_its_origins() -> None:
    with pytest.raises(DiagnosticError) as caught:
        parse_deployment({"connections": {"blog": {"connector": "rss", "headers": {"Authorization": "env:X"}}}})
    assert "origins: [" in caught.value.diagnostics[0].message
    with pytest.raises(DiagnosticError):
        parse_deployment({"connections": {"blog": {"connector": "rss", "origins": ["ftp://x"]}}})
    parse_deployment({"connections": {"blog": {"connector": "rss", "headers": {"Accept": "text/xml"}}}})


async def test_a_bound_connection_sends_its_secret_only_to_its_origins(
    feed_server: FeedServer, other_server: FeedServer, monkeypatch,
) -> None:
    monkeypatch.setenv("WFI_T_WORKER_SECRET", SECRET)
    other_server.serve(rss_document(posts(1)))
    feed_server.redirect(other_server.url)  # its own origin redirects elsewhere
    own = parse_deployment({"connections": {"blog": {"connector": "rss", "headers": {
        "Authorization": "env:WFI_T_WORKER_SECRET"}, "origins": [feed_server.origin]}}}).connections
    sent = own["blog"].model_dump()
    with worker_connections(WorkerConnections(own)):
        followed = await activity_env().run(poll_rss, PollRequest(
            connector="rss.item_published", config={"feed": feed_server.url}, connection=sent))
        with pytest.raises(ApplicationError) as caught:
            await activity_env().run(poll_rss, PollRequest(
                connector="rss.item_published", config={"feed": other_server.url}, connection=sent))
    assert len(followed.items) == 1 and feed_server.received_headers()[0]["Authorization"] == SECRET
    assert SECRET not in other_server.received(), "the redirect was followed without the credentials"
    assert caught.value.type == POLL_CONFIG_INVALID and "not one of the connection's origins" in caught.value.message
