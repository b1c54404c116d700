"""Capability inference and classification, checked through ``wfi validate`` (CAP-1..8).

Every case writes Workfiles into the target's scratch directory, runs
``wfi validate --json --claims CLAIMS FILE...`` as a subprocess and checks the CLI contract: exit 0
valid and supported, 1 invalid, 3 unsupported; one JSON object per file with ``file``, ``status``,
``workflow``, ``required_capabilities`` and ``diagnostics`` (each with ``code``, ``message``,
``entry``, ``path``, ``line``, ``capability``). Claims are always passed as a claims file in the
format ``wfi conformance run`` writes: ``{"capabilities": [...]}``.

The per-kind inference cases (CAP-1) belong to the capability their kind requires; the cases that
concern the validator as a whole belong to ``core``, which every claim depends on.
"""

from __future__ import annotations

import json
import pathlib
import textwrap
from collections.abc import Sequence
from typing import Any

from wf_initiation.conformance.kit import CAPABILITIES, CORE, EXTERNAL, POLLING, SCHEDULED, CliResult, Target, case, check

FILE_KEYS = {"file", "status", "workflow", "required_capabilities", "diagnostics"}
DIAGNOSTIC_KEYS = {"code", "message", "entry", "path", "line", "capability"}

# One configuration per built-in connector, each valid against its manifest's input schema.
SCHEDULE_ENTRIES = {"time.schedule": '{cron: "0 9 * * *", timezone: UTC}'}
EXTERNAL_ENTRIES = {
    "http.request": "{path: /hooks/orders}",
    "mail.received": "{inbox: support@example.com}",
    "workflow.completed": "{workflow: upstream-flow}",
}
POLL_ENTRIES = {
    "rss.item_published": "{feed: https://blog.example.com/feed.xml}",
    "sheet.row_added": "{sheet: Content Calendar}",
    "sql.row_inserted": "{table: orders, column: id}",
}
STEPS = "steps:\n  - id: handle\n"


def workfile(name: str, on: str) -> str:
    """A Workfile named ``name`` whose ``on:`` block is ``on`` (YAML, written unindented)."""
    return f"name: {name}\non:\n{textwrap.indent(textwrap.dedent(on).strip(), '  ')}\n{STEPS}"


async def validate(target: Target, texts: Sequence[str], claims: Sequence[str]) -> tuple[CliResult, list[dict[str, Any]]]:
    """Write each Workfile, validate them in one call against ``claims``; return the call and its objects."""
    claims_file = target.write(f"{target.unique('claims')}.json", json.dumps({"capabilities": list(claims)}))
    files = [target.write(f"{target.unique('workfile')}.yaml", text) for text in texts]
    result = await target.wfi("validate", "--json", "--claims", str(claims_file), *map(str, files))
    docs = result.json()
    docs = docs if isinstance(docs, list) else [docs]
    check(len(docs) == len(files), f"expected one JSON object per file ({len(files)}), got {len(docs)}:\n{result.describe()}")
    for doc in docs:
        _check_shape(doc, result)
    by_file = {pathlib.Path(str(d["file"])).name: d for d in docs}
    check(set(by_file) == {f.name for f in files}, f"JSON objects do not name the files validated:\n{result.describe()}")
    return result, [by_file[f.name] for f in files]


def _check_shape(doc: Any, result: CliResult) -> None:
    check(isinstance(doc, dict) and FILE_KEYS <= set(doc), f"each object needs keys {sorted(FILE_KEYS)}:\n{result.describe()}")
    for diag in doc["diagnostics"]:
        check(
            isinstance(diag, dict) and DIAGNOSTIC_KEYS <= set(diag),
            f"each diagnostic needs keys {sorted(DIAGNOSTIC_KEYS)}, got {diag!r}",
        )


def expect(result: CliResult, code: int, docs: Sequence[dict[str, Any]], status: str) -> None:
    """The call exited with ``code`` and every file has ``status``."""
    seen = [d["status"] for d in docs]
    check(
        result.code == code and all(s == status for s in seen),
        f"expected exit {code} and status {status!r} for every file, got statuses {seen}:\n{result.describe()}",
    )


def requires(doc: dict[str, Any], capabilities: Sequence[str]) -> None:
    """The file's inferred requirements are exactly ``capabilities``."""
    got = doc["required_capabilities"]
    check(
        sorted(got) == sorted(capabilities) and len(got) == len(set(got)),
        f"{doc['file']}: expected required_capabilities {sorted(capabilities)}, got {got}",
    )


async def _kind_requires(target: Target, entries: dict[str, str], capability: str) -> None:
    texts = [workfile(target.unique("cap1"), f"{name}: {config}") for name, config in entries.items()]
    result, docs = await validate(target, texts, [capability])
    expect(result, 0, docs, "valid")
    for doc in docs:
        requires(doc, [capability])
    others = [c for c in CAPABILITIES if c != capability]
    result, docs = await validate(target, texts, others)
    expect(result, 3, docs, "unsupported")


@case(capability=SCHEDULED, clauses=["CAP-1"])
async def a_schedule_entry_requires_scheduled_initiation(target: Target) -> None:
    await _kind_requires(target, SCHEDULE_ENTRIES, SCHEDULED)


@case(capability=EXTERNAL, clauses=["CAP-1"])
async def an_external_entry_requires_external_event_initiation(target: Target) -> None:
    await _kind_requires(target, EXTERNAL_ENTRIES, EXTERNAL)


@case(capability=POLLING, clauses=["CAP-1"])
async def a_poll_entry_requires_polling_initiation(target: Target) -> None:
    await _kind_requires(target, POLL_ENTRIES, POLLING)


@case(capability=CORE, clauses=["CAP-3"])
async def a_multi_trigger_workflow_requires_the_union_even_for_an_entry_that_never_fires(target: Target) -> None:
    # The schedule ended long ago: it never fires again, yet it still counts (CAP-3, SCHED-4).
    three = workfile(target.unique("cap3"), """
        - http.request: {path: /hooks/orders}
          as: hook
        - rss.item_published: {feed: https://blog.example.com/feed.xml}
          as: item
        - time.schedule: {cron: "0 9 * * *", timezone: UTC, end: "2000-01-01T00:00:00Z"}
          as: tick
    """)
    result, docs = await validate(target, [three], list(CAPABILITIES))
    expect(result, 0, docs, "valid")
    requires(docs[0], CAPABILITIES)
    result, docs = await validate(target, [three], [EXTERNAL, POLLING])
    expect(result, 3, docs, "unsupported")
    _names(docs[0], SCHEDULED, ["tick"])


@case(capability=CORE, clauses=["CAP-4"])
async def batching_queueing_and_guards_do_not_change_the_required_capability(target: Target) -> None:
    variants = {
        "plain": "http.request: {path: /hooks/orders}\nas: hook",
        "when": "http.request: {path: /hooks/orders}\nas: hook\nwhen: \"{{ hook.method == 'POST' }}\"",
        "queue_by": "http.request: {path: /hooks/orders}\nas: hook\nqueue_by: \"{{ hook.body.account }}\"",
        "batch": "http.request: {path: /hooks/orders}\nas: hook\n"
        "batch: {size: 10, max_wait: 5s, partition_by: \"{{ hook.body.account }}\"}",
        "poll batch": "rss.item_published: {feed: https://blog.example.com/feed.xml}\nas: item\n"
        "when: \"{{ item.title != '' }}\"\nbatch: {size: 5, max_wait: 1m}",
        "schedule queue": "time.schedule: {cron: \"*/15 * * * *\"}\nas: tick\nqueue_by: \"{{ tick.scheduled_at }}\"",
    }
    texts = [workfile(target.unique("cap4"), on) for on in variants.values()]
    expected = [EXTERNAL] * 4 + [POLLING, SCHEDULED]
    result, docs = await validate(target, texts, list(CAPABILITIES))
    expect(result, 0, docs, "valid")
    for doc, capability in zip(docs, expected):
        requires(doc, [capability])
    result, docs = await validate(target, texts[:4], [EXTERNAL])
    expect(result, 0, docs, "valid")


@case(capability=CORE, clauses=["CAP-7", "CAP-8"])
async def a_missing_claim_makes_the_workfile_unsupported_naming_every_capability_and_entry(target: Target) -> None:
    text = workfile(target.unique("cap7"), """
        - http.request: {path: /hooks/orders}
          as: hook
        - mail.received: {inbox: support@example.com}
          as: message
        - sql.row_inserted: {table: orders, column: id}
          as: row
        - time.schedule: {cron: "@daily"}
          as: tick
    """)
    result, docs = await validate(target, [text], [SCHEDULED])
    expect(result, 3, docs, "unsupported")
    requires(docs[0], CAPABILITIES)
    _names(docs[0], EXTERNAL, ["hook", "message"])
    _names(docs[0], POLLING, ["row"])
    named = {d["capability"] for d in docs[0]["diagnostics"] if d["capability"]}
    check(SCHEDULED not in named, f"a claimed capability must not be reported unsupported: {docs[0]['diagnostics']}")


def _names(doc: dict[str, Any], capability: str, entries: Sequence[str]) -> None:
    """Some diagnostic names ``capability`` and, per entry, the entry (its field or its message)."""
    diags = [d for d in doc["diagnostics"] if d["capability"] == capability]
    check(diags, f"no diagnostic has capability {capability!r}: {doc['diagnostics']}")
    for entry in entries:
        check(
            any(d["entry"] == entry or entry in d["message"] for d in diags),
            f"no {capability} diagnostic names entry {entry!r}: {diags}",
        )


@case(capability=CORE, clauses=["CAP-2"])
async def a_workfile_that_declares_its_own_capability_requirements_is_rejected(target: Target) -> None:
    on = "http.request: {path: /hooks/orders}"
    texts = [
        workfile(target.unique("cap2"), on) + f"requires: [{EXTERNAL}]\n",
        workfile(target.unique("cap2"), on) + f"capabilities: [{EXTERNAL}]\n",
        workfile(target.unique("cap2"), f"{on}\nrequires: [{EXTERNAL}]"),
    ]
    result, docs = await validate(target, texts, list(CAPABILITIES))
    expect(result, 1, docs, "invalid")
    # The same Workfile without the declaration is valid: the declaration alone is what is rejected.
    result, docs = await validate(target, [workfile(target.unique("cap2"), on)], list(CAPABILITIES))
    expect(result, 0, docs, "valid")


@case(capability=CORE, clauses=["CAP-5"])
async def the_core_validator_judges_validity_without_regard_to_target_support(target: Target) -> None:
    # Invalid (batch with queue_by, TRIG-17) and needing a capability nobody claims: invalid wins.
    invalid = workfile(target.unique("cap5"), """
        http.request: {path: /hooks/orders}
        queue_by: "{{ request.body.account }}"
        batch: {size: 10}
    """)
    valid = workfile(target.unique("cap5"), "http.request: {path: /hooks/orders}")
    codes = []
    for claims in ([], list(CAPABILITIES)):
        result, docs = await validate(target, [invalid], claims)
        expect(result, 1, docs, "invalid")
        codes.append(sorted(d["code"] for d in docs[0]["diagnostics"]))
    check(codes[0] == codes[1], f"diagnostics of an invalid file must not depend on claims: {codes[0]} vs {codes[1]}")
    result, docs = await validate(target, [valid], [])
    expect(result, 3, docs, "unsupported")
    requires(docs[0], [EXTERNAL])


CASES = (
    a_schedule_entry_requires_scheduled_initiation,
    an_external_entry_requires_external_event_initiation,
    a_poll_entry_requires_polling_initiation,
    a_multi_trigger_workflow_requires_the_union_even_for_an_entry_that_never_fires,
    batching_queueing_and_guards_do_not_change_the_required_capability,
    a_missing_claim_makes_the_workfile_unsupported_naming_every_capability_and_entry,
    a_workfile_that_declares_its_own_capability_requirements_is_rejected,
    the_core_validator_judges_validity_without_regard_to_target_support,
)
