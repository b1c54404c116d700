"""The README's first hour works as written (issue 22, item 8): its Workfile, deployment and `wfi`
commands run, the same `wfi deliver` again says what the README says it says, and the README tells
how to reach `wfi` after `python3 dev.py up`."""

from __future__ import annotations

import pathlib
import re
import shlex
import shutil

from temporalio.worker import Worker

from tests.support.activation import unique
from tests.support.cli import cli_env, wfi
from tests.support.paths import ROOT
from tests.support.waits import assert_eventually
from wf_initiation.plugin import WfiPlugin

README = (ROOT / "README.md").read_text()
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def _blocks() -> tuple[dict[str, str], list[list[str]], str]:
    """The README's files by the name in their first line, its `wfi` commands, and the comments after them."""
    files, commands, comments = {}, [], ""
    for kind, text in BLOCK.findall(README):
        if kind == "yaml" and text.startswith("# "):
            files[text.splitlines()[0][2:].split()[0]] = text
        elif kind == "sh" and "wfi deliver" in text:
            for line in text.replace("\\\n", " ").splitlines():
                if line.startswith("wfi "):
                    commands.append(shlex.split(line, comments=True))
                elif line.startswith("#"):
                    comments += line[1:].strip() + " "
    return files, commands, comments


def test_the_readme_says_how_to_reach_wfi_after_dev_py_up() -> None:
    assert ".venv/bin/wfi" in README and "source .venv/bin/activate" in README


async def test_the_readme_commands_run_and_a_repeated_delivery_answers_as_the_readme_says(dev_env, tmp_path: pathlib.Path) -> None:
    files, commands, comments = _blocks()
    assert {"support-triage.yaml", "deployment.yaml"} <= set(files) and [c[1] for c in commands] == ["validate", "activate", "deliver"]
    queue, name = unique("tq-readme"), unique("readme-triage")  # the session's dev server is shared: a name of its own
    (tmp_path / "support-triage.yaml").write_text(files["support-triage.yaml"].replace("name: support-triage", f"name: {name}"))
    commands = [[name if word == "support-triage" else word for word in command] for command in commands]
    deployment = files["deployment.yaml"].replace("{task_queue: wfi-activations}", f"{{task_queue: {queue}}}")
    deployment = deployment.replace("  support-triage:", f"  {name}:")
    deployment = deployment.replace("{workflow_type: SupportTriage, task_queue: support}",
                                    f"{{workflow_type: wfi.EchoRun, task_queue: {queue}}}")  # our sample run stands in
    assert queue in deployment and "wfi.EchoRun" in deployment
    (tmp_path / "deployment.yaml").write_text(deployment)
    env = cli_env(TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host)
    async with Worker(dev_env.client, task_queue=queue, plugins=[WfiPlugin(sample_runs=True)]):
        outputs = []
        for command in commands:
            result = await wfi(*command[1:], env=env, cwd=str(tmp_path))
            assert result.code == 0, (command, result.stdout, result.stderr)
            outputs.append(result.stdout)
        deliver = commands[-1][1:]
        again = await wfi(*deliver, env=env, cwd=str(tmp_path))
        other = await wfi(*deliver, "--update-id", "another-sender", env=env, cwd=str(tmp_path))
    assert "valid" in outputs[0] and outputs[1].startswith(f"activated {name}")
    first_run = re.search(r"run=(\S+)", outputs[2]).group(1)  # type: ignore[union-attr]
    assert outputs[2].startswith(f"accepted  entry=message  delivery_id=m-1  run={name}@")
    # What the README's comment says of the same command again, and of another update id:
    assert "The same command again prints `accepted` and the same run" in comments
    assert again.stdout.startswith("accepted") and f"run={first_run}" in again.stdout
    assert "another `--update-id`" in comments and "`duplicate`, no second run" in comments
    assert other.stdout.startswith("duplicate") and f"run={first_run}" in other.stdout


def _state_example() -> tuple[str, list[str]]:
    """The README's `wfi state` example, split as a shell would, and the sentence before it."""
    text = " ".join(README.split())
    found = re.search(r"`(\.venv/bin/wfi state [^`]+)`", text)
    assert found, "the README shows a `.venv/bin/wfi state` example"
    return text[:found.start()].rsplit(". ", 1)[-1], shlex.split(found.group(1))


async def test_the_readme_s_wfi_state_example_works_as_written(dev_env, tmp_path: pathlib.Path) -> None:
    # issue 31, item 6: the example named an activation that `python3 dev.py up` alone never makes.
    said, command = _state_example()
    assert "`python3 dev.py up --activate`" in said and "repository's root" in said, said
    assert command[:3] == [".venv/bin/wfi", "state", "--deployment"] and "support-triage" in command
    # What `dev.py up --activate` makes of the examples, on a copy with names of its own (a shared server).
    queue, name = unique("tq-readme"), unique("support-triage")
    examples = tmp_path / "examples"
    shutil.copytree(ROOT / "examples", examples, ignore=shutil.ignore_patterns("*.db", ".wfi"))
    for path in (examples / "support-triage.yaml", examples / "deployment.yaml"):
        path.write_text(path.read_text().replace("support-triage", name).replace("wfi-activations", queue))
    (examples / f"{name}.yaml").write_text((examples / "support-triage.yaml").read_text())
    wfi_args = [name if word == "support-triage" else word for word in command[1:]]
    env = cli_env(TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host)
    async with Worker(dev_env.client, task_queue=queue, plugins=[WfiPlugin(sample_runs=True)]):
        before = await wfi(*wfi_args, env=env, cwd=str(tmp_path))
        assert before.code == 1 and f"no activation of workflow {name!r} is running" in before.stderr, before  # without --activate: says so
        activated = await wfi("activate", f"examples/{name}.yaml", "--deployment", "examples/deployment.yaml", env=env,
                              cwd=str(tmp_path))
        assert activated.code == 0, activated
        shown = await wfi(*wfi_args, env=env, cwd=str(tmp_path))
        assert shown.code == 0, shown
        assert shown.stdout.startswith(f"{name}  activation {name}@") and "[active]" in shown.stdout
        assert re.search(r"^  capacity \d+% full \(\d+ KiB of [\d.]+ MiB carried, 0 dedup ids; at capacity: refuse\)$", shown.stdout, re.M)
        mail = ('{"message_id": "m-1", "from": "ann@example.com", "recipient": "help@acme.com", '
                '"subject": "printer on fire", "thread_id": "t-1"}')
        delivered = await wfi("deliver", "--deployment", "examples/deployment.yaml", "--workflow", name,
                              "--payload", mail, env=env, cwd=str(tmp_path))
        assert delivered.stdout.startswith("accepted"), delivered

        async def a_run_started() -> None:
            again = await wfi(*wfi_args, env=env, cwd=str(tmp_path))
            assert "runs started 1" in again.stdout, again.stdout

        await assert_eventually(a_run_started, timeout=60)
