"""The distribution as a user installs it: one import root, next to a user's own modules."""

from __future__ import annotations

import ast
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import venv

import pytest

import wf_initiation
from tests.support.paths import ROOT

# pip builds the wheel in this tree (build/, .wfi/dist): the module's tests run in one xdist worker,
# so two builds never share those folders.
pytestmark = pytest.mark.xdist_group("wheel")


def test_public_names_are_pinned() -> None:
    assert wf_initiation.__all__ == [
        "DeliveryResult", "Disposition", "RunInput", "WfiClient", "WfiError", "WfiPlugin", "__version__", "activation_spec",
        "run_script", "wait_for",
    ]
    for name in wf_initiation.__all__:
        assert getattr(wf_initiation, name) is not None


def test_importing_the_root_loads_no_client_or_worker_code() -> None:
    # The workflow sandbox imports wf_initiation.workflows, and with it the root package.
    code = "import sys, wf_initiation; print(sorted(m for m in sys.modules if m.startswith(('wf_initiation.', 'temporalio.worker'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert ast.literal_eval(out.strip()) == ["wf_initiation._lazy"]  # the lazy exports: standard library only


def test_wheel_installs_one_import_root(wheel: pathlib.Path) -> None:
    import zipfile

    tops = {name.split("/", 1)[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in tops if not t.endswith((".dist-info", ".data"))} == {"wf_initiation"}


def test_every_package_of_the_source_tree_is_listed_and_in_the_wheel(wheel: pathlib.Path) -> None:
    # pyproject lists the packages by hand. One left off the list (wf_initiation/_temporal/) still
    # reaches today's wheel as package data of its parent, with only a setuptools warning that a
    # later setuptools will leave it out: the list itself is checked, and the wheel.
    import tomllib
    import zipfile

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folder_of = {"wf_initiation": "wf_initiation", **setuptools["package-dir"]}
    in_tree = {".".join((package, *init.parent.relative_to(ROOT / folder).parts))
               for package, folder in folder_of.items() for init in (ROOT / folder).rglob("__init__.py")}
    assert "wf_initiation._temporal" in in_tree
    assert in_tree - set(setuptools["packages"]) == set(), "add them to [tool.setuptools] packages in pyproject.toml"
    in_wheel = {name.rsplit("/", 1)[0].replace("/", ".") for name in zipfile.ZipFile(wheel).namelist()
                if name.endswith("/__init__.py")}
    assert in_tree - in_wheel == set()


USER_WORKFLOWS = '''
from datetime import timedelta
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from wf_initiation import RunInput
    from activities import shout


@workflow.defn(name="UserRun")
class UserRun:
    @workflow.run
    async def run(self, input: RunInput) -> str:
        message = input.bindings["message"]
        return await workflow.execute_activity(shout, message["subject"], start_to_close_timeout=timedelta(seconds=10))
'''

USER_ACTIVITIES = '''
from temporalio import activity


@activity.defn
async def shout(text: str) -> str:
    return text.upper() + "!"
'''

USER_WORKER = '''
import asyncio, sys
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from workflows import UserRun
from activities import shout
import wf_initiation
from wf_initiation import WfiClient, WfiPlugin
from wf_initiation.client import spec_from_files


async def run_result(client: Client, run_key: str) -> str:
    for _ in range(600):  # the run is started by an activity just after the disposition is durable
        try:
            return await client.get_workflow_handle(run_key).result()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
        await asyncio.sleep(0.1)
    raise SystemExit(f"run {run_key} never started")


async def main(address: str, queue: str) -> None:
    client = await Client.connect(address, data_converter=pydantic_data_converter)
    async with Worker(client, task_queue=queue, workflows=[UserRun], activities=[shout], plugins=[WfiPlugin()]):
        spec, _ = spec_from_files("triage.yaml", "deployment.yaml")
        wfi = WfiClient(client, task_queue=queue)
        await wfi.activate(spec)
        result = await wfi.deliver(spec.workflow, {"message_id": "m-1", "from": "a@b.c", "recipient": "help@acme.com",
                                                  "subject": "hello", "thread_id": "t1"})
        print("disposition=" + result.disposition.value)
        print("result=" + await run_result(client, result.run_key))
        print("package=" + wf_initiation.__file__)


asyncio.run(main(sys.argv[1], sys.argv[2]))
'''


async def test_users_own_workflows_and_activities_modules_run_beside_the_plugin(
    dev_env, tmp_path: pathlib.Path, task_queue: str, wheel: pathlib.Path,
) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True)
    # Dependencies come from this environment's site-packages (as a plain path: its .pth files,
    # among them this checkout's editable install, are not processed there).
    target = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            check=True, capture_output=True, text=True).stdout.strip()
    (pathlib.Path(target) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    project = tmp_path / "project"
    project.mkdir()
    (project / "workflows.py").write_text(USER_WORKFLOWS)
    (project / "activities.py").write_text(USER_ACTIVITIES)
    (project / "run_worker.py").write_text(USER_WORKER)
    (project / "triage.yaml").write_text(textwrap.dedent("""
        name: user-triage
        on:
          mail.received:
            inbox: help@acme.com
          as: message
    """))
    (project / "deployment.yaml").write_text(textwrap.dedent(f"""
        temporal:
          task_queue: {task_queue}
        workflows:
          user-triage:
            run: {{workflow_type: UserRun, task_queue: {task_queue}}}
    """))
    address = dev_env.client.service_client.config.target_host
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(python), "run_worker.py", address, task_queue], cwd=project, env=env,
                          capture_output=True, text=True, timeout=180)
    # A short-lived script may be aborted by the SDK after its work, while the interpreter finalizes
    # (sdk-python#300, open; docs/plugin.md): that abort, and only that one, is not this test's subject.
    sdk_exit_abort = done.returncode in (-6, 134) and "PyGILState_Release" in done.stderr and "finalizing" in done.stderr
    assert done.returncode == 0 or sdk_exit_abort, done.stderr[-3000:]
    lines = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    assert lines.get("disposition") == "accepted"
    assert lines.get("result") == "HELLO!"
    assert lines["package"].startswith(str(env_dir)), "the installed wheel, not this checkout, was imported"


@pytest.fixture(scope="module")
def wheel() -> pathlib.Path:
    """The wheel of this checkout, built once for the module's tests."""
    return _build_wheel(ROOT / ".wfi" / "dist")


def _build_wheel(out: pathlib.Path) -> pathlib.Path:
    out.mkdir(parents=True, exist_ok=True)
    # pip builds in this tree: a module removed from the source (wire.py became wire/) must not ride
    # along from an earlier build's build/lib into the wheel.
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    for old in out.glob("wf_initiation-*.whl"):
        old.unlink()
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
                           capture_output=True, text=True)
    if built.returncode != 0:
        pytest.fail(f"building the wheel failed:\n{built.stderr[-3000:]}")
    (wheel,) = out.glob("wf_initiation-*.whl")
    return wheel


def test_wfi_help_prints_the_documentation_installed_with_the_wheel(tmp_path: pathlib.Path, wheel: pathlib.Path) -> None:
    # An error says `wfi help deployment`: a pip-installed user has that text, not the repository's docs/.
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True)
    target = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            check=True, capture_output=True, text=True).stdout.strip()
    (pathlib.Path(target) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = subprocess.run([str(python), "-c", "from wf_initiation.cli.help import docs; print(docs())"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(str(env_dir)), f"the wheel's own copy: {where}"
    for topic in ("deployment", "cli", "webhooks"):
        shown = subprocess.run([str(python), "-m", "wf_initiation", "help", topic], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout == (ROOT / "docs" / f"{topic}.md").read_text(), topic
    listing = subprocess.run([str(python), "-m", "wf_initiation", "help"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60)
    assert "  deployment" in listing.stdout and "  limits" in listing.stdout
    unknown = subprocess.run([str(python), "-m", "wf_initiation", "help", "nope"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1 and "deployment" in unknown.stderr
