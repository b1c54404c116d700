"""The worker's memory trimming (wf_initiation._memory): one thread per process, started by the first
holder and stopped by the last, calling ``malloc_trim`` every interval; the plugin's bound checked.

What trimming saves is measured, not tested: bench/bench_memory.py's worker rows.
"""

from __future__ import annotations

import ctypes.util
import sys
import threading
import time
from datetime import timedelta

import pytest

from wf_initiation import _memory
from wf_initiation.errors import WfiSetupError
from wf_initiation.plugin import WfiPlugin


def _trimming_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "wfi-malloc-trim"]


def _wait(condition: object, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def test_one_thread_trims_for_every_holder_and_stops_with_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def counted(pad: int) -> int:
        calls.append(pad)
        return 1

    monkeypatch.setattr(_memory, "_malloc_trim", lambda: counted)
    trimmer = _memory._Trimmer()
    assert trimmer.hold(timedelta(milliseconds=10)) and trimmer.hold(timedelta(milliseconds=10))
    assert len(_trimming_threads()) == 1, "two holders share one thread"
    assert _wait(lambda: len(calls) >= 3), "it trims every interval"
    assert set(calls) == {0}, "malloc_trim(0): no padding kept at the top of the heap"
    trimmer.release()
    assert len(_trimming_threads()) == 1, "a holder remains"
    trimmer.release()
    assert _wait(lambda: not _trimming_threads()), "the last holder stops the thread"
    stopped_at = len(calls)
    time.sleep(0.05)
    assert len(calls) == stopped_at
    assert trimmer.hold(timedelta(milliseconds=10)), "a later holder starts it again"
    assert _wait(lambda: len(calls) > stopped_at)
    trimmer.release()
    assert _wait(lambda: not _trimming_threads())


def test_where_the_c_library_cannot_trim_nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_memory, "_malloc_trim", lambda: None)
    assert _memory._Trimmer().hold(timedelta(seconds=1)) is False
    assert not _trimming_threads()


def test_glibc_s_malloc_trim_is_found_on_linux() -> None:
    if not sys.platform.startswith("linux") or "musl" in (ctypes.util.find_library("c") or ""):
        pytest.skip("malloc_trim is glibc's: this test needs a glibc Linux")
    trim = _memory._malloc_trim()
    assert trim is not None
    assert trim(0) in (0, 1)


@pytest.mark.parametrize("every", [timedelta(0), timedelta(seconds=-1)])
def test_a_trim_interval_that_is_not_positive_is_refused_by_name(every: timedelta) -> None:
    with pytest.raises(WfiSetupError, match="trim_memory_every.*positive interval, or None"):
        WfiPlugin(trim_memory_every=every)
