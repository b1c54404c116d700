"""Capability inference and classification (CAP-1, CAP-3, CAP-4, CAP-7, CAP-8).

Every resolved trigger entry requires the capability of its manifest's kind; a workflow
requires the union, whatever batching, queueing or guards its entries declare. A deployment
claims a set of capabilities; an otherwise valid Workfile that needs one it does not claim is
unsupported and must not be activated.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable, Iterable

from wf_initiation.errors import ClaimsError

from ._catalog import Catalog, Manifest
from ._diagnostics import Diagnostic
from ._model import TriggerEntry, Workfile

Resolver = Callable[[TriggerEntry], Manifest | None]
"""An entry's implementation under a deployment (``core.activation.manifest_resolver``): the
connection's ``via`` can choose another kind than the catalog's manifest (``mail.received`` via
``imap`` is a poll)."""


def required_capabilities(workfile: Workfile, catalog: Catalog, resolve: Resolver | None = None) -> dict[str, list[str]]:
    """Map each required capability to the names of the entries that need it, in `on:` order.

    Args:
        workfile: The validated Workfile.
        catalog: Its catalog.
        resolve: Each entry's implementation under the deployment; without it, the catalog's manifest.

    Raises:
        LookupError: An entry's connector is not in ``catalog`` (validate with the same catalog).
    """
    out: dict[str, list[str]] = {}
    for entry in workfile.entries:
        manifest = resolve(entry) if resolve is not None else catalog.get(entry.connector)
        if manifest is None:
            raise LookupError(f"{entry.connector!r} is not in the catalog: validate the Workfile with the same catalog")
        out.setdefault(manifest.capability, []).append(entry.name)
    return out


def classify(workfile: Workfile, catalog: Catalog, claims: Iterable[str], *,
             resolve: Resolver | None = None) -> list[Diagnostic]:
    """One ``CAP-UNSUPPORTED`` diagnostic per required capability missing from ``claims``.

    Each names the capability and every trigger entry that needs it; an empty list means the
    deployment supports the Workfile. ``resolve``: as for :func:`required_capabilities`.
    """
    claimed = set(claims)
    by_name = {e.name: e for e in workfile.entries}
    found: list[Diagnostic] = []
    for capability, names in sorted(required_capabilities(workfile, catalog, resolve).items()):
        if capability in claimed:
            continue
        first = by_name[names[0]]
        found.append(
            Diagnostic(
                code="CAP-UNSUPPORTED",
                message=(
                    f"the deployment does not claim {capability}, which trigger entr"
                    f"{'ies' if len(names) > 1 else 'y'} {', '.join(names)} need"
                    f"{'' if len(names) > 1 else 's'}: deploy where {capability} is claimed, "
                    "or remove those triggers"
                ),
                entry=", ".join(names),
                path=f"on[{first.index}]" if workfile.multi else "on",
                line=first.line,
                capability=capability,
            )
        )
    return found


def read_claims(value: str) -> list[str]:
    """Claimed capabilities from a comma-separated list or a claims file.

    A claims file is either JSON (``{"capabilities": [...]}`` as the conformance runner writes
    it, or a bare JSON list) or text with one capability per line (``#`` starts a comment).

    Raises:
        ClaimsError: The file cannot be read or holds no list of capability names.
    """
    path = pathlib.Path(value)
    if _looks_like_path(value) or path.is_file():
        return _read_claims_file(path)
    return sorted({part.strip() for part in value.split(",") if part.strip()})


def _looks_like_path(value: str) -> bool:
    return "/" in value or value.endswith((".json", ".txt", ".claims"))


def _read_claims_file(path: pathlib.Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ClaimsError(
            f"cannot read claims file {path}: {exc}: pass a claims file or a comma-separated list"
        ) from None
    if text.lstrip().startswith(("{", "[")):
        return _json_claims(path, text)
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return sorted({line for line in lines if line})


def _json_claims(path: pathlib.Path, text: str) -> list[str]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ClaimsError(f"claims file {path} is not valid JSON ({exc.msg}, line {exc.lineno})") from None
    items = data.get("capabilities") if isinstance(data, dict) else data
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ClaimsError(f'claims file {path} must hold {{"capabilities": ["wf.…", ...]}} or a JSON list of names')
    return sorted(set(items))
