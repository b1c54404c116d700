"""Helpers for tests that drive real activations: write a Workfile + deployment, build the spec."""

from __future__ import annotations

import json
import pathlib
import textwrap
import uuid
from typing import Any

from wf_initiation.client import build_spec
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.deployment import parse_deployment


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make_spec(
    tmp_path: pathlib.Path, workfile_yaml: str, *, task_queue: str, run_queue: str | None = None,
    temporal: dict[str, Any] | None = None, **workflow_settings: Any,
) -> ActivationSpec:
    """Write the Workfile, build a deployment for its workflow (``temporal``: more of its ``temporal``
    section, e.g. a ``data_converter``), resolve the activation spec."""
    text = textwrap.dedent(workfile_yaml)
    path = tmp_path / f"{uuid.uuid4().hex[:6]}.workfile.yaml"
    path.write_text(text)
    name = next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("name:"))
    connections = workflow_settings.pop("connections", {})
    deployment = parse_deployment({
        "temporal": {"task_queue": task_queue, **(temporal or {})},
        "connections": connections,
        "workflows": {name: {"run": {"workflow_type": "wfi.EchoRun", "task_queue": run_queue or task_queue},
                             **json.loads(json.dumps(workflow_settings))}},
    }, base_dir=str(tmp_path))
    return build_spec(path, deployment)


KEYED_HOOKS = """
name: {name}
on:
  http.request: {{}}
  as: hook
  queue_by: "{{{{ hook.body.k }}}}"
"""
"""A webhook entry whose events run one at a time per ``body.k`` (the lanes tests of a sharded activation)."""
