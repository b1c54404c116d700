"""What a sender hears when its event goes to a subscription (issue 18 item 11).

Anyone with a Temporal client can signal ``subscribe`` naming any workflow, so when an event is
handed to a subscription the activation does not know yet whether that run exists: it is signalled
after the answer. The answer says exactly that; once the signal succeeded or failed, the event's
record says what happened (signalled; or taken back, disposed as if no subscription had matched, and
what it became, e.g. ``accepted`` with its run), and a redelivery answers with that.
"""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime
from typing import Any

from temporalio.worker import Worker

from tests.support.activation import make_spec, unique
from tests.support.engine import drive
from tests.support.hostile import run_started, still_serves
from tests.support.waits import assert_eventually
from wf_initiation.client import WfiClient
from wf_initiation.core.engine import Disposition, Engine, SignalRun, StartRun, SubscribeRequest, initial_state
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import SUBSCRIBE_SIGNAL, workflow_id_for

T0 = datetime(2026, 3, 1, tzinfo=UTC)
HOOK = """
name: {name}
on:
  http.request: {{}}
  as: hook
"""


def hook(ident: str) -> dict[str, Any]:
    return {"delivery_id": ident, "method": "POST", "body": {"n": 1}}


def engine_for(tmp_path: pathlib.Path) -> Engine:
    spec = make_spec(tmp_path, HOOK.format(name="hooks"), task_queue="tq")
    return drive(Engine(spec, initial_state(spec, T0)))


def signals(engine: Engine) -> list[SignalRun]:
    return [c for c in engine.take_commands() if isinstance(c, SignalRun)]


def test_the_answer_says_the_run_is_signalled_next_and_the_record_says_what_happened(tmp_path: pathlib.Path) -> None:
    # proves: INIT-8, INIT-9
    engine = engine_for(tmp_path)
    engine.subscribe(SubscribeRequest(sub_id="forged/1", entry="hook", run_workflow_id="no-such-workflow"), T0)
    answer = engine.deliver(None, hook("e1"), T0)
    assert answer.disposition == Disposition.DELIVERED and answer.run_key is None
    assert "of run no-such-workflow, to be signalled next" in (answer.message or "")
    assert "disposed as if no subscription had matched" in (answer.message or ""), answer.message
    (signal,) = signals(engine)
    engine.command_done(signal.key, "workflow not found", T0)  # what the shell reports when the signal fails
    record = engine.delivery("hook", "e1")
    assert record is not None and record["disposition"] == "accepted" and record["run_key"], record
    assert record["detail"].startswith(f"accepted (run {record['run_key']}): taken back from subscription forged/1, "
                                       "whose run no-such-workflow could not be signalled (workflow not found)")
    assert [s.run_key for s in engine.take_commands() if isinstance(s, StartRun)] == [record["run_key"]]
    again = engine.deliver(None, hook("e1"), T0)
    assert (again.disposition, again.retained, again.run_key) == (Disposition.DUPLICATE, Disposition.ACCEPTED,
                                                                  record["run_key"])

    engine.subscribe(SubscribeRequest(sub_id="waiting/1", entry="hook", run_workflow_id="a-waiting-run"), T0)
    assert engine.deliver(None, hook("e2"), T0).disposition == Disposition.DELIVERED
    (signal,) = signals(engine)
    engine.command_done(signal.key, None, T0)  # signalled
    assert engine.delivery("hook", "e2")["detail"] == "delivered to subscription waiting/1 of run a-waiting-run: signalled"


async def test_a_forged_subscription_to_a_workflow_that_does_not_exist_answers_what_happened(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: INIT-8, INIT-9
    client = dev_env.client
    name = unique("forged")
    async with Worker(client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        wfi = WfiClient(client, task_queue=task_queue)
        await wfi.activate(make_spec(tmp_path, HOOK.format(name=name), task_queue=task_queue))
        forged = {"sub_id": "forged/1", "entry": "hook", "run_workflow_id": "no-such-workflow", "match": {}}
        await client.get_workflow_handle(workflow_id_for(name)).signal(SUBSCRIBE_SIGNAL, forged)  # a plain client

        async def subscribed() -> None:
            assert "forged/1" in (await wfi.state(name))["subscriptions"]

        await assert_eventually(subscribed)
        answer = await wfi.deliver(name, hook("e1"))
        assert answer.disposition.value == "delivered" and answer.run_key is None
        assert "of run no-such-workflow, to be signalled next" in (answer.message or ""), answer.message

        async def settled() -> dict[str, Any]:
            record = await wfi.delivery(name, "hook", "e1")
            assert record is not None and record["disposition"] == "accepted", record
            return record

        record = await assert_eventually(settled)
        assert "could not be signalled" in record["detail"] and "no-such-workflow" in record["detail"]
        await run_started(client, record["run_key"])
        # The same call again is answered by the server's update dedup with the first answer (a true retry);
        # the same delivery sent anew hears what its event became.
        again = await wfi.deliver(name, hook("e1"), update_id="redelivery")
        assert (again.disposition.value, again.retained, again.run_key) == ("duplicate", Disposition.ACCEPTED,
                                                                            record["run_key"])
        await still_serves(wfi, client, name)
