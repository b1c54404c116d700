"""Giving memory a worker has freed back to the system, every ten seconds (glibc's ``malloc_trim``).

Loading an activation decodes its carried state: about 10 MB of short-lived objects for a full shard,
freed at once. glibc keeps freed memory inside the process for reuse, so without a trim a worker's
resident memory stays near the peak of every load (bench/bench_memory.py: 253 bytes per retained id
where the engine holds 62). ``malloc_trim(0)`` hands the free pages back: it takes under a millisecond
at a full shard's heap and ~30-60 ms at a 500 MB heap of many small free chunks, runs on its own
thread (ctypes releases the GIL; it holds each allocator arena in turn) and frees nothing in use.
Where the C library has no ``malloc_trim`` (musl, macOS, Windows) nothing is done.

One thread per process, however many workers or plugins hold it; it stops when the last lets go.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import threading
from collections.abc import Callable
from datetime import timedelta

TRIM_EVERY = timedelta(seconds=10)
"""How often a worker gives freed memory back (``WfiPlugin(trim_memory_every=...)``)."""


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (looked up once per process:
    ``find_library`` runs ``ldconfig``)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


class _Trimmer:
    """The process's one trimming thread, started by the first holder and stopped by the last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._stop: threading.Event | None = None

    def hold(self, every: timedelta) -> bool:
        """Count one more holder; start the thread (trimming every ``every``) if none runs. False
        when this C library cannot trim (nothing started)."""
        trim = _malloc_trim()
        if trim is None:
            return False
        with self._lock:
            self._holders += 1
            if self._stop is None:
                self._stop = stop = threading.Event()
                seconds = every.total_seconds()
                threading.Thread(target=_trim_until, args=(trim, stop, seconds), name="wfi-malloc-trim", daemon=True).start()
        return True

    def release(self) -> None:
        """One holder fewer; the last stops the thread."""
        with self._lock:
            self._holders -= 1
            if self._holders == 0 and self._stop is not None:
                self._stop.set()
                self._stop = None


def _trim_until(trim: Callable[[int], int], stop: threading.Event, seconds: float) -> None:
    while not stop.wait(seconds):
        trim(0)


TRIMMER = _Trimmer()
