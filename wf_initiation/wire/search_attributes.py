"""Custom search attributes that let operators find activations in the UI and CLI.

A worker with ``WfiPlugin`` checks them at start (:func:`ensure_registered`): missing ones are
registered where the server allows it (the dev server, a self-hosted cluster with operator rights);
otherwise the worker fails at once with one line naming the command that adds them, instead of
every activation's workflow task failing later.

This module is imported inside the workflow sandbox (the keys); the client-side check imports
Temporal's service modules lazily.
"""

from __future__ import annotations

from typing import Any

from temporalio.common import SearchAttributeKey

from wf_initiation.errors import SearchAttributesMissing

WFI_WORKFLOW = SearchAttributeKey.for_keyword("WfiWorkflow")
WFI_ACTIVATION = SearchAttributeKey.for_keyword("WfiActivation")
WFI_STATE = SearchAttributeKey.for_keyword("WfiState")
WFI_TRIGGERS = SearchAttributeKey.for_keyword_list("WfiTriggers")

ALL = (WFI_WORKFLOW, WFI_ACTIVATION, WFI_STATE, WFI_TRIGGERS)


def cli_type(key: SearchAttributeKey[Any]) -> str:
    """The type name the ``temporal`` CLI takes, e.g. ``KeywordList``."""
    return key.indexed_value_type.name.title().replace("_", "")


def create_command(namespace: str, keys: list[SearchAttributeKey[Any]] | tuple[SearchAttributeKey[Any], ...] = ALL) -> str:
    """The ``temporal operator search-attribute create`` command(s) adding ``keys`` (one per type)."""
    by_type: dict[str, list[str]] = {}
    for key in keys:
        by_type.setdefault(cli_type(key), []).append(key.name)
    return " && ".join(
        f"temporal operator search-attribute create --namespace {namespace} --type {kind} "
        + " ".join(f"--name {name}" for name in names)
        for kind, names in by_type.items()
    )


async def ensure_registered(client: Any, namespace: str) -> list[str]:
    """Make sure ``namespace`` has every Wfi search attribute with its type.

    Returns:
        The names registered now (empty when all were there).

    Raises:
        SearchAttributesMissing: one is missing and the server refused to register it, or one
            exists with another type; the message names the command that fixes it.
    """
    from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
    from temporalio.service import RPCError, RPCStatusCode

    try:
        listed = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace=namespace))
    except RPCError as exc:
        if exc.status in (RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNIMPLEMENTED, RPCStatusCode.UNAUTHENTICATED):
            await _probe_by_query(client, namespace)  # e.g. Temporal Cloud with a namespace-scoped key
            return []
        raise
    present = dict(listed.custom_attributes)
    _refuse_mistyped(namespace, present)
    missing = [k for k in ALL if k.name not in present]
    if missing:
        await _register(client, namespace, missing)
    return [k.name for k in missing]


def _refuse_mistyped(namespace: str, present: dict[str, int]) -> None:
    for key in ALL:
        found = present.get(key.name)
        if found is not None and found != key.indexed_value_type.value:
            from temporalio.api.enums.v1 import IndexedValueType

            has = IndexedValueType.Name(IndexedValueType.ValueType(found)).removeprefix("INDEXED_VALUE_TYPE_").title().replace("_", "")
            raise SearchAttributesMissing(
                f"search attribute {key.name} exists in namespace {namespace!r} as {has}, but wf-initiation needs "
                f"{cli_type(key)}: remove it (temporal operator search-attribute remove --namespace {namespace} "
                f"--name {key.name}) and start the worker again, which registers it"
            )


async def _register(client: Any, namespace: str, missing: list[SearchAttributeKey[Any]]) -> None:
    from temporalio.api.enums.v1 import IndexedValueType
    from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
    from temporalio.service import RPCError, RPCStatusCode

    request = AddSearchAttributesRequest(namespace=namespace, search_attributes={
        k.name: IndexedValueType.ValueType(k.indexed_value_type.value) for k in missing})
    try:
        await client.operator_service.add_search_attributes(request)
    except RPCError as exc:
        if exc.status == RPCStatusCode.ALREADY_EXISTS:  # another worker registered them meanwhile
            return
        raise _missing(namespace, missing, exc.message) from None


async def _probe_by_query(client: Any, namespace: str) -> None:
    """Without operator rights: a visibility query naming every attribute fails when one is unknown."""
    from temporalio.service import RPCError, RPCStatusCode

    query = " AND ".join(f"{k.name} = 'wfi-probe'" for k in ALL if k is not WFI_TRIGGERS) + " AND WfiTriggers = 'wfi-probe'"
    try:
        await client.count_workflows(query)
    except RPCError as exc:
        if exc.status == RPCStatusCode.INVALID_ARGUMENT:
            raise _missing(namespace, list(ALL), exc.message) from None
        if exc.status != RPCStatusCode.UNIMPLEMENTED:  # e.g. the time-skipping test server: nothing to check with
            raise


def _missing(namespace: str, keys: list[SearchAttributeKey[Any]], reason: str) -> SearchAttributesMissing:
    names = ", ".join(f"{k.name} ({cli_type(k)})" for k in keys)
    reason = " ".join(reason.split())[:200]
    return SearchAttributesMissing(
        f"namespace {namespace!r} lacks the wf-initiation search attributes {names} and this worker may not "
        f"register them ({reason}); add them with: {create_command(namespace, keys)} "
        "(Temporal Cloud: tcld namespace search-attributes add, or the Cloud UI)"
    )
