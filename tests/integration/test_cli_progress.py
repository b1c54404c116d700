"""Long work shows its progress (issue 22, item 7): a backfill worked off as a job and a deactivation
that drains print what is left as it changes, not only the end. (`wfi conformance run`'s per-case
lines: tests/integration/test_conformance_kit.py.)"""

from __future__ import annotations

import asyncio
import json
import pathlib
import re
import sys
from datetime import UTC, datetime, timedelta

from ruamel.yaml import YAML
from temporalio.worker import Worker

from tests.support.activation import unique
from tests.support.cli import MAIL_WORKFILE, Pair, cli_env, mail, wfi
from tests.support.waits import assert_eventually
from wf_initiation.core.limits import ADMIT_PER_TASK
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import ECHO_RUN_RELEASE_SIGNAL

WFI = (sys.executable, "-m", "wf_initiation")
TICKS = """
name: {name}
on:
  - time.schedule: {{cron: "* * * * *", timezone: UTC, end: "{end}"}}
    as: tick
  - http.request: {{}}
    as: hook
"""


def _deployment(path: pathlib.Path, address: str, queue: str, name: str, workfile: pathlib.Path, run_queue: str) -> None:
    doc = {"temporal": {"address": address, "task_queue": queue},
           "workflows": {name: {"workfile": str(workfile), "run": {"workflow_type": "wfi.EchoRun", "task_queue": run_queue}}}}
    with path.open("w") as fh:
        YAML(typ="safe", pure=True).dump(doc, fh)


async def test_a_backfill_worked_off_as_a_job_shows_its_progress_until_it_is_done(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    # proves: SCHED-5
    name = unique("bf-progress")
    workfile = tmp_path / "ticks.yaml"
    workfile.write_text(TICKS.format(name=name, end=(datetime.now(UTC) - timedelta(days=1)).isoformat()))
    deployment = tmp_path / "deployment.yaml"
    # Runs go to a queue no worker polls: started (that is what a backfill does), never run.
    _deployment(deployment, dev_env.client.service_client.config.target_host, task_queue, name, workfile, f"{task_queue}-runs")
    minutes = 5 * ADMIT_PER_TASK
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(days=10)
    end = start + timedelta(minutes=minutes - 1)
    target = ("--workflow", name, "--deployment", str(deployment))
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        assert (await wfi("activate", str(workfile), "--deployment", str(deployment))).code == 0
        result = await wfi("operate", "backfill", "--entry", "tick", "--start", start.isoformat(), "--end", end.isoformat(),
                           *target, "--timeout", "240", timeout=300)
        assert result.code == 0, result.stdout + result.stderr
        lines = result.stdout.splitlines()
        assert lines[0].startswith("backfill: ok: ") and "job" in lines[0], lines
        job_lines = [line for line in lines[1:] if re.match(r"  backfill-\d+: ", line)]
        assert job_lines and job_lines == lines[1:], lines
        assert re.match(rf"  backfill-\d+: done: {minutes} of {minutes} \(100%\): {minutes} admitted", job_lines[-1]), job_lines
        small = await wfi("operate", "backfill", "--entry", "tick", "--start", start.isoformat(),
                          "--end", (start + timedelta(minutes=2)).isoformat(), *target, "--json")
        assert small.code == 0 and "job" not in small.json(), "a small range is admitted at once: nothing to follow"
        delivered = await wfi("deliver", *target, "--entry", "hook", "--payload", '{"delivery_id": "after", "method": "POST", "body": {}}', "--json")
        assert delivered.json()["disposition"] == "accepted", delivered.stderr


async def test_a_draining_deactivation_with_wait_shows_what_is_left_as_it_changes(
    dev_env, task_queue: str, tmp_path: pathlib.Path,
) -> None:
    name = unique("drain-progress")
    pair = Pair(name, tmp_path / "wf.yaml", tmp_path / "deployment.yaml")
    pair.workfile.write_text(MAIL_WORKFILE.format(name=name))
    pair.write_deployment(dev_env.client.service_client.config.target_host, task_queue)
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        assert (await wfi("activate", str(pair.workfile), "--deployment", str(pair.deployment))).code == 0
        held = (await wfi("deliver", *pair.target, "--payload", mail("m1", hold=True), "--json")).json()
        queued = (await wfi("deliver", *pair.target, "--payload", mail("m2"), "--json")).json()
        assert (held["disposition"], queued["disposition"]) == ("accepted", "queued")

        async def running() -> None:
            desc = await dev_env.client.get_workflow_handle(held["run_key"]).describe()
            assert desc.status is not None and desc.status.name == "RUNNING"

        await assert_eventually(running, timeout=60)
        proc = await asyncio.create_subprocess_exec(
            *WFI, "deactivate", *pair.target, "--drain", "--wait", "--timeout", "120",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=cli_env())
        seen: list[str] = []
        try:
            assert proc.stdout is not None
            while not any(line.startswith("  left: 1 pending, 0 starting, 1 running run(s)") for line in seen):
                raw = await asyncio.wait_for(proc.stdout.readline(), 60)
                assert raw, f"ended before its progress: {seen}"
                seen.append(raw.decode().rstrip())
            await dev_env.client.get_workflow_handle(held["run_key"]).signal(ECHO_RUN_RELEASE_SIGNAL)
            out, err = await asyncio.wait_for(proc.communicate(), 120)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        lines = seen + out.decode().splitlines()
        assert proc.returncode == 0, (lines, err.decode())
        assert lines[0].startswith(f"{name}: ") and "left to settle" in lines[1], lines
        assert re.match(rf"{re.escape(name)}: deactivated at ", lines[-2]), lines
        progress = [line for line in lines if line.startswith("  left: ")]
        assert progress == sorted(set(progress), key=progress.index), "a line only when what is left changes"
        as_json = await wfi("deactivate", *pair.target, "--drain", "--wait", "--json")
        assert json.loads(as_json.stdout)["outcome"] == "already_deactivated"
