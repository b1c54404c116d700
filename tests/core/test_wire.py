"""The wire contract (issue 14 item 2): every name another process sees is written once, in
``wf_initiation.wire``, and the packages import one another in one direction only.

The names are pinned here on purpose: recorded histories, webhook bridges and running deployments
address the activation by them, so a rename must fail a test, not drift silently.
"""

from __future__ import annotations

import ast
import pathlib

from tests.support.paths import ROOT
from wf_initiation import wire
from wf_initiation.wire import errors as wire_errors
from wf_initiation.wire import names as wire_names

WIRE = ROOT / "wf_initiation" / "wire"
# Where the contract is used: the package (its import root and the three folders installed into it),
# the benchmarks and the worker script. Tests are left out: they may spell a name to pin it.
SOURCES = [ROOT / "wf_initiation", ROOT / "workflows", ROOT / "activities", ROOT / "conformance", ROOT / "bench",
           ROOT / "worker.py"]
AREAS = {"workflows": ROOT / "workflows", "activities": ROOT / "activities", "conformance": ROOT / "conformance"}

PINNED = {
    "ACTIVATION_WORKFLOW": "wfi.Activation", "ECHO_RUN_WORKFLOW": "wfi.EchoRun",
    "WAIT_FOR_EXAMPLE_WORKFLOW": "wfi.WaitForExample", "ACTIVATION_ID_PREFIX": "wfi-activation:",
    "ACTIVATE_UPDATE": "activate", "DELIVER_UPDATE": "deliver", "DELIVER_MANY_UPDATE": "deliver_many",
    "OPERATE_UPDATE": "operate", "DEACTIVATE_UPDATE": "deactivate", "DELIVER_SIGNAL": "deliver_signal",
    "SUBSCRIBE_SIGNAL": "subscribe", "UNSUBSCRIBE_SIGNAL": "unsubscribe", "LIFECYCLE_SIGNAL": "lifecycle_event",
    "SUBSCRIPTION_EVENT_SIGNAL": "wfi.subscription_event", "STATE_QUERY": "state", "SUMMARY_QUERY": "summary",
    "EVENTS_QUERY": "events", "DELIVERY_QUERY": "delivery", "ECHO_RUN_RELEASE_SIGNAL": "release",
    "ECHO_RUN_RECEIVED_QUERY": "received", "START_RUNS_ACTIVITY": "wfi.start_runs",
    "WATCH_RUNS_ACTIVITY": "wfi.watch_runs", "CONTROL_RUN_ACTIVITY": "wfi.control_run",
    "CONTROL_RUNS_ACTIVITY": "wfi.control_runs",
    "PUBLISH_LIFECYCLE_ACTIVITY": "wfi.publish_lifecycle", "WAIT_ACTIVITY": "wfi.wait_for_instant",
    "POLL_ACTIVITY_PREFIX": "wfi.poll.", "INVALID_ARGUMENT": "InvalidArgument", "HANDLER_FAILED": "HandlerFailed",
    "REBINDING": "Rebinding", "NO_ACTIVATION": "NoActivation", "SUBSCRIPTION_REFUSED": "SubscriptionRefused",
    "ECHO_RUN_FAILED": "EchoRunFailed", "POLL_SOURCE_UNAVAILABLE": "PollSourceUnavailable",
    "POLL_CONFIG_INVALID": "PollConfigInvalid", "STALE_ACTIVATION": "StaleActivationError", "UNENCODED": "Unencoded",
}


def test_the_contract_names_are_pinned() -> None:
    assert {name: getattr(wire, name) for name in PINNED} == PINNED
    assert [k.name for k in wire.SEARCH_ATTRIBUTES] == ["WfiWorkflow", "WfiActivation", "WfiState", "WfiTriggers"]
    assert wire.workflow_id_for("orders") == "wfi-activation:orders"
    assert wire.poll_activity_name("rss.item_published") == "wfi.poll.rss.item_published"


def _files(paths: list[pathlib.Path]) -> list[pathlib.Path]:
    out: list[pathlib.Path] = []
    for path in paths:
        out += [path] if path.is_file() else sorted(p for p in path.rglob("*.py") if "__pycache__" not in p.parts)
    return [p for p in out if WIRE not in p.parents]


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants (prose may name the contract; code may not spell it)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            found.add(id(node.value))  # attribute docstrings after an assignment
    return found


def _literals(path: pathlib.Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    skip = _docstrings(tree)
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip]


def _distinctive() -> dict[str, str]:
    """The contract strings that cannot be an ordinary word: value -> its name in wire."""
    values = {name: value for module in (wire_names, wire_errors) for name, value in vars(module).items()
              if name.isupper() and isinstance(value, str)}
    values |= {f"SEARCH_ATTRIBUTES[{k.name}]": k.name for k in wire.SEARCH_ATTRIBUTES}
    return {value: name for name, value in values.items()
            if any(c in value for c in ".:_") or any(c.isupper() for c in value)}


# The pure core imports nothing above it, yet emits the signals of subscriptions and names the
# activation's workflow id: those few are defined there and wire re-exports them (wire/names.py).
DEFINED_IN_CORE = {
    "wf_initiation/core/engine/_subscriptions.py": {wire.SUBSCRIBE_SIGNAL, wire.LIFECYCLE_SIGNAL},
    "wf_initiation/core/engine/_offer.py": {wire.SUBSCRIPTION_EVENT_SIGNAL, wire.UNSUBSCRIBE_SIGNAL},
    "wf_initiation/core/engine/_lanes.py": {wire.ACTIVATION_ID_PREFIX, wire.LANES_SIGNAL},
}


def test_no_contract_string_is_written_outside_wire() -> None:
    # A second spelling of a name is a name that can drift: workflow types, activity names, signal
    # names, error types, search attributes and the workflow id prefix are imported from wire.
    distinctive = _distinctive()
    prefixes = (wire.ACTIVATION_ID_PREFIX, wire.POLL_ACTIVITY_PREFIX)
    found = []
    for path in _files(SOURCES):
        for line, text in _literals(path):
            if text in DEFINED_IN_CORE.get(str(path.relative_to(ROOT)), ()):
                continue
            # A poll activity's name spelled out (wfi.poll.<connector>); telemetry's wfi.poll.* metrics are no name.
            spelled_poll = text.startswith(wire.POLL_ACTIVITY_PREFIX) and text.count(".") > 2
            if text in distinctive or (text.startswith(prefixes[0]) and text != prefixes[0]) or spelled_poll:
                found.append(f"{path.relative_to(ROOT)}:{line}: {text!r} ({distinctive.get(text, 'a prefix')})")
    assert not found, "contract strings spelled outside wf_initiation/wire (import them):\n" + "\n".join(found)


HANDLER_DECORATORS = {"defn", "update", "signal", "query"}
CALLS_BY_NAME = {"execute_update", "start_update", "query", "signal", "execute_activity", "start_activity",
                 "execute_local_activity", "start_local_activity", "start_workflow", "execute_workflow",
                 "get_signal_handler", "set_signal_handler"}


def test_handlers_and_calls_name_the_contract_through_wire() -> None:
    # Short names ("deliver", "state") are ordinary words elsewhere: check where they are used as names.
    found = []
    ours = [ROOT / "wf_initiation", ROOT / "workflows", ROOT / "activities", ROOT / "conformance"]
    for path in _files(ours):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            spelled = []
            if node.func.attr in HANDLER_DECORATORS:
                spelled += [k.value for k in node.keywords if k.arg == "name" and isinstance(k.value, ast.Constant)]
            if node.func.attr in CALLS_BY_NAME and node.args and isinstance(node.args[0], ast.Constant):
                spelled.append(node.args[0])
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {node.func.attr}({s.value!r})" for s in spelled]
    assert not found, "handler and call names spelled as literals (use wf_initiation.wire):\n" + "\n".join(found)


# Which part may import which (wire below everything but the core, activities never importing
# workflows, the conformance kit black-box) is checked by import-linter's contracts in
# pyproject.toml (`python3 dev.py lint`), for the whole package.


def test_the_literal_check_sees_a_contract_string_written_outside_wire(tmp_path: pathlib.Path) -> None:
    # The checks above only pass because nothing offends: one that would must be found.
    bad = tmp_path / "bad.py"
    bad.write_text("x = 'wfi.EchoRun'\n")
    assert (1, "wfi.EchoRun") in _literals(bad) and "wfi.EchoRun" in _distinctive()


def test_the_activation_calls_its_activities_by_reference_and_their_names_stay() -> None:
    # A renamed or re-typed activity now fails at import or type check, not in a running activation;
    # the names histories carry are the decorators' (pinned above). Polls stay by name: connectors,
    # third-party ones too, are registered by their manifest name when the worker starts.
    from temporalio import activity

    from wf_initiation.activities.clock import wait_for_instant
    from wf_initiation.activities.lifecycle import LifecycleActivities
    from wf_initiation.activities.runs import RunActivities
    from wf_initiation.activities.shards import ShardActivities

    names = {fn: activity._Definition.must_from_callable(fn).name for fn in (
        wait_for_instant, RunActivities.start_runs, RunActivities.watch_runs, RunActivities.control_run,
        RunActivities.control_runs, LifecycleActivities.publish, ShardActivities.measure_shards, ShardActivities.grow)}
    assert list(names.values()) == [wire.WAIT_ACTIVITY, wire.START_RUNS_ACTIVITY, wire.WATCH_RUNS_ACTIVITY,
                                    wire.CONTROL_RUN_ACTIVITY, wire.CONTROL_RUNS_ACTIVITY, wire.PUBLISH_LIFECYCLE_ACTIVITY,
                                    wire.MEASURE_SHARDS_ACTIVITY, wire.GROW_ACTIVITY]
    called = []
    source = "\n".join((ROOT / "workflows" / name).read_text() for name in ("activation.py", "_time.py", "_executor.py"))
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and "activity" in node.func.attr \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "workflow":
            called.append(ast.unparse(node.args[0]))
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.IfExp):  # execute = local if hold else regular
            called += [ast.unparse(n) for n in (node.value.body, node.value.orelse) if isinstance(n, ast.Attribute)
                       and "activity" in n.attr]
    assert set(called) == {
        "wait_for_instant", "workflow.execute_local_activity_method", "workflow.execute_activity_method",
        "RunActivities.watch_runs", "RunActivities.control_run", "RunActivities.control_runs", "LifecycleActivities.publish",
        "ShardActivities.measure_shards", "ShardActivities.grow", "activity_name_for(c.connector)"}, called
    assert "RunActivities.start_runs" in ast.unparse(tree), "the start activity by reference, local or regular"
