"""Every routing verdict of a sharded activation, from the spec and the request (pure).

The one boundary for sharding (core.sharding says how ids and keys are hashed; this module says
what a shard does with what it is sent). The client, the ingress, the workflow shell and the engine
only act on these verdicts:

- a delivery: :func:`route` (this shard takes it, passes it on or refuses it as misrouted, asks the
  split's parent first, or refuses a routing claim it cannot verify), and :func:`lane_route` for an
  event its id's shard answered ``routed`` to its key's lane;
- a split: :func:`split_refusal` (whether an activation may be split now, said once for the client
  and the shards);
- the split protocol's messages between shards (the parent drained, a lane handover or free):
  :func:`drained_problem` and :func:`notice_problem` judge them against what the sender itself
  answers when asked (a query of the sender, never the word of the message alone): a signal anyone
  with a Temporal client can send is only ever a prompt to ask.

Forwarding follows one rule, whatever the verdict: a delivery goes on to the shard a verdict names
by the one who hears the answer. A signal's sender hears nothing, so the shard passes it on itself
(``workflows/_deliveries.py``, ``_pass_on``: the one place a shard forwards, counted until it has
landed); an update's sender hears the answer (``Misrouted``, ``ConsultParent``, ``routed``), so it
sends the delivery on itself (``wf_initiation/_sharded_client.py``: the one place a client
forwards). A shard never forwards an update, a client never re-sends a signal.

What travels between shards is hostile input like any other (docs/limits.md): a ``lane`` claim on a
delivery is honoured only for the shard its key's lane really is (computed here from the payload
by the engine), so a delivery is taken only by its id's home or by its key's lane.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .sharding import delivery_key, delivery_shard, is_child, parent_of, split_problem

__all__ = ["Route", "Verdict", "busy_in_split", "delivery_key", "drained_problem", "external_paths", "handover_digest", "home_of",
           "lane_route", "notice_problem", "copy_problem", "route", "split_refusal"]

if TYPE_CHECKING:
    from .activation import ActivationSpec, Split


def external_paths(spec: ActivationSpec) -> dict[str, str | None]:
    """Each external entry's delivery-id path: what a delivery's shard is computed from."""
    return {e.name: e.delivery_id_path for e in spec.entries if e.kind == "external"}


def home_of(paths: Mapping[str, str | None], entry: str | None, payload: Any, shards: int) -> int:
    """The shard that judges a delivery's id (its *home*): 0 for one without an id or an unknown entry
    (shard 0 answers what is wrong with it)."""
    return delivery_shard(paths, entry, payload, shards)


class Verdict(enum.Enum):
    """What a shard does with a delivery it was sent."""

    TAKE = "take"
    """This shard takes it (its id's home, or its key's lane with a claim that holds)."""
    ELSEWHERE = "elsewhere"
    """Another shard (``Route.shard``) takes it: a signal is passed on there, an update refused as
    misrouted (its sender routes it again)."""
    ASK_PARENT = "ask_parent"
    """A split's child holds nothing of the id: the parent (``Route.shard``) answers first."""
    FORGED = "forged"
    """It claims a lane this shard is not for its key (no sender of the activation's own makes such
    a claim): refused and recorded, never taken."""


@dataclasses.dataclass(frozen=True)
class Route:
    """A verdict and the shard it names; ``laned``: taken here as its key's lane (``Intake.lane``);
    ``claim``: the lane claim (shard count, lane) the delivery carries on (:func:`lane_route`)."""

    verdict: Verdict
    shard: int
    laned: bool = False
    reason: str = ""
    claim: tuple[int, int] | None = None


def route(spec: ActivationSpec, shard: int, entry: str | None, payload: Any, *,
          claim: tuple[int, int] | None, key_lane: Callable[[], int | None],
          answered: Callable[[], bool], prior_shards: int | None, split: Split | None) -> Route:
    """The verdict for a delivery sent to ``shard`` of an activation routed by ``spec``.

    Args:
        claim: (shard count, shard) of the lane its id's home routed it to (``DeliveryRequest.lane``);
            a claim made with another shard count than ``spec``'s is stale and ignored.
        key_lane: The lane the routing function names for its key (None: the entry relates no
            events, its home runs it), computed from the payload by the engine.
        answered: Whether nothing is left for a split's parent to answer (this shard holds the id's
            dedup entry, or the delivery has no id).
        prior_shards: The shard count of the parent's answer it carries (``DeliveryRequest.prior``).
        split: This shard's part in a split now (``Engine.split``: None once a child's parent drained).
    """
    if spec.shards <= 1:
        return Route(Verdict.TAKE, 0)
    home = home_of(external_paths(spec), entry, payload, spec.shards)
    laned = claim is not None and claim[0] == spec.shards and claim[1] < spec.shards
    taker = claim[1] if laned and claim is not None else home
    if taker != shard:
        return Route(Verdict.ELSEWHERE, taker)
    if laned and shard not in (home, 0) and key_lane() is None:  # shard 0: a subscription copy's match (the engine checks)
        return Route(Verdict.FORGED, home, reason=(
            f"a delivery claiming shard {shard} as its key's lane, but its entry orders no events by key: only its id's "
            f"shard {home} takes it; nothing of it was recorded here"))
    if is_child(shard, split) and prior_shards != spec.shards and not answered():
        assert split is not None
        return Route(Verdict.ASK_PARENT, parent_of(shard, split), laned=laned)
    return Route(Verdict.TAKE, shard, laned=laned)


def lane_route(shard: int, lane: int, shards: int) -> Route:
    """The verdict for an event that ``shard``, its id's home, answered ``routed`` to its key's ``lane``
    (``DeliveryResult.shard``): taken here as its lane when ``lane`` is this shard, else the lane's;
    either way it carries the claim ``(shards, lane)``, which the lane checks (:func:`route`)."""
    claim = (shards, lane)
    if lane == shard:
        return Route(Verdict.TAKE, shard, laned=True, claim=claim)
    return Route(Verdict.ELSEWHERE, lane, claim=claim, reason="pass on to its queue key's shard")


# ---------------------------------------------------------------------------- splits
def split_refusal(current: int, wanted: int, *, from_shards: int | None, busy: Sequence[int]) -> str | None:
    """Why an activation on ``current`` shards cannot be split into ``wanted`` now (None: it can).

    ``from_shards``: the count the split says it starts from (the shards check it; None for the
    client, which makes the split); ``busy``: shards still taking part in the previous split."""
    problem = split_problem(current, wanted)
    if problem is None and from_shards is not None and from_shards != current:
        problem = (f"a split from {current} shards must say so (`split.from_shards`); "
                   "`wfi activate` and WfiClient.activate do")
    if problem is None and busy:
        problem = (f"shard(s) {', '.join(map(str, busy))} still take part in the previous split (a parent drains "
                   "once every id it held then has expired: `wfi state --summary` shows each shard's split); "
                   "split it again after that")
    return problem


def busy_in_split(answers: Sequence[Mapping[str, Any] | None], current: int) -> list[int]:
    """The shards (by their ``routing`` answers, shard k's k-th) that still take part in a split
    while the activation runs on ``current`` shards: what :func:`split_refusal` calls ``busy``. A shard
    already switched to another count belongs to the split being made, not to an earlier one."""
    return [k for k, answer in enumerate(answers) if isinstance(answer, Mapping) and isinstance(answer.get("split"), Mapping)
            and not answer["split"].get("drained") and answer.get("shards") == current]


def drained_problem(answer: Mapping[str, Any] | None, split: Split | None) -> str | None:
    """Whether a child may stop asking its parent: the parent's own ``routing`` answer (asked of it,
    not told) says the split it made has drained. None: verified; else why not."""
    if split is None:
        return "this shard takes part in no split"
    if not isinstance(answer, Mapping):
        return "the split's parent could not be asked"
    theirs = answer.get("split")
    if not isinstance(theirs, Mapping) or theirs.get("from_shards") != split.from_shards:
        return f"the split's parent takes part in no split from {split.from_shards} shards"
    if theirs.get("drained") is not True:
        return "the split's parent has not drained: it still holds ids of before the split"
    return None


def copy_problem(kind: str, sub_id: str, answer: Mapping[str, Any] | str | None) -> str | None:
    """Whether a shard may register (``subscribe``) or drop (``unsubscribe``) a copy of shard 0's
    subscription ``sub_id``, judged by shard 0's own ``subscriptions_check`` answer. None: verified."""
    if isinstance(answer, str):
        return answer
    if not isinstance(answer, Mapping):
        return "shard 0 could not be asked"
    held = sub_id in (answer.get("held") or [])
    if kind == "subscribe" and not held:
        return f"shard 0 holds no subscription {sub_id[:120]!r}"
    if kind == "unsubscribe" and held:
        return f"shard 0 still holds subscription {sub_id[:120]!r}"
    return None


def handover_digest(keys: Sequence[str], part: int, parts: int) -> str:
    """What a parent keeps of one part of a handover it sent, and a child compares the part it got with."""
    text = json.dumps([part, parts, sorted(keys)], separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def notice_problem(kind: str, keys: Sequence[str], part: int, parts: int, answer: Mapping[str, Any] | None) -> str | None:
    """Whether a child may apply its parent's lane notice (core/engine/_lanes.py), judged by the
    parent's own ``split_lanes_check`` answer: a handover part must be one the parent sent (its
    digest), a free may name only keys the parent no longer runs. None: verified; else why not."""
    if not isinstance(answer, Mapping):
        return "the split's parent could not be asked"
    if not answer.get("handed"):
        return "the split's parent has sent this shard no handover"
    if kind == "handover":
        sent = (answer.get("handover") or {}).get(str(part))
        if sent != handover_digest(keys, part, parts):
            return f"part {part} of {parts} is not the handover the split's parent sent"
        return None
    still = sorted(set(answer.get("busy") or []) & set(keys))
    if still:
        return f"the split's parent still runs events of {len(still)} of its keys (e.g. {still[0][:80]!r})"
    return None
