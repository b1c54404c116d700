"""Giving memory a worker has freed back to the system, every ten seconds (glibc's ``malloc_trim``).

Loading an activation decodes its carried state: about 10 MB of short-lived objects for a full shard,
freed at once. glibc keeps freed memory inside the process for reuse, so without a trim a worker's
resident memory stays near the peak of every load (bench/bench_memory.py: 253 bytes per retained id
where the engine holds 62). ``malloc_trim(0)`` hands the free pages back: it takes under a millisecond
at a full shard's heap and ~30-60 ms at a 500 MB heap of many small free chunks, runs on its own
thread (ctypes releases the GIL; it holds each allocator arena in turn) and frees nothing in use.
Where the C library has no ``malloc_trim`` (musl, macOS, Windows) nothing is done.

The first holder also fixes glibc's mmap threshold at its initial 128 KiB (``mallopt``), so that every
block that large is its own mapping, handed back when freed. By default glibc raises the threshold to
the size of each such block freed (up to 32 MiB): after the first load of a full shard, the next
loads' megabyte-sized copies (the state's payload as it passes through the SDK, its decoded columns)
came from the heap, where what outlives them (a record, a cached object) keeps their pages resident.
bench/bench_memory.py, the same traffic: a fresh worker holding a 75,000-id shard 48 -> 31 bytes
per id, the worker that filled it 319 -> 242 after its continue-as-new and 597 -> 357 at its peak.

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


M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter number (malloc.h)."""
MMAP_THRESHOLD = 128 * 1024
"""glibc's initial threshold, kept fixed: blocks this large or larger are mapped on their own."""


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library (looked up once per process: ``find_library`` runs ``ldconfig``), or None."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


@functools.cache
def _fix_mmap_threshold() -> bool:
    """Fix glibc's mmap threshold (once per process); False where the C library is not glibc."""
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is None or _malloc_trim() is None:  # the parameter numbers are glibc's
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is None:
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
        """Count one more holder; start the thread (trimming every ``every``) if none runs, and fix the
        mmap threshold. False when this C library cannot trim (nothing started)."""
        trim = _malloc_trim()
        if trim is None:
            return False
        _fix_mmap_threshold()
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
