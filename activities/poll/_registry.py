"""Which poll activities a worker registers: those the catalog's poll manifests name.

A poll manifest's ``implementation: module:function`` names its activity. :func:`poll_activities`
imports each one and checks that its Temporal activity name is ``wfi.poll.<manifest name>``, the
name the activation calls. The built-in connectors are found this way too (their manifests live in
their folders), and so is any third-party connector whose manifest is published through the
``wf_initiation.connectors`` entry-point group.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from temporalio import activity

from wf_initiation.activities.poll._contract import activity_name_for
from wf_initiation.core._catalog import Catalog, Manifest
from wf_initiation.errors import ConfigurationError

_log = logging.getLogger("wf_initiation.poll")


class ImplementationError(ConfigurationError, ValueError):
    """A poll manifest's ``implementation`` cannot be used as its activity."""


def load_implementation(manifest: Manifest) -> Callable[..., Any]:
    """The activity a poll manifest's ``implementation`` names, checked against the contract's name."""
    module_name, _, attr = (manifest.implementation or "").partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ImplementationError(
            f"poll connector {manifest.name}: implementation {manifest.implementation!r} cannot be imported "
            f"({type(exc).__name__}: {exc}); install the package that provides it or fix the manifest"
        ) from None
    definition = activity._Definition.from_callable(fn)
    expected = activity_name_for(manifest.name)
    if definition is None or definition.name != expected:
        found = "not an activity" if definition is None else f"activity {definition.name!r}"
        raise ImplementationError(
            f"poll connector {manifest.name}: implementation {manifest.implementation!r} is {found}; "
            f"decorate it with @activity.defn(name={expected!r})"
        )
    return fn


def poll_activities(catalog: Catalog | None = None, *, extra: Sequence[Callable[..., Any]] = ()) -> list[Callable[..., Any]]:
    """The poll activities to register: every poll manifest's implementation, then ``extra``.

    One activity per name; an activity in ``extra`` replaces a manifest's of the same name. A
    third-party implementation that cannot be loaded is logged and left out (its polls then fail
    with "activity not registered", recorded on the activation); a built-in one raises.

    Args:
        catalog: Where the manifests come from (default: built-ins and entry points).
        extra: Activities given explicitly, e.g. ``WfiPlugin(poll_activities=...)``.
    """
    catalog = catalog if catalog is not None else Catalog.default()
    builtin = {m.name for m in Catalog.default(third_party=False).manifests()}
    by_name: dict[str, Callable[..., Any]] = {}
    for manifest in _with_implementation(catalog.manifests()):
        try:
            by_name[activity_name_for(manifest.name)] = load_implementation(manifest)
        except ImplementationError as exc:
            if manifest.name in builtin:
                raise
            _log.warning("%s", exc)
    for fn in extra:
        definition = activity._Definition.must_from_callable(fn)
        by_name[definition.name or ""] = fn
    return list(by_name.values())


def _with_implementation(manifests: Iterable[Manifest]) -> list[Manifest]:
    return [m for m in manifests if m.kind == "poll" and m.implementation]


POLL_ACTIVITIES = poll_activities(Catalog.default(third_party=False))
"""The built-in poll activities, for ``Worker(activities=...)``."""
