"""Rules of `batch:` (TRIG-15, TRIG-17)."""

from __future__ import annotations

from typing import Any

from .._bounds import MAX_BATCH_SIZE, MAX_DURATION
from .._durations import DurationError, parse_duration
from .._model import BatchSpec
from .._yaml import Loc, is_mapping, to_plain
from ._context import BATCH_KEYS, Ctx, Draft, show
from ._expressions import check_expression


def batch(node: Any, loc: Loc, draft: Draft, ctx: Ctx) -> BatchSpec | None:
    if "batch" not in node:
        return None
    value, batch_loc = node["batch"], loc.key(node, "batch")
    if "queue_by" in node:
        # TRIG-17
        ctx.add(
            "TRIG-BATCH-QUEUE-BY",
            "an entry must not declare both `batch` and `queue_by`: remove one",
            batch_loc,
            draft.label,
        )
    if not is_mapping(value):
        ctx.add(
            "TRIG-BATCH-TYPE",
            "`batch:` must be a mapping with `size`, `max_wait` and/or `partition_by`",
            batch_loc,
            draft.label,
        )
        return None
    ok = True
    for key in value:
        if key not in BATCH_KEYS:
            ok = False
            ctx.add(
                "TRIG-BATCH-UNKNOWN-KEY",
                f"unknown `batch` key {show(key)}: use {', '.join(BATCH_KEYS)}",
                batch_loc.key(value, key),
                draft.label,
            )
    size = _batch_size(value, batch_loc, draft, ctx)
    wait = _batch_wait(value, batch_loc, draft, ctx)
    partition = (
        check_expression(value["partition_by"], "partition_by", batch_loc.key(value, "partition_by"), draft, ctx)
        if "partition_by" in value
        else None
    )
    if "size" not in value and "max_wait" not in value:
        ok = False
        ctx.add(
            "TRIG-BATCH-EMPTY",
            "`batch:` needs `size`, `max_wait` or both to say when a batch closes",
            batch_loc,
            draft.label,
        )
    if (
        not ok
        or ("size" in value and size is None)
        or ("max_wait" in value and wait is None)
        or ("partition_by" in value and partition is None)
    ):
        return None
    return BatchSpec(size=size, max_wait_seconds=wait, partition_by=partition)


def _batch_size(value: Any, loc: Loc, draft: Draft, ctx: Ctx) -> int | None:
    if "size" not in value:
        return None
    size = value["size"]
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_BATCH_SIZE:
        ctx.add(
            "TRIG-BATCH-SIZE",
            f"`batch.size: {show(size)}` must be a whole number from 1 to {MAX_BATCH_SIZE:,}",
            loc.key(value, "size"),
            draft.label,
        )
        return None
    return int(size)


def _batch_wait(value: Any, loc: Loc, draft: Draft, ctx: Ctx) -> float | None:
    if "max_wait" not in value:
        return None
    try:
        seconds = parse_duration(to_plain(value["max_wait"])).total_seconds()
    except (DurationError, TypeError) as exc:
        ctx.add("TRIG-BATCH-MAX-WAIT", f"`batch.max_wait`: {exc}", loc.key(value, "max_wait"), draft.label)
        return None
    except OverflowError:
        ctx.add(
            "TRIG-BATCH-MAX-WAIT",
            "`batch.max_wait` is too long: write a duration of days at most",
            loc.key(value, "max_wait"),
            draft.label,
        )
        return None
    if seconds > MAX_DURATION.total_seconds():
        ctx.add(
            "TRIG-BATCH-MAX-WAIT",
            f"`batch.max_wait` is longer than {MAX_DURATION.days}d: write a shorter wait",
            loc.key(value, "max_wait"),
            draft.label,
        )
        return None
    if seconds <= 0:
        ctx.add(
            "TRIG-BATCH-MAX-WAIT",
            "`batch.max_wait` must be longer than zero, e.g. 5s",
            loc.key(value, "max_wait"),
            draft.label,
        )
        return None
    return seconds
