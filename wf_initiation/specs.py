"""Activation specs from files: validate a Workfile, check it against a deployment and build the
``ActivationSpec`` that ``WfiClient.activate`` sends, as ``wfi activate``, ``wfi up`` and the
ingress build it. It imports the core only (no Temporal); ``wf_initiation.client`` re-exports it.
"""

from __future__ import annotations

import pathlib

from wf_initiation.core._catalog import Catalog
from wf_initiation.core._validate import load_workfile
from wf_initiation.core.activation import ActivationSpec, build_activation
from wf_initiation.core.deployment import Deployment, load_deployment
from wf_initiation.errors import DiagnosticError

__all__ = ["activation_spec", "build_spec", "spec_from_files"]


def activation_spec(workfile: str | pathlib.Path, deployment: str | pathlib.Path | Deployment) -> ActivationSpec:
    """The activation spec of a Workfile under a deployment, as ``wfi activate`` builds it.

    Validates the Workfile, checks the deployment claims every capability it needs (CAP-7) and
    resolves every trigger binding (INIT-3): what ``wfi validate --deployment`` accepts.

    Args:
        workfile: The Workfile's path.
        deployment: The deployment file's path, or a loaded :class:`Deployment` (a path relative to
            it names the Workfile in ``workflows.<name>.workfile``).

    Returns:
        The spec to pass to :meth:`WfiClient.activate`; ``spec.workflow`` is the workflow identity.

    Raises:
        DiagnosticError: the Workfile or the deployment is invalid or unsupported; each of its
            ``diagnostics`` names the problem and where (``d.render(file)`` prints it as ``wfi`` does).
    """
    loaded = deployment if isinstance(deployment, Deployment) else load_deployment(deployment)
    return build_spec(workfile, loaded)


def build_spec(workfile_path: str | pathlib.Path, deployment: Deployment, catalog: Catalog | None = None) -> ActivationSpec:
    """:func:`activation_spec` for a loaded deployment and a catalog of connectors of your choosing.

    Args:
        workfile_path: The Workfile's path.
        deployment: The loaded deployment.
        catalog: The connector manifests (default: the built-in ones and those installed).

    Returns:
        The activation spec.

    Raises:
        DiagnosticError: the Workfile or the deployment is invalid or unsupported.
    """
    catalog = catalog or Catalog.default()
    result = load_workfile(pathlib.Path(workfile_path), catalog=catalog)
    if result.workfile is None:
        raise DiagnosticError(result.diagnostics)
    return build_activation(result.workfile, deployment, catalog)  # what `wfi validate --deployment` checks


def spec_from_files(workfile_path: str | pathlib.Path, deployment_path: str | pathlib.Path) -> tuple[ActivationSpec, Deployment]:
    """:func:`activation_spec`, returning the loaded deployment too (kept for earlier callers).

    Args:
        workfile_path: The Workfile's path.
        deployment_path: The deployment file's path.

    Returns:
        The activation spec and the deployment.

    Raises:
        DiagnosticError: the Workfile or the deployment is invalid or unsupported.
    """
    deployment = load_deployment(deployment_path)
    return build_spec(workfile_path, deployment), deployment
