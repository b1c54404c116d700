"""Duration strings such as ``5s``, ``1m30s``, ``250ms``, ``2h``, ``7d``."""

from __future__ import annotations

import re
from datetime import timedelta

_PART = re.compile(r"(\d+)(ms|s|m|h|d)")
_WHOLE = re.compile(r"^(?:\d+(?:ms|s|m|h|d))+$")
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


class DurationError(ValueError):
    pass


def parse_duration(text: str | int | float) -> timedelta:
    """Parse ``text``; plain numbers are seconds. Raise :class:`DurationError` naming the fix."""
    if isinstance(text, bool):
        raise DurationError(f"{text!r} is not a duration: write e.g. 30s, 5m, 1h30m")
    if isinstance(text, (int, float)):
        if text < 0:
            raise DurationError(f"{text!r} is negative: durations are non-negative")
        return timedelta(seconds=text)
    if not isinstance(text, str) or not _WHOLE.match(text.strip()):
        raise DurationError(f"{text!r} is not a duration: write e.g. 30s, 5m, 1h30m, 250ms, 7d")
    seconds = sum(int(n) * _UNIT[u] for n, u in _PART.findall(text.strip()))
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
