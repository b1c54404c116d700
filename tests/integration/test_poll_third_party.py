"""A third-party poll connector, installed as a distribution (docs/poll-contract.md, "Adding a connector").

Its manifest comes through the ``wf_initiation.connectors`` entry points; its ``implementation``
names its activity, which ``WfiPlugin`` registers by itself. A connector whose manifest names no
implementation is registered with ``WfiPlugin(poll_activities=...)``, as before.
"""

from __future__ import annotations

import json
import logging
import pathlib
import sys
import textwrap

import pytest
from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.waits import assert_eventually
from wf_initiation.activities.poll import poll_activities
from wf_initiation.activities.poll._registry import ImplementationError, load_implementation
from wf_initiation.client import WfiClient
from wf_initiation.core._catalog import ENTRY_POINT_GROUP, Catalog, ManifestError, parse_manifest
from wf_initiation.plugin import WfiPlugin

MODULE = "fake_acme_tickets"
CONNECTOR_SOURCE = '''
"""acme.ticket_opened: tickets appended to a JSON-lines file (a third-party connector)."""
import json
import pathlib

from temporalio import activity

from wf_initiation.activities.poll import PollRequest, PollResponse, ResponseBuilder, run_poll

def manifest(name, implementation):
    return {
        "name": name, "version": "0.1.0", "kind": "poll", "binds": "ticket", "stable_order": True,
        "input_schema": {"type": "object", "additionalProperties": False, "required": ["queue"],
                         "properties": {"queue": {"type": "string"}, "connection": {"type": "string"}}},
        "payload_schema": {"type": "object", "required": ["ticket_id"], "properties": {"ticket_id": {"type": "string"}}},
        "delivery_id": "ticket_id", **({"implementation": implementation} if implementation else {}),
    }

TICKETS = manifest("acme.ticket_opened", "fake_acme_tickets:poll_tickets")
EXPLICIT = manifest("acme.ticket_closed", None)
BROKEN = manifest("acme.ticket_broken", "fake_acme_tickets:not_there")

async def _read(req, connection, deadline):
    lines = pathlib.Path(connection.settings["file"]).read_text().splitlines()
    start = int(req.cursor or 0)
    builder = ResponseBuilder(req.cursor, limit=req.limit)
    for number, line in enumerate(lines[start:], start=start + 1):
        if not builder.add(json.loads(line), str(number), id_field="ticket_id"):
            return builder.response(more=True)
    return builder.response(more=False)

@activity.defn(name="wfi.poll.acme.ticket_opened")
async def poll_tickets(req: PollRequest) -> PollResponse:
    return await run_poll(req, _read)

@activity.defn(name="wfi.poll.acme.ticket_closed")
async def poll_closed(req: PollRequest) -> PollResponse:
    return await run_poll(req, _read)
'''


@pytest.fixture
def acme(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """An installed distribution (on sys.path, with entry points) providing three poll connectors."""
    (tmp_path / f"{MODULE}.py").write_text(CONNECTOR_SOURCE)
    dist = tmp_path / f"{MODULE}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-acme-tickets\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent(f"""\
        [{ENTRY_POINT_GROUP}]
        acme.tickets = {MODULE}:TICKETS
        acme.explicit = {MODULE}:EXPLICIT
        acme.broken = {MODULE}:BROKEN
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    return tmp_path


def test_the_worker_registers_the_activity_a_third_party_manifest_names(acme, caplog) -> None:
    import fake_acme_tickets

    with caplog.at_level(logging.WARNING, logger="wf_initiation.poll"):
        registered = poll_activities()
    assert fake_acme_tickets.poll_tickets in registered
    assert fake_acme_tickets.poll_closed not in registered  # its manifest names no implementation
    assert "acme.ticket_broken" in caplog.text and "cannot be imported" in caplog.text  # logged, left out
    with_explicit = poll_activities(extra=[fake_acme_tickets.poll_closed])
    assert fake_acme_tickets.poll_closed in with_explicit and len(with_explicit) == len(registered) + 1


def test_an_implementation_with_another_activity_name_is_refused(acme) -> None:
    import fake_acme_tickets  # noqa: F401 - importable for the check below

    wrong = parse_manifest({**Catalog.default().get("acme.ticket_closed").model_dump(),
                            "implementation": f"{MODULE}:poll_tickets"})
    with pytest.raises(ImplementationError, match="decorate it with @activity.defn"):
        load_implementation(wrong)
    with pytest.raises(ManifestError, match="package.module:function"):
        parse_manifest({**Catalog.default().get("acme.ticket_closed").model_dump(), "implementation": "no-colon"})


def test_a_builtin_connector_whose_implementation_cannot_be_loaded_fails_the_worker_wiring() -> None:
    # A third-party one is logged and left out (above); a built-in one is a broken install: say so.
    rss = Catalog.default(third_party=False).get("rss.item_published")
    moved = parse_manifest({**rss.model_dump(), "implementation": "wf_initiation.activities.poll.rss:poll_gone"})
    with pytest.raises(ImplementationError, match=r"rss.item_published: implementation .*poll_gone.* cannot be imported"):
        poll_activities(Catalog([moved]))


@pytest.mark.parametrize("connector", ["acme.ticket_opened", "acme.ticket_closed"])
async def test_a_third_party_connector_polls_and_starts_runs(
    acme, dev_env, task_queue: str, tmp_path: pathlib.Path, connector: str
) -> None:
    # proves: POLL-1, POLL-5
    import fake_acme_tickets

    tickets = tmp_path / "tickets.jsonl"
    tickets.write_text("".join(json.dumps({"ticket_id": f"t{n}"}) + "\n" for n in range(3)))
    name = unique("acme")
    spec = make_spec(tmp_path, f"name: {name}\non:\n  {connector}: {{queue: support}}\n  as: ticket\n",
                     task_queue=task_queue, connections={"f": {"connector": "acme", "file": str(tickets)}},
                     poll={"interval": "200ms", "backoff_initial": "200ms", "backoff_max": "1s"})
    extra = [fake_acme_tickets.poll_closed] if connector == "acme.ticket_closed" else []
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(poll_activities=extra)]):
        wfi = WfiClient(dev_env.client, task_queue=task_queue)
        await wfi.activate(spec)

        async def started() -> None:
            state = await wfi.state(name)
            assert state["counters"].get("runs_started") == 3 and state["polls"]["ticket"]["cursor"] == "3", state["polls"]

        await assert_eventually(started, timeout=60)


def test_the_catalog_reads_the_connector_folders_without_importing_temporal_or_connector_code() -> None:
    import subprocess

    probe = (
        "import sys\n"
        "from wf_initiation.core._catalog import Catalog, builtin_manifests\n"
        "names = [m.name for m in builtin_manifests()]\n"
        "assert {'rss.item_published', 'sql.row_inserted', 'sheet.row_added'} <= set(names), names\n"
        "assert Catalog.default().get('sql.row_inserted').implementation\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('temporalio', 'httpx', 'psycopg', 'feedparser')\n"
        "               or m.endswith('.activity'))\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
