"""What a case checks with: :func:`check` and :func:`eventually` fail it with :class:`CaseFailed`;
:func:`one_line` is how the kit reports any other exception (docs/conformance.md)."""

from __future__ import annotations

import asyncio
import os
import pathlib
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import TypeVar

from wf_initiation.errors import WfiError

T = TypeVar("T")


class CaseFailed(WfiError, AssertionError):
    """A conformance check did not hold; the message says what was expected and what was seen."""


def check(condition: object, message: str) -> None:
    """Fail the running case with ``message`` unless ``condition`` is truthy."""
    if not condition:
        raise CaseFailed(message)


async def eventually(probe: Callable[[], Awaitable[T]], done: Callable[[T], bool], what: str, *,
                     timeout: float, describe: Callable[[T], str] = lambda _: "") -> T:
    """Probe until ``done(value)``; CaseFailed naming ``what`` (and the last value) after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if done(value):
            return value
        check(time.monotonic() < deadline, f"within {timeout:g}s: expected {what}; last: {describe(value)}")
        await asyncio.sleep(0.3)  # pacing of a deadline loop over a public observation


def one_line(exc: BaseException) -> str:
    """``Type: message (at file:line)``: an exception as one readable line, no traceback."""
    text = " ".join(str(exc).split()) or "(no message)"
    if len(text) > 500:
        text = text[:497] + "..."
    frames = traceback.extract_tb(exc.__traceback__)
    # Where it surfaced in the kit or its cases says more than the library frame it came from.
    where = next((f for f in reversed(frames) if f"{os.sep}conformance{os.sep}" in f.filename), frames[-1] if frames else None)
    at = f" (at {pathlib.Path(where.filename).name}:{where.lineno})" if where is not None else ""
    return f"{type(exc).__name__}: {text}{at}"
