"""The worker's memory trimming (wf_initiation._memory): one thread per process, started by the first
holder and stopped by the last, calling ``malloc_trim`` every interval; the plugin's bound checked;
glibc's mmap threshold fixed, so a large block freed goes back at once however large the last one was.

What trimming saves is measured, not tested: bench/bench_memory.py's worker rows.
"""

from __future__ import annotations

import ctypes.util
import subprocess
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


_SECOND_BLOCK = """
import pathlib, sys
from wf_initiation import _memory

def rss() -> int:
    line = next(l for l in pathlib.Path("/proc/self/status").read_text().splitlines() if l.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024

if sys.argv[1] == "fixed":
    assert _memory._fix_mmap_threshold()
block = b"x" * (8 << 20)  # mapped on its own (over the threshold); freed, it raises a dynamic threshold to 8 MiB
del block
before = rss()
block = b"y" * (6 << 20)  # the dynamic threshold puts this one in the heap, where it stays once freed
del block
print(rss() - before)
"""


def _held_after_second_block(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", _SECOND_BLOCK, mode], capture_output=True, text=True, check=True, timeout=60)
    return int(done.stdout)


def test_a_large_block_freed_goes_back_at_once_after_a_larger_one() -> None:
    if not sys.platform.startswith("linux") or _memory._malloc_trim() is None:
        pytest.skip("the mmap threshold is glibc's: this test needs a glibc Linux")
    if _held_after_second_block("dynamic") < 4 << 20:
        pytest.skip("this C library does not keep a freed block after a larger one (glibc's dynamic mmap threshold)")
    assert _held_after_second_block("fixed") < 1 << 20


@pytest.mark.parametrize("every", [timedelta(0), timedelta(seconds=-1)])
def test_a_trim_interval_that_is_not_positive_is_refused_by_name(every: timedelta) -> None:
    with pytest.raises(WfiSetupError, match="trim_memory_every.*positive interval, or None"):
        WfiPlugin(trim_memory_every=every)
