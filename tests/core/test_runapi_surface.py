"""What a run may ask of wf-initiation (COMP-4, COMP-7): wait for events, nothing else."""

from __future__ import annotations

import ast
import inspect
import pathlib
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import wf_initiation.workflows.runapi as runapi
from tests.support.activation import make_spec
from tests.support.engine import drive
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.engine import Engine, SignalRun, SubscribeRequest, UnsubscribeRequest, initial_state

T0 = datetime(2030, 1, 1, tzinfo=UTC)
FORBIDDEN_WORDS = ("create", "delete", "modify", "update", "fire", "trigger_now", "schedule", "advance", "cancel",
                   "terminate", "start", "deliver", "operate", "activate", "pause", "resume")


def test_the_run_side_api_exports_only_wait_for() -> None:
    # proves: COMP-4, COMP-7
    assert runapi.__all__ == ["wait_for"]
    assert inspect.iscoroutinefunction(runapi.wait_for)
    assert list(inspect.signature(runapi.wait_for).parameters) == ["workflow", "trigger", "match", "timeout"]


def test_no_public_name_of_the_run_side_module_creates_fires_or_controls_anything() -> None:
    # proves: COMP-4, COMP-7
    own = {name for name, value in vars(runapi).items()
           if not name.startswith("_") and getattr(value, "__module__", None) == runapi.__name__}
    assert own == {"wait_for", "WaitForExample"}, "the example run is the only extra (its input is on the wire)"
    public_members = own | {m for m in dir(runapi.WaitForExample) if not m.startswith("_")}
    assert not [n for n in public_members if any(w in n.lower() for w in FORBIDDEN_WORDS)]


def test_the_run_side_module_sends_only_subscribe_and_unsubscribe_and_starts_or_cancels_nothing() -> None:
    # proves: COMP-4, COMP-7
    tree = ast.parse(pathlib.Path(runapi.__file__).read_text())
    called = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    assert not called & {"cancel", "terminate", "start_child_workflow", "execute_child_workflow", "execute_activity",
                         "start_activity", "execute_local_activity", "start_local_activity", "continue_as_new"}
    sends = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "_send"]
    assert {ast.unparse(n.args[1]) for n in sends} == {"SUBSCRIBE_SIGNAL", "UNSUBSCRIBE_SIGNAL"}
    signal_calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "signal"]
    assert len(signal_calls) == 1, "every signal goes through _send"


SCHEDULED_AND_REPLIES = """
name: surface
on:
  - time.schedule: {cron: "0 9 * * *", timezone: UTC}
    as: daily
  - http.request: {path: /hooks/replies}
    as: reply
"""

requests = st.one_of(
    st.builds(SubscribeRequest, sub_id=st.sampled_from(["s1", "s2", "s3"]), entry=st.sampled_from(["daily", "reply", "x"]),
              run_workflow_id=st.just("run-1"), match=st.dictionaries(st.sampled_from(["body.t", "method"]), st.text(max_size=2)),
              expires_at=st.one_of(st.none(), st.just(T0 + timedelta(minutes=1)))),
    st.builds(UnsubscribeRequest, sub_id=st.sampled_from(["s1", "s2", "s9"]), run_workflow_id=st.just("run-1")),
)


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> ActivationSpec:
    return make_spec(tmp_path_factory.mktemp("surface"), SCHEDULED_AND_REPLIES, task_queue="unused")


@settings(max_examples=60, deadline=None)
@given(batch=st.lists(requests, max_size=8))
def test_whatever_a_run_signals_the_activation_starts_cancels_or_fires_nothing(spec: ActivationSpec, batch: list) -> None:
    # proves: COMP-4, COMP-7
    engine = drive(Engine(spec, initial_state(spec, T0)))
    before = engine.state.model_copy(deep=True)
    for request in batch:
        if isinstance(request, SubscribeRequest):
            engine.subscribe(request, T0)
        else:
            engine.unsubscribe(request, T0)
    assert all(isinstance(c, SignalRun) and c.workflow_id == "run-1" for c in engine.take_commands())
    assert engine.state.runs == {} and engine.state.unacked.keys() <= {f"ended\x1f{i}" for i in ("s1", "s2", "s3", "s9")}
    assert engine.state.schedules == before.schedules and engine.state.events == before.events
    assert all(s.entry == "reply" for s in engine.state.subscriptions.values()), "only external/poll entries"
