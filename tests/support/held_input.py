"""A workflow begun with a large input that it does not keep (tests/integration/test_start_input.py),
in the SDK's sandbox and outside it (as the activation workflow runs)."""

from __future__ import annotations

from temporalio import workflow


@workflow.defn(name="wfi.Activation")  # the name the carried-state interceptor acts on
class BegunWithInput:
    @workflow.init
    def __init__(self, name: str, state: bytes | None) -> None:
        self.size = len(state or b"")
        self.taken = 0

    @workflow.run
    async def run(self, name: str, state: bytes | None) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal
    def take(self) -> None:
        self.taken += 1

    @workflow.query
    def taken_count(self) -> int:
        return self.taken


@workflow.defn(name="wfi.Activation", sandboxed=False)
class BegunOutsideSandbox(BegunWithInput):
    @workflow.run
    async def run(self, name: str, state: bytes | None) -> None:
        await super().run(name, state)
