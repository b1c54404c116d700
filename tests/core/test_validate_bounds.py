"""Values that used to validate and then kill the activation (issue 11 item 12), and their neighbours.

For each: `wfi validate --deployment` and what `wfi activate` runs (`client.build_spec`, the function
the CLI activates with) refuse it with the same diagnostic code before anything runs, and the value
at the limit is accepted by both. Deployment files are bounded like Workfiles (size, depth, aliases).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from wf_initiation.cli import main
from wf_initiation.client import build_spec
from wf_initiation.core import DiagnosticError
from wf_initiation.core._bounds import (
    MAX_BATCH_SIZE,
    MAX_BINDING_NAME,
    MAX_CATCH_UP_BOUND,
    MAX_DURATION,
    MAX_FILE_BYTES,
    MAX_HISTORY_EVENTS,
    MAX_TEMPORAL_NAME,
)
from wf_initiation.core.deployment import load_deployment

SCHEDULE = "name: nightly\non:\n  time.schedule: {config}\n"
MAIL = "name: mail\n{inputs}on:\n  mail.received: {{inbox: a@b.co}}\n  as: {name}\n{batch}"
SQL = "name: orders\n{inputs}on:\n  sql.row_inserted: {{table: {table}, column: id}}\n"
RUN = {"run": {"workflow_type": "Report", "task_queue": "reports"}}
LIMIT_DAYS = f"{MAX_DURATION.days}d"
PAST_DAYS = f"{MAX_DURATION.days + 1}d"


def both(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], workfile: str, **settings: Any) -> tuple[set[str], set[str]]:
    """(codes `wfi validate --deployment` reports, codes `wfi activate` refuses with); empty sets = accepted."""
    name = workfile.split("\n", 1)[0].removeprefix("name: ")
    wf, dep = tmp_path / "w.yaml", tmp_path / "deployment.yaml"
    wf.write_text(workfile)
    connections = settings.pop("connections", {"db": {"connector": "sql"}, "mail": {"connector": "mail"}})
    dep.write_text(json.dumps({"connections": connections, "workflows": {name: {**RUN, **settings}}}))
    code = main(["validate", "--json", str(wf), "--deployment", str(dep)])
    validated = json.loads(capsys.readouterr().out)[0]
    assert code == (0 if validated["status"] == "valid" else 1)
    try:
        build_spec(wf, load_deployment(dep))
        activated: set[str] = set()
    except DiagnosticError as exc:
        activated = {d.code for d in exc.diagnostics}
    return {d["code"] for d in validated["diagnostics"]}, activated


REFUSED = [
    # (what, Workfile, deployment settings, diagnostic code)
    ("start 9999-12-31", SCHEDULE.format(config="{cron: '@daily', start: '9999-12-31T00:00:00Z'}"), {}, "SCHED-INVALID"),
    ("start from a deployment input", "name: nightly\ninputs: {start: {default: '2026-01-01T00:00:00Z'}}\non:\n"
     "  time.schedule: {cron: '@daily', start: '{{ inputs.start }}'}\n", {"inputs": {"start": "9999-12-31T00:00:00Z"}},
     "SCHED-INVALID"),
    ("cron 99 99 * * *", SCHEDULE.format(config="{cron: '99 99 * * *'}"), {}, "SCHED-INVALID"),
    ("zone Mars/Olympus", SCHEDULE.format(config="{cron: '@daily', timezone: Mars/Olympus}"), {}, "SCHED-INVALID"),
    ("zone name of 10,000 characters", SCHEDULE.format(config="{cron: '@daily', timezone: " + "A" * 10_000 + "}"), {},
     "SCHED-INVALID"),
    ("cron of 1,001 characters", SCHEDULE.format(config="{cron: '0 0 * * " + "1," * 496 + "1'}"), {}, "SCHED-INVALID"),
    ("interval 0s", SCHEDULE.format(config="{interval: 0s}"), {}, "SCHED-INVALID"),
    ("interval past the limit", SCHEDULE.format(config=f"{{interval: {PAST_DAYS}}}"), {}, "SCHED-INVALID"),
    ("random cron field", SCHEDULE.format(config="{cron: 'R R * * *'}"), {}, "SCHED-INVALID"),
    ("schedule overlay to a bad zone", SCHEDULE.format(config="{cron: '@daily'}"),
     {"overlay": {"schedule": {"timezone": "Mars/Olympus"}}}, "SCHED-INVALID"),
    ("max_wait 999999999d", MAIL.format(inputs="", name="m", batch="  batch: {max_wait: 999999999d}\n"), {},
     "TRIG-BATCH-MAX-WAIT"),
    ("max_wait past the limit", MAIL.format(inputs="", name="m", batch=f"  batch: {{max_wait: {PAST_DAYS}}}\n"), {},
     "TRIG-BATCH-MAX-WAIT"),
    ("batch.size past the limit", MAIL.format(inputs="", name="m", batch=f"  batch: {{size: {MAX_BATCH_SIZE + 1}}}\n"), {},
     "TRIG-BATCH-SIZE"),
    ("as of 990 characters", MAIL.format(inputs="", name="a" * 990, batch=""), {}, "TRIG-AS-INVALID"),
    ("as one past the limit", MAIL.format(inputs="", name="a" * (MAX_BINDING_NAME + 1), batch=""), {}, "TRIG-AS-INVALID"),
    ("dedup_retention 999999999d", MAIL.format(inputs="", name="m", batch=""), {"dedup_retention": "999999999d"},
     "DEPLOY-INVALID"),
    ("dedup_retention past the limit", MAIL.format(inputs="", name="m", batch=""), {"dedup_retention": PAST_DAYS},
     "DEPLOY-INVALID"),
    ("late_after past the limit", MAIL.format(inputs="", name="m", batch=""), {"late_after": PAST_DAYS}, "DEPLOY-INVALID"),
    ("poll interval 0s", SQL.format(inputs="", table="orders"), {"poll": {"interval": "0s"}}, "DEPLOY-INVALID"),
    ("poll interval 9ms", SQL.format(inputs="", table="orders"), {"poll": {"interval": "9ms"}}, "DEPLOY-INVALID"),
    ("poll timeout past 1h", SQL.format(inputs="", table="orders"), {"poll": {"timeout": "3601s"}}, "DEPLOY-INVALID"),
    ("max_history_events past the limit", MAIL.format(inputs="", name="m", batch=""),
     {"max_history_events": MAX_HISTORY_EVENTS + 1}, "DEPLOY-INVALID"),
    ("catch-up bound past the limit", SCHEDULE.format(config="{cron: '@daily'}"),
     {"missed": {"policy": "catch_up", "bound": MAX_CATCH_UP_BOUND + 1}}, "DEPLOY-INVALID"),
    ("run type past Temporal's id limit", MAIL.format(inputs="", name="m", batch=""),
     {"run": {"workflow_type": "W" * (MAX_TEMPORAL_NAME + 1), "task_queue": "q"}}, "DEPLOY-INVALID"),
    ("table name that is not an identifier", SQL.format(inputs="", table="'orders; drop table x'"), {},
     "TRIG-CONFIG-INVALID"),
    ("table name with an empty part", SQL.format(inputs="", table="a..b"), {}, "TRIG-CONFIG-INVALID"),
    ("table name from a deployment input", SQL.format(inputs="inputs: {t: {default: orders}}\n", table="'{{ inputs.t }}'"),
     {"inputs": {"t": "orders; drop table x"}}, "TRIG-CONFIG-INVALID"),
    ("undeclared deployment input", MAIL.format(inputs="", name="m", batch=""), {"inputs": {"region": "eu"}},
     "DEPLOY-UNKNOWN-INPUT"),
    ("overlay of an entry that does not exist", MAIL.format(inputs="", name="m", batch=""),
     {"overlay": {"nope": {"inbox": "x@y.z"}}}, "DEPLOY-UNKNOWN-OVERLAY"),
]


@pytest.mark.parametrize(("what", "workfile", "settings", "code"), REFUSED, ids=[r[0] for r in REFUSED])
def test_validate_with_the_deployment_and_activate_refuse_the_same_value(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], what: str, workfile: str, settings: dict, code: str
) -> None:
    # proves: SCHED-3, TRIG-2, INIT-3 (activation validates and fixes the binding before accepting events)
    validated, activated = both(tmp_path, capsys, workfile, **settings)
    assert code in validated, (what, validated)
    assert validated == activated, what


ACCEPTED = [
    ("max_wait at the limit", MAIL.format(inputs="", name="m", batch=f"  batch: {{max_wait: {LIMIT_DAYS}}}\n"), {}),
    ("batch.size at the limit", MAIL.format(inputs="", name="m", batch=f"  batch: {{size: {MAX_BATCH_SIZE}}}\n"), {}),
    ("as at the limit", MAIL.format(inputs="", name="a" * MAX_BINDING_NAME, batch=""), {}),
    ("dedup_retention at the limit", MAIL.format(inputs="", name="m", batch=""), {"dedup_retention": LIMIT_DAYS}),
    ("dedup_retention 0", MAIL.format(inputs="", name="m", batch=""), {"dedup_retention": "0s"}),
    ("interval at the limit", SCHEDULE.format(config=f"{{interval: {LIMIT_DAYS}}}"), {}),
    ("start at the last supported day", SCHEDULE.format(config="{cron: '@daily', start: '2199-12-31T00:00:00Z'}"), {}),
    ("a cron with no matching date (SCHED-4)", SCHEDULE.format(config="{cron: '0 0 30 2 *'}"), {}),
    ("poll interval at the limit", SQL.format(inputs="", table="orders"), {"poll": {"interval": "10ms", "backoff_initial": "10ms"}}),
    ("poll timeout at the limit", SQL.format(inputs="", table="orders"), {"poll": {"timeout": "1h"}}),
    ("schema-qualified table", SQL.format(inputs="", table="public.orders"), {}),
    ("max_history_events at the limit", MAIL.format(inputs="", name="m", batch=""), {"max_history_events": MAX_HISTORY_EVENTS}),
    ("declared deployment input", MAIL.format(inputs="inputs: {region: {default: us}}\n", name="m", batch=""),
     {"inputs": {"region": "eu"}}),
]


@pytest.mark.parametrize(("what", "workfile", "settings"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_validate_with_the_deployment_and_activate_accept_values_at_the_limit(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], what: str, workfile: str, settings: dict
) -> None:
    assert both(tmp_path, capsys, workfile, **settings) == (set(), set()), what


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)
HOSTILE_DEPLOYMENTS = {
    "alias bomb": (BOMB, "more than 100000 nodes"),
    "self-referencing alias": ("a: &a [*a]\n", "contains it"),
    "nested 100 deep": ("a: " + "[" * 100 + "]" * 100 + "\n", "deeper than 64"),
    "5,000-digit integer": ("workflows: {w: {max_history_events: " + "9" * 5000 + "}}\n", "4,300 digits"),
    "over the size limit": ("# " + "x" * MAX_FILE_BYTES + "\n", f"larger than {MAX_FILE_BYTES:,} bytes"),
    "not UTF-8": (b"a: \xff\xfe\n", "not UTF-8"),
}


@pytest.mark.parametrize("what", list(HOSTILE_DEPLOYMENTS))
def test_a_hostile_deployment_file_is_refused_with_one_line(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], what: str
) -> None:
    text, fragment = HOSTILE_DEPLOYMENTS[what]
    dep = tmp_path / "deployment.yaml"
    dep.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(DiagnosticError) as caught:
        load_deployment(dep)
    assert fragment in caught.value.diagnostics[0].message
    wf = tmp_path / "w.yaml"
    wf.write_text(MAIL.format(inputs="", name="m", batch=""))
    assert main(["validate", str(wf), "--deployment", str(dep)]) == 1
    out = capsys.readouterr()
    assert fragment in out.out and "Traceback" not in out.out + out.err


def test_a_workfile_over_the_size_limit_is_refused(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    wf = tmp_path / "w.yaml"
    wf.write_text(MAIL.format(inputs="", name="m", batch="") + "#" * MAX_FILE_BYTES)
    assert main(["validate", str(wf)]) == 1
    assert "WF-FILE-TOO-LARGE" in capsys.readouterr().out


# ------------------------------------------------------------------ histories and plain clients

def test_a_spec_recorded_before_the_bounds_still_decodes_and_the_edge_checks_name_each_bound(tmp_path: pathlib.Path) -> None:
    # A history written by an earlier build must keep replaying: the workflow decodes its input
    # without the edge's bounds; spec_problems (the activate update's validator) names them.
    from tests.support.activation import make_spec
    from wf_initiation.core.activation import ActivationSpec, spec_problems

    spec = make_spec(tmp_path, SCHEDULE.format(config="{cron: '@daily'}"), task_queue="q")
    raw = json.loads(spec.model_dump_json())
    raw["policies"].update(dedup_retention="P9000D", max_history_events=99_999)
    raw["policies"]["poll"]["interval"] = "PT0.005S"
    raw["entries"][0]["config"]["start"] = "1960-01-01T00:00:00Z"
    old = ActivationSpec.model_validate_json(json.dumps(raw))
    assert old.policies.dedup_retention.days == 9000
    problems = " | ".join(spec_problems(old))
    for fragment in ("dedup_retention", "max_history_events", "poll.interval", "1960"):
        assert fragment in problems, problems
    assert spec_problems(spec) == []


def test_legacy_schedules_keep_the_earlier_day_rule_for_replay() -> None:
    # histories of specs before evaluation 2 were computed with croniter's own rule
    from datetime import UTC, datetime

    from wf_initiation.core.schedule import next_occurrences, parse_schedule

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    legacy = parse_schedule({"cron": "0 0 */2 * MON", "interval": "5000d"}, legacy=True)
    assert [t.day for t in next_occurrences(legacy, t0, 3)] == [3, 5, 7]  # odd days OR Mondays, as before
    current = parse_schedule({"cron": "0 0 */2 * MON"})
    assert [t.day for t in next_occurrences(current, t0, 2)] == [5, 19]
    with pytest.raises(ValueError, match="longer than 3650d"):
        parse_schedule({"cron": "0 0 */2 * MON", "interval": "5000d"})


def test_a_spec_recorded_before_evaluation_2_keeps_the_earlier_evaluation(tmp_path: pathlib.Path) -> None:
    # the spec (the workflow's input) decides, so a replay decides the same with no marker in history
    from tests.support.activation import make_spec
    from wf_initiation.core.activation import EVALUATION_VERSION, ActivationSpec

    spec = make_spec(tmp_path, SCHEDULE.format(config="{cron: '@daily'}"), task_queue="q")
    assert spec.evaluation == EVALUATION_VERSION == 2
    raw = json.loads(spec.model_dump_json())
    del raw["evaluation"]
    assert ActivationSpec.model_validate_json(json.dumps(raw)).evaluation == 1
