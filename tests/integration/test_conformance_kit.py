"""The conformance kit: its frame (cases, target, runner, report, claims) and its real cases run
against this project, both through ``run_cases`` and through ``wfi conformance run``."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import re
import subprocess
import sys
import types
import uuid

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.support.worker_proc import WorkerProcess
from wf_initiation import conformance
from wf_initiation.conformance import (
    CAPABILITIES,
    CORE,
    EXTERNAL,
    POLLING,
    SCHEDULED,
    CaseFailed,
    Report,
    Target,
    case,
    check,
    collect,
    run_cases,
    select,
    write_report,
)
from wf_initiation.conformance.cases import MODULES
from wf_initiation.core.deployment import load_deployment

WFI = (sys.executable, "-c", "import sys; from wf_initiation.cli import main; sys.exit(main(sys.argv[1:]))")


def deployment_file(tmp_path: pathlib.Path, address: str = "127.0.0.1:1", extra: str = "") -> pathlib.Path:
    path = tmp_path / "deployment.yaml"
    path.write_text(f"temporal: {{address: '{address}', namespace: default}}\n{extra}")
    return path


@pytest.fixture
def target(tmp_path: pathlib.Path) -> Target:
    return Target.from_file(deployment_file(tmp_path), tmp_path / "work")


def passing(capability: str, clause: str):
    async def fn(target: Target) -> None:
        check(target.workdir.is_dir(), "the scratch directory exists")

    fn.__name__ = f"passes_{clause.replace('-', '_')}_{capability.replace('.', '_').replace('-', '_')}"
    return case(capability=capability, clauses=[clause])(fn)


def failing(capability: str, clause: str, message: str):
    async def fn(target: Target) -> None:
        check(False, message)

    fn.__name__ = f"fails_{clause.replace('-', '_')}"
    return case(capability=capability, clauses=[clause])(fn)


def by_capability(report: Report) -> dict[str, conformance.CapabilityReport]:
    return {c.capability: c for c in report.capabilities}


async def test_a_capability_is_claimed_only_when_every_one_of_its_cases_passes(target: Target) -> None:
    # proves: INIT-1 (the claims are the subset whose every case passed)
    cases = [
        passing(EXTERNAL, "EXT-1"), passing(EXTERNAL, "EXT-2"),
        passing(SCHEDULED, "SCHED-1"), failing(SCHEDULED, "SCHED-6", "the run began 2s before its instant"),
        passing(CORE, "CAP-1"),
    ]
    report = await run_cases(target, cases)
    caps = by_capability(report)
    assert report.claims == [EXTERNAL]
    assert not report.ok
    assert (caps[EXTERNAL].passed, caps[EXTERNAL].failed, caps[EXTERNAL].clauses_passed) == (2, 0, ["EXT-1", "EXT-2"])
    assert caps[SCHEDULED].clauses_exercised == ["SCHED-1", "SCHED-6"]
    assert caps[SCHEDULED].clauses_failed == ["SCHED-6"]
    [failure] = report.failures()
    assert failure.message == "the run began 2s before its instant"
    assert failure.outcome == "failed"


async def test_a_capability_with_no_cases_is_reported_but_never_claimed(target: Target) -> None:
    # proves: INIT-1
    report = await run_cases(target, [passing(EXTERNAL, "EXT-1")])
    caps = by_capability(report)
    assert (caps[POLLING].passed, caps[POLLING].failed, caps[POLLING].claimed) == (0, 0, False)
    assert report.claims == [EXTERNAL]
    assert report.ok


async def test_a_failing_core_case_leaves_every_capability_unclaimed(target: Target) -> None:
    cases = [passing(c, "INIT-1") for c in CAPABILITIES] + [failing(CORE, "CAP-5", "invalid file reported unsupported")]
    report = await run_cases(target, cases)
    assert report.claims == []
    assert by_capability(report)[CORE].clauses_failed == ["CAP-5"]


async def test_cases_not_selected_are_not_run_and_keep_their_capability_unclaimed(target: Target) -> None:
    ran: list[str] = []

    async def records(t: Target) -> None:
        ran.append("records")

    chosen = case(capability=EXTERNAL, clauses=["EXT-1"])(records)
    cases = [chosen, failing(EXTERNAL, "EXT-3", "not run"), passing(SCHEDULED, "SCHED-1")]
    report = await run_cases(target, cases, only={chosen.id, cases[2].id})
    caps = by_capability(report)
    assert ran == ["records"]
    assert (caps[EXTERNAL].passed, caps[EXTERNAL].skipped, caps[EXTERNAL].claimed) == (1, 1, False)
    assert caps[EXTERNAL].clauses_exercised == ["EXT-1"]
    assert report.claims == [SCHEDULED]
    assert report.ok


async def test_a_crashing_or_hanging_case_is_a_reported_failure_and_later_cases_still_run(target: Target) -> None:
    async def crashes(t: Target) -> None:
        raise RuntimeError("connector exploded")

    async def hangs(t: Target) -> None:
        await asyncio.Event().wait()

    cases = [case(capability=POLLING, clauses=["POLL-1"])(crashes), case(capability=POLLING, clauses=["POLL-2"])(hangs),
             passing(SCHEDULED, "SCHED-1")]
    report = await run_cases(target, cases, timeout=0.2)
    outcomes = {r.id: (r.outcome, r.message) for r in by_capability(report)[POLLING].cases}
    assert outcomes[cases[0].id][0] == "error" and "RuntimeError: connector exploded" in outcomes[cases[0].id][1]
    assert outcomes[cases[1].id] == ("failed", "did not finish within 0.2s")
    assert report.claims == [SCHEDULED]


async def test_the_report_files_hold_the_report_the_summary_and_the_claims(target: Target, tmp_path: pathlib.Path) -> None:
    cases = [passing(EXTERNAL, "EXT-1"), failing(POLLING, "POLL-8", "cursor moved past an undisposed item")]
    report = await run_cases(target, cases)
    paths = write_report(report, tmp_path / "out")
    assert Report.model_validate_json(paths["report.json"].read_text()) == report
    claims = json.loads(paths["claims.json"].read_text())
    assert claims["capabilities"] == [EXTERNAL]
    assert claims["deployment"] == str(target.deployment_path)
    markdown = paths["report.md"].read_text()
    assert "cursor moved past an undisposed item" in markdown
    assert "| `wf.polling-initiation` | no | 0 | 1 | 0 | 0.0s | POLL-8 |" in markdown  # with its time


def test_a_case_must_name_a_clause_and_a_known_capability() -> None:
    async def fn(t: Target) -> None: ...

    with pytest.raises(ValueError, match="at least one clause"):
        case(capability=EXTERNAL, clauses=[])(fn)
    with pytest.raises(ValueError, match="not one of"):
        case(capability="wf.telepathic-initiation", clauses=["EXT-1"])


def test_collect_reads_each_modules_cases_and_refuses_an_unlisted_or_duplicate_case(monkeypatch) -> None:
    listed, unlisted = passing(EXTERNAL, "EXT-1"), passing(SCHEDULED, "SCHED-1")
    good = types.ModuleType("kit_good")
    good.listed, good.CASES = listed, (listed,)
    forgetful = types.ModuleType("kit_forgetful")
    forgetful.unlisted, forgetful.CASES = unlisted, ()
    monkeypatch.setitem(sys.modules, "kit_good", good)
    monkeypatch.setitem(sys.modules, "kit_forgetful", forgetful)
    assert collect(["kit_good"]) == (listed,)
    with pytest.raises(ValueError, match="does not list in CASES"):
        collect(["kit_forgetful"])
    with pytest.raises(ValueError, match="duplicate conformance case ids"):
        collect(["kit_good", "kit_good"])


def test_the_real_cases_have_unique_ids_and_cite_clauses() -> None:
    cases = collect(MODULES)
    assert len({c.id for c in cases}) == len(cases) >= 8
    assert {c.capability for c in cases} == {*CAPABILITIES, CORE}


def test_selecting_a_capability_brings_in_the_core_cases_and_unknown_names_are_refused() -> None:
    cases = collect(MODULES)
    chosen = select(cases, capabilities=[POLLING])
    assert {c.capability for c in cases if c.id in chosen} == {POLLING, CORE}
    with pytest.raises(ValueError, match="unknown case id"):
        select(cases, ids=["capabilities.nope"])
    with pytest.raises(ValueError, match="unknown capability"):
        select(cases, capabilities=["wf.nope"])


async def test_target_runs_wfi_as_a_subprocess_and_reports_code_and_output(target: Target) -> None:
    listed = await target.wfi("conformance", "list", "--json")
    assert listed.code == 0, listed.describe()
    assert {row["id"] for row in listed.json()} == {c.id for c in collect(MODULES)}
    bad = await target.wfi("conformance", "run")
    assert bad.code == 2 and "--deployment" in bad.stderr
    with pytest.raises(CaseFailed, match="did not print JSON"):
        bad.json()


def test_target_writes_a_workfile_and_deployment_pair_that_loads(target: Target) -> None:
    name = target.unique("pair")
    pair = target.write_pair(name, f"name: {name}\non:\n  http.request: {{path: /x}}\n",
                             {"run": {"workflow_type": "Echo", "task_queue": "q"}, "overlap": "skip"})
    loaded = load_deployment(pair.deployment)
    settings = loaded.workflow(name)
    assert (settings.run.workflow_type, settings.overlap) == ("Echo", "skip")
    assert loaded.resolve_path(settings.workfile or "") == pair.workfile
    assert loaded.temporal.address == "127.0.0.1:1"
    assert target.unique("x") != target.unique("x")


async def test_target_client_connects_to_the_deployment_temporal(dev_env: WorkflowEnvironment, tmp_path) -> None:
    address = dev_env.client.service_client.config.target_host
    target = Target.from_file(deployment_file(tmp_path, address), tmp_path / "work")
    assert not target.connected
    client = await target.client()
    assert target.connected and client is await target.client()
    assert (client.namespace, client.service_client.config.target_host) == ("default", address)
    assert (await client.count_workflows(f"WorkflowId = '{target.unique('none')}'")).count == 0


def test_the_conformance_package_exports_exactly_its_public_surface() -> None:
    assert sorted(conformance.__all__) == sorted([
        "CAPABILITIES", "CORE", "EXTERNAL", "POLLING", "SCHEDULED", "CapabilityReport", "CaseFailed",
        "CaseInfo", "CaseResult", "CliResult", "Report", "Target", "WorkfilePair", "build_report", "case",
        "check", "claims_document", "collect", "eventually", "run_cases", "select", "write_report",
    ])


def test_a_bad_deployment_file_prints_its_diagnostics_without_a_traceback(tmp_path: pathlib.Path) -> None:
    bad = deployment_file(tmp_path, extra="capabilities: [wf.telepathic-initiation]\n")
    proc = subprocess.run([*WFI, "conformance", "run", "--deployment", str(bad), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "DEPLOY-INVALID" in proc.stderr and "wf.telepathic-initiation" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


LAX_VALIDATOR = """
import json, sys
files = [a for a in sys.argv[1:] if a.endswith(".yaml")]
print(json.dumps([{"file": f, "status": "valid", "workflow": "w", "required_capabilities": [
    "wf.scheduled-initiation", "wf.external-event-initiation", "wf.polling-initiation"], "diagnostics": []}
    for f in files]))
"""


async def test_the_capability_cases_fail_against_a_validator_that_ignores_claims(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "lax_wfi.py"
    script.write_text(LAX_VALIDATOR)
    target = Target.from_file(deployment_file(tmp_path), tmp_path / "work", wfi_command=(sys.executable, str(script)))
    report = await run_cases(target, collect(["wf_initiation.conformance.cases.capabilities"]))
    assert len(report.failures()) == len(collect(["wf_initiation.conformance.cases.capabilities"]))
    assert report.claims == []


async def test_wfi_conformance_run_takes_the_temporal_cli_connection_flags_and_its_commands_follow_them(
    dev_env: WorkflowEnvironment, tmp_path: pathlib.Path,
) -> None:
    # The deployment names a Temporal that is not there; --address and --namespace point at the real
    # one, for the kit's own client and for every `wfi` command a case runs.
    address = dev_env.client.service_client.config.target_host
    queue = f"conformance-{uuid.uuid4().hex[:8]}"
    deployment = deployment_file(tmp_path)
    deployment.write_text(f"temporal: {{address: '127.0.0.1:1', namespace: nowhere, task_queue: {queue}}}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    with WorkerProcess(address, queue):
        proc = await asyncio.to_thread(subprocess.run,
            [*WFI, "conformance", "run", "--deployment", str(deployment), "--out", str(tmp_path / "report"),
             "--address", address, "--namespace", "default",
             "--case", "external.overlap_skip_consumes_the_delivery_and_leaves_it_deduplicated", "--json"],
            capture_output=True, text=True, timeout=600, env=env,
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = Report.model_validate_json(proc.stdout)
    assert [c.outcome for cap in report.capabilities for c in cap.cases if c.outcome != "skipped"] == ["passed"]


async def test_each_case_is_reported_as_soon_as_it_has_run(target: Target) -> None:
    reported: list[tuple[str, str]] = []

    async def second(t: Target) -> None:
        check(reported == [("test_conformance_kit.first", "passed")], f"the first case was reported first: {reported}")

    async def first(t: Target) -> None:
        pass

    cases = tuple(case(capability=EXTERNAL, clauses=["EXT-1"])(fn) for fn in (first, second))
    report = await run_cases(target, cases, on_result=lambda r: reported.append((r.id, r.outcome)))
    assert reported == [("test_conformance_kit.first", "passed"), ("test_conformance_kit.second", "passed")]
    assert report.ok and report.duration_s >= 0


def test_wfi_conformance_run_prints_each_case_as_it_passes_or_fails_and_a_summary_with_times(tmp_path: pathlib.Path) -> None:
    # The deployment's Temporal is not there: the validator case passes, the external one fails fast.
    deployment = deployment_file(tmp_path)
    cases = ["capabilities.a_poll_entry_requires_polling_initiation",
             "external.overlap_skip_consumes_the_delivery_and_leaves_it_deduplicated"]
    args = [*WFI, "conformance", "run", "--deployment", str(deployment), "--out", str(tmp_path / "out"),
            *[arg for c in cases for arg in ("--case", c)]]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    human = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    assert human.returncode == 1, human.stdout + human.stderr
    lines = human.stdout.splitlines()
    assert lines[0] == f"running 2 case(s) against {deployment} (each within 120s)", lines
    assert re.fullmatch(rf"  passed +\d+\.\ds  {re.escape(cases[0])}", lines[1]), lines
    assert re.fullmatch(rf"  FAILED +\d+\.\ds  {re.escape(cases[1])}: .+", lines[2]), lines
    assert any(re.fullmatch(r"2 case\(s\) in \d+\.\ds: 1 passed, 1 failed; slowest: .+", line) for line in lines), lines
    assert any(re.match(r"wf.polling-initiation: 1 passed, 0 failed, \d+ not run \(not claimed\) in \d+\.\ds", line)
               for line in lines), lines
    as_json = subprocess.run([*args, "--json"], capture_output=True, text=True, timeout=300, env=env)
    assert Report.model_validate_json(as_json.stdout).duration_s > 0, "stdout holds the report alone"
    assert "  passed " in as_json.stderr and "  FAILED " in as_json.stderr and "2 case(s) in" in as_json.stderr
    assert "| time |" in (tmp_path / "out" / "report.md").read_text()
