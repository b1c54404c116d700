"""A worker applies an operator request in the old flat shape sent by a plain client (split from
tests/core/test_operator_request.py: a dev server)."""

from __future__ import annotations

import pathlib
import uuid
from typing import Any

from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.hostile import still_serves
from wf_initiation.client import WfiClient
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import OPERATE_UPDATE, LegacyOperatorRequest, Pause, Resume, workflow_id_for

WORKFILE = """
name: {name}
on:
  - time.schedule: {{cron: "0 * * * *", timezone: UTC}}
    as: tick
  - sheet.row_added: {{sheet: s}}
    as: row
  - http.request: {{}}
    as: hook
"""


def flat(action: str, **fields: Any) -> dict[str, Any]:
    """A request as builds before the union sent it: every field, null where unused."""
    return {name: None for name in LegacyOperatorRequest.model_fields} | {"action": action, **fields}


async def test_a_worker_applies_an_old_flat_request_sent_by_a_plain_client(dev_env, task_queue: str, tmp_path: pathlib.Path) -> None:
    # proves: SCHED-12
    # What a webhook bridge or script written against the flat shape sends keeps working.
    client = dev_env.client
    name = unique("flat")
    (tmp_path / "s.csv").write_text("id\n")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin()]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(make_spec(tmp_path, WORKFILE.format(name=name), task_queue=task_queue,
                                     connections={"sheets": {"connector": "sheet", "sheets": {"s": str(tmp_path / "s.csv")}}}))
        handle = client.get_workflow_handle(workflow_id_for(name))
        paused = await handle.execute_update(OPERATE_UPDATE, flat("pause", entry="tick", note="legacy", action_id="f-1"),
                                             id=uuid.uuid4().hex, result_type=dict)
        # Its note, which pause ignored before wire version 2, is now the pause's note (its content digest is as it was).
        assert paused == {"ok": True, "message": "paused tick (note: legacy)", "action_id": "f-1"}
        assert (await wfi.state(name))["schedules"]["tick"]["paused"] is True
        assert (await wfi.state(name))["schedules"]["tick"]["note"] == "legacy"
        # the same id with the new shape and the same content: a repeat; another action: refused
        again = await wfi.operate(name, Pause(entry="tick", action_id="f-1"))
        assert not again.ok and "already used for a different action" in again.message, "the note was content then"
        resumed = await wfi.operate(name, Resume(entry="tick"))
        assert resumed.ok and (await wfi.state(name))["schedules"]["tick"]["paused"] is False
        await still_serves(wfi, client, name, entry="hook")
