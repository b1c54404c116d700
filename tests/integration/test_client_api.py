"""`WfiClient` is a documented API (issue 22, item 5): the example of docs/client.md runs as written,
every public name of `wf_initiation.client` (and of `wf_initiation.specs`, which it re-exports) has
a Google-style docstring, and `activate` speaks the command line's words whatever build of the
activation answered."""

from __future__ import annotations

import asyncio
import inspect
import os
import pathlib
import re
import sys

from temporalio.worker import Worker

from tests.support.activation import unique
from tests.support.paths import ROOT
from wf_initiation import client as client_module
from wf_initiation import specs as specs_module
from wf_initiation._reactivation import ActivateAnswer, outcome
from wf_initiation.plugin import WfiPlugin

DOC = ROOT / "docs" / "client.md"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)
ACTIVATION_ID = re.compile(r"@[0-9a-f]{12}")


def _blocks() -> dict[str, str]:
    """The doc's code blocks: its YAML files by the name in their first line, its Python and its output."""
    found: dict[str, str] = {}
    for kind, text in BLOCK.findall(DOC.read_text()):
        if kind == "yaml" and text.startswith("# "):
            found[text.splitlines()[0][2:].strip()] = text
        elif kind == "python" and "asyncio.run(main())" in text:
            found["example.py"] = text
        elif kind == "text":
            found["output"] = text
    return found


async def test_the_client_example_of_docs_client_md_runs_and_prints_what_the_doc_says(dev_env, tmp_path: pathlib.Path) -> None:
    # The session's dev server is shared: the example's workflow gets a name of its own.
    name = unique("doc-triage")
    blocks = {file: text.replace("support-triage", name) for file, text in _blocks().items()}
    assert {"support-triage.yaml", "deployment.yaml", "example.py", "output"} <= set(blocks), sorted(blocks)
    queue = unique("tq-client-doc")
    (tmp_path / f"{name}.yaml").write_text(blocks["support-triage.yaml"])  # as the example and deployment now name it
    deployment = blocks["deployment.yaml"].replace("task_queue: wfi-activations", f"task_queue: {queue}")
    deployment = deployment.replace("{workflow_type: SupportTriage, task_queue: support}",
                                    f"{{workflow_type: wfi.EchoRun, task_queue: {queue}}}")  # our sample run stands in
    assert queue in deployment and "wfi.EchoRun" in deployment
    (tmp_path / "deployment.yaml").write_text(deployment)
    (tmp_path / "example.py").write_text(blocks["example.py"])
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}, "PYTHONTZPATH": "",
           "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host}

    async def example() -> list[str]:
        proc = await asyncio.create_subprocess_exec(sys.executable, "example.py", cwd=tmp_path, env=env,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, err.decode()[-3000:]
        return [ACTIVATION_ID.sub("@ID", line) for line in out.decode().splitlines()]

    async with Worker(dev_env.client, task_queue=queue, plugins=[WfiPlugin(sample_runs=True)]):
        first = await example()
        second = await example()
    assert first == [ACTIVATION_ID.sub("@ID", line) for line in blocks["output"].splitlines()]
    assert second[0].startswith(f"unchanged {name}@ID"), second
    assert second[1:3] == [f"accepted {name}@ID/message/m-1", "duplicate True"], "answered by the first attempt"


def _public(obj: object) -> list[tuple[str, object]]:
    return [(name, member) for name, member in vars(obj).items()
            if not name.startswith("_") and (inspect.isfunction(member) or isinstance(member, classmethod))]


def test_every_public_function_and_method_of_the_client_has_a_google_style_docstring() -> None:
    missing = []
    members = [(f"{module.__name__}.{n}", m) for module in (client_module, specs_module)  # specs: the client re-exports it
               for n, m in _public(module) if getattr(m, "__module__", "") == module.__name__]
    assert {"wf_initiation.specs.activation_spec", "wf_initiation.specs.build_spec"} <= {name for name, _ in members}
    members += [(f"WfiClient.{n}", m) for n, m in _public(client_module.WfiClient)]
    members += [("WfiClient", client_module.WfiClient)]
    for name, member in members:
        function = member.__func__ if isinstance(member, classmethod) else member
        doc = inspect.getdoc(function) or ""
        params = [p for p in inspect.signature(function).parameters if p not in ("self", "cls")] if callable(function) else []
        if not doc:
            missing.append(f"{name}: no docstring")
        elif params and "Args:" not in doc:
            missing.append(f"{name}: no Args section for {params}")
        returns = inspect.signature(function).return_annotation if inspect.isfunction(function) else None
        if returns not in (None, "None", inspect.Signature.empty) and not re.search(r"\n(Returns|Yields):", doc):
            missing.append(f"{name}: no Returns section")
    assert not missing, missing
    for name in client_module.__all__:
        exported = getattr(client_module, name)
        if inspect.isclass(exported) or inspect.isfunction(exported):
            assert exported.__doc__, name


def test_activate_speaks_the_command_line_s_words_whatever_build_answered() -> None:
    # Earlier builds of the activation answered `current`; the client says what `wfi activate` says.
    words = {(old, running): outcome(ActivateAnswer(activation_id="a@1", outcome=old), running)
             for old in ("current", "unchanged", "activated", "rebound") for running in (True, False)}
    assert words == {("current", True): "unchanged", ("unchanged", True): "unchanged", ("activated", True): "unchanged",
                     ("rebound", True): "rebound", ("current", False): "activated", ("unchanged", False): "activated",
                     ("activated", False): "activated", ("rebound", False): "activated"}
    assert set(client_module.Activation.model_fields["outcome"].annotation.__args__) == {"activated", "unchanged", "rebound"}
