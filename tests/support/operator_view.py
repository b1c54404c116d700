"""The operator's page in a real browser: activations in telling states, shown by the Temporal Web UI.

As a script (docs/operator-view.md)::

    .venv/bin/python -m tests.support.operator_view --out .wfi/operator-view

starts a dev server with its Web UI, a worker with ``WfiPlugin``, activates three workflows and
drives them into the states an operator meets (deliveries of every kind, a schedule with a missed
range awaiting a decision, a poll holding an invalid item and a failing one), then takes a headless
Chromium screenshot of each activation's page and writes its Current Details markdown beside it.
``tests/integration/test_operator_view.py`` runs the same scenario.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import sqlite3
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.support.activation import make_spec
from tests.support.browser import Browser, find_chromium, free_port
from tests.support.waits import until_passed
from wf_initiation.client import WfiClient
from wf_initiation.core.schedule import next_occurrences, parse_schedule
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import OperatorRequest, workflow_id_for
from wf_initiation.wire.search_attributes import ALL as SEARCH_ATTRIBUTES

SECRET_TOKEN = "tok-9f8e7d6c5b4a"

SUPPORT = """
name: {name}
on:
  mail.received:
    inbox: support@acme.com
  as: message
  when: "{{{{ message.recipient != 'noreply@acme.com' and (message.urgency is not defined or message.urgency > 0) }}}}"
  queue_by: "{{{{ message.thread_id }}}}"
"""
NIGHTLY = """
name: {name}
on:
  - time.schedule:
      cron: "0 9 * * 1-5"
      timezone: Europe/Berlin
    as: report
  - time.schedule:
      interval: 2s
      timezone: Europe/Berlin
    as: pulse
"""
ORDERS = """
name: {name}
on:
  - sql.row_inserted:
      table: orders
      column: id
      id_column: ref
      connection: orders-db
    as: order
    when: "{{{{ order.row.amount > 10 }}}}"
    into:
      ref: "{{{{ order.row_id }}}}"
  - rss.item_published:
      feed: "http://127.0.0.1:9/feed.xml?token={token}"
      connection: blog
    as: item
    into:
      ref: "{{{{ item.id }}}}"
"""


@dataclass
class Page:
    workflow: str
    workflow_id: str
    run_id: str
    markdown: str


def _mail(mid: str, thread: str = "t1", **extra: Any) -> dict[str, Any]:
    return {"message_id": mid, "from": "a@b.c", "recipient": "help@acme.com", "subject": "printer on fire",
            "thread_id": thread, **extra}


async def _eventually(check: Callable[[], Awaitable[bool]], timeout: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("the scenario did not reach the expected state")
        await asyncio.sleep(0.2)


async def build_scenario(client: Client, task_queue: str, workdir: pathlib.Path) -> list[str]:
    """Activate three workflows and drive them into telling states; return their workflow names.

    Needs a worker with ``WfiPlugin(sample_runs=True)`` serving ``task_queue``.
    """
    wfi = WfiClient(client, task_queue=task_queue)
    tag = uuid.uuid4().hex[:6]
    names = [f"support-triage-{tag}", f"nightly-report-{tag}", f"orders-{tag}"]

    support = make_spec(workdir, SUPPORT.format(name=names[0]), task_queue=task_queue)
    await wfi.activate(support)
    await wfi.deliver(names[0], _mail("m-100", hold=True))
    await wfi.deliver(names[0], _mail("m-101"))  # queued behind m-100's thread
    await wfi.deliver(names[0], _mail("m-102", recipient="noreply@acme.com"))
    await wfi.deliver(names[0], _mail("m-100", subject="printer no longer on fire", hold=True))  # conflict
    await wfi.deliver(names[0], {"message_id": "m-103", "from": "a@b.c"})  # invalid: fields missing
    await wfi.deliver(names[0], _mail("m-104", thread="t2", urgency="high"))  # guard fault: "high" > 0
    await wfi.deliver(names[0], _mail("m-105", thread="t3"))

    nightly = make_spec(workdir, NIGHTLY.format(name=names[1]), task_queue=task_queue,
                        missed={"policy": "catch_up", "bound": 1, "overflow": "wait_for_operator"}, late_after="1s")
    await wfi.activate(nightly)
    await wfi.operate(names[1], OperatorRequest(action="backfill", entry="report", start="2026-11-23T00:00:00+01:00",
                                                end="2026-11-28T00:00:00+01:00"))

    async def pulsed() -> bool:
        return (await wfi.summary(names[1]))["schedules"]["pulse"]["counts"].get("admitted", 0) >= 1
    await _eventually(pulsed)
    # Paused across several instants, resumed: one is caught up (the bound), the rest await a decision.
    await wfi.operate(names[1], OperatorRequest(action="pause", entry="pulse"))
    # Three instants of the 2 s pulse pass while it is paused, the last late by more than late_after.
    third = next_occurrences(parse_schedule({"interval": "2s"}), datetime.now(UTC), 3)[-1]
    await until_passed(third + timedelta(seconds=1))
    await wfi.operate(names[1], OperatorRequest(action="resume", entry="pulse"))

    db = workdir / f"orders-{tag}.db"
    with sqlite3.connect(db) as con:
        con.execute("create table orders (id integer primary key, ref text, amount)")
        # o-1 starts a run, o-2 is suppressed by `when`, the third has no identity: invalid, held.
        con.executemany("insert into orders values (?, ?, ?)", [(1, "o-1", 50), (2, "o-2", 5), (3, None, 70)])
    orders = make_spec(workdir, ORDERS.format(name=names[2], token=SECRET_TOKEN), task_queue=task_queue,
                       invalid_items="hold", poll={"interval": "1s", "backoff_initial": "1s", "backoff_max": "2s"},
                       connections={"orders-db": {"connector": "sql", "sqlite": str(db)},
                                    "blog": {"connector": "rss", "timeout": 1}})
    await wfi.activate(orders)

    async def settled() -> bool:
        polls = (await wfi.summary(names[2]))["polls"]
        return polls["order"]["held"] and polls["item"]["failures"] >= 1
    await _eventually(settled)
    return names


async def pages(client: Client, names: list[str]) -> list[Page]:
    """Each activation's Current Details, read as the UI reads them (the metadata query)."""
    out = []
    for name in names:
        handle = client.get_workflow_handle(workflow_id_for(name))
        metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        out.append(Page(name, workflow_id_for(name), (await handle.describe()).run_id, metadata.current_details))
    return out


def page_url(ui: str, namespace: str, page: Page) -> str:
    """The Web UI's "User Metadata" tab of the activation: Summary, Details and Current Details."""
    from urllib.parse import quote

    return f"{ui}/namespaces/{namespace}/workflows/{quote(page.workflow_id, safe='')}/{page.run_id}/user-metadata"


async def screenshot(chromium: str, url: str, target: pathlib.Path, *, heading: str) -> str:
    """A PNG of the page once it shows ``heading``; returns the page's rendered text."""
    async with Browser(chromium, height=1600) as browser:
        text = await browser.open(url, wait_for=heading)
        await browser.screenshot(target)
    return text


async def main(out: pathlib.Path) -> int:
    chromium = find_chromium()
    out.mkdir(parents=True, exist_ok=True)
    ui_port = free_port()
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(pathlib.Path(sys.executable).parent / "temporal"), ui=True, ui_port=ui_port,
        search_attributes=list(SEARCH_ATTRIBUTES), data_converter=pydantic_data_converter,
        dev_server_extra_args=["--dynamic-config-value", 'history.timerProcessorMaxTimeShift="10ms"'])
    queue = f"operator-view-{uuid.uuid4().hex[:6]}"
    try:
        async with Worker(env.client, task_queue=queue, plugins=[WfiPlugin(sample_runs=True)]):
            with tempfile.TemporaryDirectory() as work:
                names = await build_scenario(env.client, queue, pathlib.Path(work))
                for page in await pages(env.client, names):
                    (out / f"{page.workflow}.md").write_text(page.markdown)
                    print(f"{page.workflow}: {len(page.markdown.encode())} bytes of markdown")
                    if chromium:
                        png = out / f"{page.workflow}.png"
                        url = page_url(f"http://127.0.0.1:{ui_port}", env.client.namespace, page)
                        await screenshot(chromium, url, png, heading=page.workflow)
                        print(f"  {url}\n  screenshot {png}")
        if not chromium:
            print("no Chromium found (apt-get install -y chromium): markdown only", file=sys.stderr)
    finally:
        await env.shutdown()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path(".wfi/operator-view"))
    sys.exit(asyncio.run(main(parser.parse_args().out)))
