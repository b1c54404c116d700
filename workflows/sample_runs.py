"""`wfi.EchoRun`: a small run workflow for trying wf-initiation out and for the test suite.

It returns what it received. Control keys in the firing payload (or in its ``body``) let a test
shape the run: ``hold: true`` waits for the ``release`` signal (a suspended run), ``fail: true``
fails it, ``sleep_seconds: N`` sleeps first.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from wf_initiation.core.runinput import RunInput
    from wf_initiation.wire import ECHO_RUN_FAILED, ECHO_RUN_RECEIVED_QUERY, ECHO_RUN_RELEASE_SIGNAL, ECHO_RUN_WORKFLOW


def _controls(value: Any) -> dict[str, Any]:
    if isinstance(value, list):
        value = value[0] if value else {}
    if not isinstance(value, dict):
        return {}
    body = value.get("body")
    return {**value, **body} if isinstance(body, dict) else value


@workflow.defn(name=ECHO_RUN_WORKFLOW)
class EchoRun:
    def __init__(self) -> None:
        self._released = False
        self._input: RunInput | None = None

    @workflow.run
    async def run(self, input: RunInput) -> dict[str, Any]:
        self._input = input
        controls = _controls(input.payload)
        if controls.get("sleep_seconds"):
            await workflow.sleep(timedelta(seconds=float(controls["sleep_seconds"])))
        if controls.get("hold"):
            await workflow.wait_condition(lambda: self._released)
        if controls.get("fail"):
            raise ApplicationError("asked to fail by the payload", type=ECHO_RUN_FAILED, non_retryable=True)
        return {"run_key": input.initiation.run_key, "trigger": input.trigger.name, "started_at": workflow.now().isoformat(),
                "input": input.model_dump(mode="json")}

    @workflow.signal(name=ECHO_RUN_RELEASE_SIGNAL)
    def release(self) -> None:
        self._released = True

    @workflow.query(name=ECHO_RUN_RECEIVED_QUERY)
    def received(self) -> dict[str, Any] | None:
        return self._input.model_dump(mode="json") if self._input else None
