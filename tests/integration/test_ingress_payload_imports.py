"""What importing the deployment model loads, in a fresh interpreter (split from tests/core/test_ingress_payload.py)."""

from __future__ import annotations


def test_the_deployment_model_imports_the_ingress_config_without_the_web_stack() -> None:
    import subprocess
    import sys

    code = ("import sys; import wf_initiation.core.deployment; "
            "print(sorted(m for m in ('starlette', 'uvicorn', 'prometheus_client') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"
