"""`wfi`'s table over the error tree (wf_initiation/cli/_common.py EXPLAIN): every error type has an
exit status and one line naming the fix; and against the dev server, an activation whose workflow
ended is told apart from one that never ran."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest
from temporalio.client import RPCTimeoutOrCancelledError, WorkflowQueryFailedError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from tests.support.activation import unique
from tests.support.cli import MAIL_WORKFILE, Pair, mail, wfi
from wf_initiation import errors
from wf_initiation.cli import EXIT_FAILED, EXIT_USAGE, UserError, build_parser
from wf_initiation.cli._common import EXPLAIN, _explain
from wf_initiation.core.deployment import parse_deployment
from wf_initiation.errors import WfiError, most_specific
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire import INVALID_ARGUMENT, workflow_id_for

DEPLOYMENT = parse_deployment({"temporal": {"address": "temporal.example:7233", "namespace": "team", "task_queue": "q"},
                               "workflows": {}})


def _explained(exc: BaseException, workflow: str | None = "orders") -> BaseException:
    args = build_parser().parse_args(["deliver", "--deployment", "d.yaml", "--workflow", "orders", "--payload", "{}",
                                      "--timeout", "7"])
    return _explain(exc, args, DEPLOYMENT, workflow)


def test_every_error_type_has_an_exit_status_and_a_line() -> None:
    for cls in errors.tree():
        row = most_specific(cls, EXPLAIN)
        assert row is not None, cls
        code, _ = EXPLAIN[row]
        assert code == (EXIT_USAGE if issubclass(cls, errors.DeliveryRefused) else EXIT_FAILED), cls
    assert set(EXPLAIN) <= set(errors.tree()) and WfiError in EXPLAIN


def _rpc(status: RPCStatusCode, message: str) -> RPCError:
    return RPCError(message, status, b"")


@pytest.mark.parametrize(("raised", "workflow", "code", "line"), [
    (_rpc(RPCStatusCode.NOT_FOUND, "workflow not found"), "orders", EXIT_FAILED,
     "no activation of workflow 'orders' is running; start one with `wfi activate WORKFILE --deployment d.yaml`"),
    (_rpc(RPCStatusCode.NOT_FOUND, "workflow not found"), None, EXIT_FAILED, "Temporal refused the call: workflow not found"),
    (_rpc(RPCStatusCode.NOT_FOUND, "workflow execution already completed"), "orders", EXIT_FAILED,
     "the activation of workflow 'orders' has ended; activate it again with `wfi activate WORKFILE --deployment d.yaml`"),
    (_rpc(RPCStatusCode.PERMISSION_DENIED, "Request unauthorized."), "orders", EXIT_FAILED,
     "Temporal refused the credentials (Request unauthorized.); check --api-key / TEMPORAL_API_KEY, "
     "the TLS certificate flags or the profile"),
    (_rpc(RPCStatusCode.INVALID_ARGUMENT, "bad"), "orders", EXIT_FAILED, "Temporal refused the call: bad"),
    (RPCTimeoutOrCancelledError("timed out"), "orders", EXIT_FAILED,
     "no answer from the activation of 'orders' within 7s (--timeout): is a worker serving task queue 'q' "
     "(`wfi worker --deployment d.yaml` or `wfi up`)?"),
    (WorkflowUpdateFailedError(ApplicationError("unknown entry 'x'", type=INVALID_ARGUMENT)), "orders", EXIT_FAILED,
     "the activation refused the request: unknown entry 'x'"),
    (WorkflowQueryFailedError("the handler failed"), "orders", EXIT_FAILED, "the activation could not answer: the handler failed"),
    (KeyError("Unknown payload encoding binary/encrypted"), "orders", EXIT_FAILED, "encoded as binary/encrypted"),
    (errors.DeliveryTooLarge("the payload is 300000 bytes; the limit is 262144"), "orders", EXIT_USAGE,
     "the payload is 300000 bytes; the limit is 262144"),
    (errors.TemporalUnavailable("cannot reach Temporal at x:1 (Connection refused); start one with `wfi up`"), "orders",
     EXIT_FAILED, "cannot reach Temporal at x:1 (Connection refused); start one with `wfi up`"),
    (errors.NamespaceNotFound("namespace missing", status="NOT_FOUND", detail="Namespace team is not found."), "orders",
     EXIT_FAILED, "namespace 'team' does not exist on the Temporal at temporal.example:7233"),
])
def test_each_row_says_what_happened_and_the_fix(raised: BaseException, workflow: str | None, code: int, line: str) -> None:
    explained = _explained(raised, workflow)
    assert isinstance(explained, UserError) and explained.exit_code == code, explained
    assert line in str(explained), str(explained)


def test_what_is_not_an_error_of_ours_or_temporals_is_left_as_it_is() -> None:
    bug = ValueError("a defect")
    assert _explained(bug) is bug
    own = UserError("already one line", EXIT_USAGE)
    assert _explained(own) is own


@pytest.fixture
async def worker(dev_env, task_queue: str) -> AsyncIterator[None]:
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        yield


async def test_a_delivery_to_an_ended_activation_says_to_activate_it_again(worker, dev_env, task_queue: str,
                                                                          tmp_path: pathlib.Path) -> None:
    name = unique("ended")
    pair = Pair(name, tmp_path / f"{name}.yaml", tmp_path / "deployment.yaml")
    pair.workfile.write_text(MAIL_WORKFILE.format(name=name))
    pair.write_deployment(dev_env.client.service_client.config.target_host, task_queue)
    never = await wfi("deliver", *pair.target, "--payload", mail("m0"))
    never.assert_one_line_error(1, f"no activation of workflow {name!r} is running; start one with `wfi activate")
    assert (await wfi("activate", str(pair.workfile), "--deployment", str(pair.deployment))).code == 0
    await dev_env.client.get_workflow_handle(workflow_id_for(name)).terminate(reason="test: the activation ended")
    ended = await wfi("deliver", *pair.target, "--payload", mail("m1"))
    ended.assert_one_line_error(1, f"the activation of workflow {name!r} has ended; activate it again with `wfi activate")
    assert (await wfi("activate", str(pair.workfile), "--deployment", str(pair.deployment))).code == 0
    again = await wfi("deliver", *pair.target, "--payload", mail("m2"), "--json")
    assert (again.code, again.json()["disposition"]) == (0, "accepted"), again.stderr
