"""Overlap and concurrency: pure functions of the runs in flight, returning what to do as data.

Like Temporal's scheduler (``processBuffer`` returns the starts, the new buffer and whether to
cancel or terminate the running workflow), nothing here changes state: the runs layer applies the
answer (starts the run, or appends it to the waiting list, and controls the runs named).

Policies (``policies.overlap``, EXT-13, SCHED-14): ``allow`` starts every run; ``skip`` disposes of
a new event while any run is pending, starting or running; ``buffer_one`` keeps one run waiting
and skips the rest; ``buffer_all`` keeps every run waiting, in order; ``cancel_other`` and
``terminate_other`` ask the runs in flight to stop and start the new run once they have ended.
``max_concurrent_runs`` caps the runs in flight under every policy; a capped run waits and
controls nothing. The waiting list is FIFO: a run behind others never overtakes them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Literal

from ._types import RunRecord

CONTROLLING = {"cancel_other": "cancel", "terminate_other": "terminate"}


@dataclass(frozen=True, slots=True)
class Admission:
    """What the overlap rules decide for one run: start it now, or let it wait (and why), and which
    runs in flight to cancel or terminate for it."""

    start: bool
    enqueue: bool = False  # append the run to the waiting list (it is not in it yet)
    dequeue: bool = False  # remove the run from the waiting list (it starts)
    reason: str | None = None  # why the run waits
    control: Literal["cancel", "terminate"] | None = None
    targets: tuple[str, ...] = ()  # run keys to control, in the order they went in flight


START = Admission(start=True)


def skips_on_arrival(policy: str, runs: int, waiting: int) -> bool:
    """Whether a new event is disposed ``skipped`` before any run is made for it.

    ``runs``: run records not terminal (pending, starting or running); ``waiting``: runs waiting."""
    if policy == "skip":
        return runs > 0
    if policy == "buffer_one":
        return runs > 0 and waiting > 0
    return False


def admit(policy: str, cap: int | None, run_key: str, in_flight: Iterable[RunRecord],
          waiting: Collection[str], head: str | None) -> Admission:
    """The decision for the pending run ``run_key`` now.

    ``in_flight``: runs starting or running; ``waiting``: keys of runs waiting (FIFO) and ``head``
    its first one (None when empty)."""
    if policy == "allow" and cap is None and head is None:
        return START  # the common case, kept O(1): nothing can block this run
    others = [r for r in in_flight if r.run_key != run_key]
    blocked_by_overlap = policy != "allow" and bool(others)
    capped = cap is not None and len(others) >= cap
    behind = head is not None and run_key != head
    queued = run_key in waiting if head is not None else False
    if not (blocked_by_overlap or capped or behind):
        return Admission(start=True, dequeue=queued)
    control = CONTROLLING.get(policy) if not capped else None
    targets = tuple(r.run_key for r in others if not r.cancel_requested) if control else ()
    reason = "concurrency limit" if capped else f"overlap policy {policy}"
    return Admission(start=False, enqueue=not queued, reason=reason, control=control,  # type: ignore[arg-type]
                     targets=targets)
