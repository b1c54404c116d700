"""Where a client sends a delivery of a sharded activation (core.sharding), learned once per workflow.

Shard 0 answers the ``routing`` query with the shard count and each external entry's delivery-id
path; the client computes a delivery's shard itself (``core.sharding.shard_of``) and keeps the
answer until a shard says it is out of date: after a split (a re-activation into more shards) a
shard refuses a delivery that is no longer its (``Misrouted``) and the client asks again. When shard 0 cannot answer (a
failed or stale workflow task, a worker of a build before sharding), a delivery goes to shard 0,
which takes it or passes it on; reads and deactivation, which must reach every shard, raise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from wf_initiation._joined import Joined
from wf_initiation.core.routing import delivery_key, home_of
from wf_initiation.errors import ActivationNotFound, QueryFailed, WfiError


@dataclasses.dataclass(frozen=True)
class Routing:
    """How one activation's deliveries are spread."""

    shards: int = 1
    entries: dict[str, str | None] = dataclasses.field(default_factory=dict)  # external entry -> delivery id path
    split_from: int | None = None  # the shard count of the last split, while shard 0 takes part in it

    def shard(self, entry: str | None, payload: Any) -> int:
        """The shard that takes this delivery (0 when there is one, or when the entry is not known:
        shard 0 then answers what is wrong with it)."""
        return home_of(self.entries, entry, payload, self.shards)

    def key(self, entry: str | None, payload: Any) -> tuple[str, str] | None:
        """(entry, delivery id) of a delivery, or None when it has none (it is then invalid anywhere)."""
        return delivery_key(self.entries, entry, payload)

    @classmethod
    def from_answer(cls, answer: dict[str, Any]) -> Routing:
        split = answer.get("split") or {}
        return cls(shards=int(answer.get("shards", 1)), entries=dict(answer.get("entries", {})),
                   split_from=int(split["from_shards"]) if "from_shards" in split else None)


UNSHARDED = Routing()


class RoutingCache:
    """Routing per workflow, asked for at most once per client.

    ``sharded`` says, from the server alone (a describe of shard 1's workflow id), whether the
    activation has more than one shard; only then is shard 0 queried (``ask``). A query is answered
    by the activation's worker, and a delivery to a one-shard activation, most of them, should not
    wait on it (or add a query task to a workflow taking a burst of deliveries)."""

    def __init__(self, ask: Callable[[str], Awaitable[dict[str, Any]]],
                 sharded: Callable[[str], Awaitable[bool]] | None = None) -> None:
        self._ask = ask
        self._sharded = sharded
        self._known: dict[str, Routing] = {}
        self._asking: Joined[Routing] = Joined()

    async def get(self, workflow: str, *, fallback: bool = False) -> Routing:
        """The routing of ``workflow``. With ``fallback`` (a delivery's route), shard 0 when it cannot
        be asked now; without (deactivation, state: every shard must be reached), the error.
        Callers asking at once share one answer (``_joined``)."""
        known = self._known.get(workflow)
        if known is not None:
            return known
        try:
            return await self._asking(workflow, lambda: self._learn(workflow))
        except (QueryFailed, WfiError) as exc:
            if not fallback or (not isinstance(exc, QueryFailed) and not exc.retryable):
                raise  # the codec, the credentials: every call about this workflow fails alike
            # Shard 0 cannot answer now (a failed or stale workflow task, a busy server), or is of a
            # build without the query: this delivery goes to shard 0, which takes it or passes it on
            # (a misrouted update is refused, then routed again); the routing is asked again next time.
            return UNSHARDED

    async def _learn(self, workflow: str) -> Routing:
        """Ask the server (kept unless the activation is not there yet: it may start)."""
        try:
            if self._sharded is not None and not await self._sharded(workflow):
                self._known[workflow] = UNSHARDED  # a misrouted update later makes the client forget it
                return UNSHARDED
            routing = Routing.from_answer(await self._ask(workflow))
        except ActivationNotFound:
            return UNSHARDED  # no activation yet: shard 0 answers that (not kept: it may start)
        self._known[workflow] = routing
        return routing

    def forget(self, workflow: str) -> None:
        self._known.pop(workflow, None)


# ---------------------------------------------------------------------------- the whole activation
SUMMED = ("counters", "error_counts", "redrive")
SUMMED_NUMBERS = ("dedup_entries", "dedup_retired", "runs_pending", "runs_starting", "runs_running")


def _summed(parts: list[dict[str, Any]], field: str) -> dict[str, int]:
    """One mapping of counts from every shard's ``field``, summed key by key."""
    total: dict[str, int] = {}
    for part in parts:
        for key, n in part.get(field, {}).items():
            total[key] = total.get(key, 0) + n
    return total


def combined_summary(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary of a sharded activation: shard 0's (schedules, polls, status, ...), with counters
    and counts summed over every shard, the fullest shard's capacity, and each shard's own under
    ``shards`` (what ``wfi state --summary`` shows)."""
    whole = dict(parts[0])
    for field in SUMMED:
        whole[field] = _summed(parts, field)
    for field in SUMMED_NUMBERS:
        whole[field] = sum(part.get(field, 0) for part in parts)
    capacities = [part["capacity"] for part in parts if "capacity" in part]
    if capacities:
        whole["capacity"] = max(capacities, key=lambda c: c.get("fill", 0))
    whole["shards"] = [{"shard": part.get("shard", k), "status": part.get("status"), "counters": part.get("counters", {}),
                        "dedup_entries": part.get("dedup_entries", 0), "capacity": part.get("capacity", {}).get("fill"),
                        **({"split": part["split"]} if part.get("split") else {}),
                        **({"lanes": part["lanes"]} if part.get("lanes") else {})}
                       for k, part in enumerate(parts)]
    whole.pop("shard", None)
    return whole


MERGED_BY_KEY = ("runs", "queues", "unacked")
JOINED_IN_TIME = (("errors", "at"), ("recent_runs", "accepted_at"), ("waiting", "at"))
SUMMED_STATE_NUMBERS = ("events_total", "runs_total", "queues_total")


def combined_state(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The full state of a sharded activation (``wfi state``): shard 0's (spec, schedules, polls,
    operator log, ...), with what every shard holds of its own deliveries joined: errors, runs and
    waiting deliveries (each item naming its ``shard``), counters summed. ``summary`` is set by the
    caller (:func:`combined_summary`)."""
    whole = dict(parts[0])
    for field in SUMMED:
        whole[field] = _summed(parts, field)
    for field in SUMMED_STATE_NUMBERS:
        whole[field] = sum(part.get(field, 0) for part in parts)
    for field in MERGED_BY_KEY:
        merged: dict[str, Any] = {}
        for part in parts:
            merged.update(part.get(field) or {})
        whole[field] = merged
    for field, when in JOINED_IN_TIME:
        joined = [{**item, "shard": k} if isinstance(item, dict) else item
                  for k, part in enumerate(parts) for item in part.get(field) or []]
        whole[field] = sorted(joined, key=lambda item: str(item.get(when, "")) if isinstance(item, dict) else "")
    return whole


def combined_deactivation(results: list[Any]) -> Any:
    """One answer for a deactivation of every shard: settled only when every shard is."""
    first = results[0]
    remaining: dict[str, int] = {}
    for result in results:
        for key, n in result.remaining.items():
            remaining[key] = remaining.get(key, 0) + n
    statuses = [r.status for r in results]
    status = next((s for s in ("refused", "deactivating", "active") if s in statuses), "deactivated")
    return first.model_copy(update={"ok": all(r.ok for r in results), "status": status, "remaining": remaining,
                                    "message": "; ".join(dict.fromkeys(r.message for r in results))})
