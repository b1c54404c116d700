"""WfiClient lets none of Temporal's own errors out (split from tests/core/test_errors.py: the test
calls a real server)."""

from __future__ import annotations

import uuid

import pytest
from temporalio.service import RPCError, RPCStatusCode

from wf_initiation.client import WfiClient
from wf_initiation.errors import ActivationNotFound


async def test_the_client_raises_the_tree_with_temporals_error_as_the_cause(dev_env) -> None:
    # Nothing runs for this workflow: every call meets NOT_FOUND from a real server.
    wfi = WfiClient(dev_env.client, task_queue="nowhere", max_attempts=2)
    name = f"nobody-{uuid.uuid4().hex[:8]}"
    for call in (lambda: wfi.deliver(name, {"n": 1}), lambda: wfi.summary(name), lambda: wfi.signal_delivery(name, {"n": 1})):
        with pytest.raises(ActivationNotFound) as missing:
            await call()
        assert missing.value.workflow == name and name in str(missing.value)
        assert isinstance(missing.value.__cause__, RPCError) and missing.value.__cause__.status == RPCStatusCode.NOT_FOUND
    assert await wfi.deactivated_state(name) is None  # reads that expect nothing running still answer
