"""Duration strings such as ``5s``, ``1m30s``, ``250ms``, ``2h``, ``7d``."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from wf_initiation.errors import DurationError

from ._bounds import MAX_DURATION_TEXT

_PART = re.compile(r"(\d{1,12})(ms|s|m|h|d)")
_WHOLE = re.compile(r"^(?:\d{1,12}(?:ms|s|m|h|d))+$")
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str | int | float) -> timedelta:
    """Parse ``text``; plain numbers are seconds. Raise :class:`DurationError` naming the fix."""
    if isinstance(text, bool):
        raise DurationError(f"{text!r} is not a duration: write e.g. 30s, 5m, 1h30m")
    if isinstance(text, (int, float)):
        if not math.isfinite(text) or text < 0:
            raise DurationError(f"{text!r} is not a duration: durations are finite and non-negative")
        return _bounded(text, repr(text))
    if not isinstance(text, str) or len(text) > 100 or not _WHOLE.match(text.strip()):
        shown = repr(text) if not isinstance(text, str) or len(text) <= 40 else repr(text[:37] + "...")
        raise DurationError(f"{shown} is not a duration: write e.g. 30s, 5m, 1h30m, 250ms, 7d")
    seconds = sum(int(n) * _UNIT[u] for n, u in _PART.findall(text.strip()))
    return _bounded(seconds, repr(text))


def _bounded(seconds: float, shown: str) -> timedelta:
    if seconds > MAX_DURATION_TEXT.total_seconds():
        raise DurationError(f"{shown} is longer than {MAX_DURATION_TEXT.days}d: no setting takes a duration that long")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    ms = round(value.total_seconds() * 1000)
    if ms % 1000:
        return f"{ms}ms"
    s = ms // 1000
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            out += f"{s // size}{unit}"
            s %= size
    return out or "0s"
