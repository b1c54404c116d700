"""Our Workfiles, tested on a time-skipping Temporal server with wf_initiation.testing."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from temporalio import workflow

from wf_initiation import Disposition
from wf_initiation.testing import WfiTestEnvironment

with workflow.unsafe.imports_passed_through():
    from wf_initiation import RunInput

WORKFILES = pathlib.Path(__file__).parent / "workfiles"
DEPLOYMENT = WORKFILES / "deployment.yaml"


@workflow.defn(name="SupportTriage")
class SupportTriage:  # the run workflows: in your project, imported from your worker's code
    @workflow.run
    async def run(self, input: RunInput) -> str:
        return f"triaged: {input.bindings['message']['subject']}"


@workflow.defn(name="NightlyReport")
class NightlyReport:
    @workflow.run
    async def run(self, input: RunInput) -> str:
        return f"report for {input.bindings['schedule']['scheduled_at']}"


@pytest.fixture
async def env() -> AsyncIterator[WfiTestEnvironment]:
    async with await WfiTestEnvironment.start() as env:  # a server of the test's own, up in about a second
        yield env


def mail(message_id: str, recipient: str = "help@acme.com") -> dict[str, Any]:
    return {"message_id": message_id, "from": "ann@example.com", "recipient": recipient,
            "subject": "printer on fire", "thread_id": "t-1"}


async def test_a_mail_starts_one_triage_run_and_the_same_mail_again_starts_none(env: WfiTestEnvironment) -> None:
    async with env.activation(WORKFILES / "support-triage.yaml", deployment=DEPLOYMENT,
                              workflows=[SupportTriage]) as triage:
        first = await triage.deliver(mail("m-1"))
        assert first.disposition is Disposition.ACCEPTED

        [run] = await triage.wait_for_runs(1)
        assert run.run_key == first.run_key
        assert run.input.bindings["message"]["subject"] == "printer on fire"
        assert await env.client.get_workflow_handle(run.run_key).result() == "triaged: printer on fire"

        assert (await triage.deliver(mail("m-1"))).disposition is Disposition.DUPLICATE
        assert (await triage.deliver(mail("m-2", recipient="noreply@acme.com"))).disposition is Disposition.SUPPRESSED
        assert len(await triage.started_runs()) == 1


async def test_the_nightly_report_runs_once_a_night_at_half_past_two_in_berlin(env: WfiTestEnvironment) -> None:
    async with env.activation(WORKFILES / "nightly-report.yaml", deployment=DEPLOYMENT,
                              workflows=[NightlyReport]) as nightly:
        await nightly.advance(timedelta(days=3))  # three nights pass in well under a second

        runs = await nightly.wait_for_runs(3)
        assert len(runs) == 3
        scheduled = [run.input.bindings["schedule"]["scheduled_at"] for run in runs]
        assert all("T02:30:00+0" in at for at in scheduled), scheduled  # local time, with its offset
