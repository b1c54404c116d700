"""An activation that grows itself (``scale.grow_at``): shard 0 decides when to double its shards.

Every ``GROW_CHECK_EVERY`` shard 0 asks every shard how full it is (``MeasureShards``: the shell asks
each shard's own summary, never a shard's word by signal). When the fullest has passed ``grow_at``
of its capacity it decides a growth: ``GrowShards`` to twice its shards, recorded in the operator log
with its reason. The shell performs it with the very split ``wfi activate`` performs
(``_activating.split``), which ends by activating shard 0 with the grown binding: the rebind that
switches shard 0 ends the growth here (:func:`rebound`).

A growth waits, said in the summary and recorded once as ``growth_waits``, while a split goes on
(a shard still takes part in one, shard 0 included: never two at once), while a shard is not running
(``wfi activate`` starts it again), and for good at ``max_shards``. One growth at a time; carried
across continue-as-new, a growth a run left unfinished is issued again (the split is idempotent).
"""

from __future__ import annotations

from datetime import datetime

from ..limits import GROW_CHECK_EVERY
from . import _split, operator
from ._pipeline import Pipeline
from ._types import GrowShards, GrowthState, MeasureShards, ShardFill


def configured(ledger: Pipeline) -> bool:
    """Whether this shard decides growths: shard 0 of an activation with ``scale.grow_at``, installed."""
    spec = ledger.spec
    return spec.shard == 0 and spec.grow is not None and ledger.state.deactivation is None


def tick(ledger: Pipeline, now: datetime) -> None:
    """Measure every shard when the check is due (none while a measure or a growth is out)."""
    if not configured(ledger):
        return
    growth = ledger.state.growth
    if growth is None:
        growth = ledger.state.growth = GrowthState(next_check=now + GROW_CHECK_EVERY)
    if growth.growing is not None or growth.measuring or growth.next_check is None or now < growth.next_check:
        return
    growth.measuring = True
    growth.next_check = now + GROW_CHECK_EVERY
    ledger.outbox.append(MeasureShards(shards=ledger.spec.shards))


def next_wakeup(ledger: Pipeline) -> datetime | None:
    growth = ledger.state.growth
    if not configured(ledger) or growth is None or growth.measuring or growth.growing is not None:
        return None
    return growth.next_check


def measured(ledger: Pipeline, fills: list[ShardFill], now: datetime) -> None:
    """Every shard's fill, as the shards answered: grow now, or say why not."""
    growth = ledger.state.growth
    if growth is None or not configured(ledger):
        return
    growth.measuring = False
    growth.fills, growth.measured_at = sorted(fills, key=lambda f: f.shard), now
    waits = _decide(ledger, now)
    if waits is not None and waits != growth.waits:
        ledger.record_error(now, "growth_waits", waits)
    growth.waits = waits


def measure_failed(ledger: Pipeline, error: str, now: datetime) -> None:
    """The shards could not be asked: asked again at the next check."""
    growth = ledger.state.growth
    if growth is not None:
        growth.measuring = False
        ledger.record_error(now, "growth_waits", f"the activation's shards could not be asked how full they are: {error}")


def _decide(ledger: Pipeline, now: datetime) -> str | None:
    """Start a growth when the fullest shard is past ``grow_at``; else why it waits (None: not past it)."""
    spec, growth = ledger.spec, ledger.state.growth
    assert spec.grow is not None and growth is not None
    known = [f for f in growth.fills if f.running and f.fill is not None]
    fullest = max(known, key=lambda f: f.fill or 0.0, default=None)
    if fullest is None or (fullest.fill or 0.0) < spec.grow.grow_at:
        return None
    n = spec.shards
    reason = f"shard {fullest.shard} is {fullest.fill:.0%} full, past grow_at {spec.grow.grow_at:.0%}"
    stopped = [f.shard for f in growth.fills if not f.running]
    own = _split.current(ledger)
    splitting = [f.shard for f in growth.fills if f.splitting] or ([0] if own is not None and not own.drained else [])
    if 2 * n > spec.grow.max_shards:
        return f"{reason}, but the activation has max_shards ({spec.grow.max_shards}) shards: it grows no further"
    if stopped or len(growth.fills) < n:
        missing = stopped or [k for k in range(n) if k not in {f.shard for f in growth.fills}]
        return (f"{reason}, but shard(s) {', '.join(map(str, missing))} are not running: `wfi activate` starts them "
                "again, then it grows")
    if splitting:
        return (f"{reason}; it grows once the split going on has drained (shard(s) {', '.join(map(str, splitting))} "
                "still take part in it: `wfi state --summary` shows each shard's)")
    growth.growing, growth.since, growth.reason = 2 * n, now, reason
    operator.record(ledger, "grow", f"from {n} to {2 * n} shards: {reason} (scale.grow_at; the split `wfi activate` "
                    "performs)", f"auto-grow-{n}-to-{2 * n}", now)
    ledger.outbox.append(GrowShards(to=2 * n, reason=reason))
    return None


def refused(ledger: Pipeline, to: int, why: str, now: datetime) -> None:
    """The split of a growth could not be made now (another split began, a shard stopped): measured
    again at the next check."""
    growth = ledger.state.growth
    if growth is None or growth.growing != to:
        return
    growth.growing = growth.since = None
    growth.waits = f"the growth to {to} shards was refused: {why}"
    growth.next_check = now + GROW_CHECK_EVERY
    ledger.record_error(now, "growth_refused", growth.waits)


def rebound(ledger: Pipeline) -> None:
    """The binding changed: a growth whose shard count shard 0 now runs with has ended."""
    growth = ledger.state.growth
    if growth is not None and growth.growing is not None and ledger.spec.shards >= growth.growing:
        growth.growing = growth.since = None
        growth.grown += 1
        growth.fills = []


def resume(ledger: Pipeline) -> None:
    """A run begins: a measure of the previous run never reports here; a growth it left unfinished
    is issued again (the split completes what was done of it)."""
    growth = ledger.state.growth
    if growth is None:
        return
    growth.measuring = False
    rebound(ledger)
    if growth.growing is not None and configured(ledger):
        ledger.outbox.append(GrowShards(to=growth.growing, reason=growth.reason or "a growth left unfinished"))


def summary(ledger: Pipeline) -> dict[str, object] | None:
    """What the operator sees of growth (``wfi state --summary``, the operator page): each shard's fill
    as last measured and the next automatic step, in words."""
    spec, growth = ledger.spec, ledger.state.growth
    if spec.shard != 0 or spec.grow is None:
        return None
    fills = growth.fills if growth is not None else []
    return {"grow_at": spec.grow.grow_at, "max_shards": spec.grow.max_shards,
            "fills": {str(f.shard): f.fill for f in fills},
            "measured_at": _at(growth.measured_at) if growth is not None and growth.measured_at else None,
            "growing": growth.growing if growth else None, "grown": growth.grown if growth else 0,
            "next": next_step(ledger)}


def next_step(ledger: Pipeline) -> str:
    """The next automatic step, in words."""
    spec, growth = ledger.spec, ledger.state.growth
    assert spec.grow is not None
    n, grow = spec.shards, spec.grow
    if growth is not None and growth.growing is not None:
        return f"growing to {growth.growing} shards since {_at(growth.since)} ({growth.reason})"
    if growth is not None and growth.waits is not None:
        return growth.waits
    if 2 * n > grow.max_shards:
        return f"at max_shards ({grow.max_shards}): grows no further"
    known = [f for f in growth.fills if f.fill is not None] if growth is not None else []
    fullest = max(known, key=lambda f: f.fill or 0.0, default=None)
    now = f"now {fullest.fill:.0%} on shard {fullest.shard}" if fullest is not None else "not measured yet"
    check = f"; next check {_at(growth.next_check)}" if growth is not None and growth.next_check else ""
    return f"grows to {2 * n} shards when the fullest shard passes {grow.grow_at:.0%} of its capacity ({now}){check}"


def _at(when: datetime | None) -> str:
    return when.isoformat(timespec="seconds") if when is not None else "?"

