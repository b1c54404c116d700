"""Lanes of a sharded activation (core.sharding): an entry with ``queue_by`` has each delivery id judged
by its id's shard and each event queued and run by its key's shard, with the pure engine of every
shard fed as the workflows feed them (the id's shard first, then the lane with the routing)."""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.activation import make_spec
from tests.support.engine import Driver, drive
from tests.support.hostile import hook
from wf_initiation.core.engine import Disposition, Engine, initial_state
from wf_initiation.core.sharding import lane_of, shard_of

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
SHARDS = 4
WORKFILE = 'name: laned\non:\n  http.request: {}\n  as: hook\n  queue_by: "{{ hook.body.k }}"\n'


@pytest.fixture
def shards(tmp_path: pathlib.Path) -> list[Driver]:
    spec = make_spec(tmp_path, WORKFILE, task_queue="q", scale={"shards": SHARDS})
    return [drive(Engine(part, initial_state(part, T0))) for part in (spec.as_shard(k).shard_part() for k in range(SHARDS))]


def ids_away_from(lane: int, count: int) -> list[str]:
    """Delivery ids whose own shard is not ``lane``, each on a different shard where it can be."""
    return [i for i in (f"d-{n}" for n in range(200)) if shard_of("hook", i, SHARDS) != lane][:count]


def deliver(shards: list[Driver], payload: dict[str, Any], now: datetime) -> Any:
    """As WfiClient delivers: to the id's shard, then, when it routed the event, to the lane."""
    first = shards[shard_of("hook", payload["delivery_id"], SHARDS)].deliver("hook", payload, now)
    if first.disposition is not Disposition.ROUTED:
        return first
    return shards[first.shard].deliver("hook", payload, now, lane=True)


def test_each_key_is_queued_in_order_on_its_lane_whatever_shard_its_ids_are_on(shards: list[Driver]) -> None:
    # proves: EXT-11 (events of one queue key ordered by acceptance across shards)
    lane = lane_of('"k-2"', SHARDS)
    first, second, third = ids_away_from(lane, 3)
    routed = shards[shard_of("hook", first, SHARDS)].deliver("hook", hook(first, k="k-2"), T0)
    assert (routed.disposition, routed.shard) == (Disposition.ROUTED, lane)
    lane_answer = shards[lane].deliver("hook", hook(first, k="k-2"), T0, lane=True)
    assert lane_answer.disposition is Disposition.ACCEPTED, "the lane starts the key's first event"
    later = [deliver(shards, hook(i, k="k-2"), T0 + timedelta(seconds=n)) for n, i in enumerate((second, third), 1)]
    assert [r.disposition for r in later] == [Disposition.QUEUED, Disposition.QUEUED], "behind the key's first, in order"
    assert shards[lane].core.state.queues['"k-2"'] == [lane_answer.run_key, *(r.run_key for r in later)], \
        "the key's queue, head first, in the order the lane accepted them"
    for k, shard in enumerate(shards):
        if k != lane:
            assert not shard.core.state.runs, f"shard {k} holds ids of the key, never its runs"


def test_a_redelivery_is_judged_by_the_id_s_shard_even_when_it_changes_the_key(shards: list[Driver]) -> None:
    # proves: EXT-3, EXT-4 (one id, one event across the shards: a payload moving its key is a conflict)
    lane = lane_of('"k-2"', SHARDS)
    [ident] = ids_away_from(lane, 1)
    home = shards[shard_of("hook", ident, SHARDS)]
    accepted = deliver(shards, hook(ident, k="k-2"), T0)
    assert accepted.disposition is Disposition.ACCEPTED
    moved = next(k for k in (f"k-{n}" for n in range(10, 60)) if lane_of(f'"{k}"', SHARDS) != lane)
    conflict = home.deliver("hook", hook(ident, k=moved), T0 + timedelta(seconds=1))
    assert conflict.disposition is Disposition.CONFLICT and "first payload stands" in (conflict.message or "")
    assert conflict.retained is Disposition.ROUTED
    assert not any(s.core.lookup(f"hook\x1f{ident}") for n, s in enumerate(shards)
                   if n not in (lane, shard_of("hook", ident, SHARDS))), "no other lane heard of it"
    again = deliver(shards, hook(ident, k="k-2"), T0 + timedelta(seconds=2))
    assert (again.disposition, again.run_key) == (Disposition.DUPLICATE, accepted.run_key), "the lane answers the repeat"
    errors = [e.kind for e in home.core.state.errors]
    assert errors == ["conflict"], errors


def test_what_needs_no_lane_stays_on_the_id_s_shard(shards: list[Driver]) -> None:
    home = shards[shard_of("hook", "d-7", SHARDS)]
    assert home.deliver("hook", {"delivery_id": "d-7"}, T0).disposition is Disposition.INVALID
    assert home.deliver("hook", hook("d-7"), T0).disposition is Disposition.KEY_FAULT, "no body.k: judged where the id is"
    own = next(k for k in (f"k-{n}" for n in range(60)) if lane_of(f'"{k}"', SHARDS) == home.spec.shard)
    assert home.deliver("hook", hook("d-7", k=own), T0).disposition is Disposition.CONFLICT, \
        "d-7 was taken (key_fault) with another payload"
    [fresh] = [i for i in (f"e-{n}" for n in range(200)) if shard_of("hook", i, SHARDS) == home.spec.shard][:1]
    routed = home.deliver("hook", hook(fresh, k=own), T0)
    assert (routed.disposition, routed.shard) == (Disposition.ROUTED, home.spec.shard), \
        "a key whose queue is on the id's own shard is routed there too (a deliver_many keeps its order)"
    taken = home.deliver("hook", hook(fresh, k=own), T0, lane=True)
    assert taken.disposition is Disposition.ACCEPTED
    assert home.core.lookup(f"hook\x1f{fresh}").disposition is Disposition.ACCEPTED, "one entry: the event's"
    again = home.deliver("hook", hook(fresh, k=own), T0)
    assert (again.disposition, again.run_key) == (Disposition.DUPLICATE, taken.run_key), "a repeat is answered at once"
    assert home.deliver("hook", hook(fresh, k=own), T0, lane=True).disposition is Disposition.DUPLICATE


def test_equal_keys_of_two_entries_share_one_queue_on_one_shard(tmp_path: pathlib.Path) -> None:
    # proves: TRIG-12 (one queue per key value across the entries of a sharded workflow)
    two = ('name: two\non:\n  - http.request: {path: /a}\n    as: a\n    queue_by: "{{ a.body.k }}"\n'
           '  - http.request: {path: /b}\n    as: b\n    queue_by: "{{ b.body.k }}"\n')
    spec = make_spec(tmp_path, two, task_queue="q", scale={"shards": SHARDS})
    parts = [drive(Engine(p, initial_state(p, T0))) for p in (spec.as_shard(k).shard_part() for k in range(SHARDS))]
    lane = lane_of('"same"', SHARDS)
    answers = []
    for n, entry in enumerate(("a", "b", "a")):
        ident = f"{entry}-{n}"
        first = parts[shard_of(entry, ident, SHARDS)].deliver(entry, hook(ident, k="same"), T0)
        answers.append(first if first.disposition is not Disposition.ROUTED
                       else parts[first.shard].deliver(entry, hook(ident, k="same"), T0, lane=True))
    assert [a.disposition for a in answers] == [Disposition.ACCEPTED, Disposition.QUEUED, Disposition.QUEUED]
    assert parts[lane].core.state.queues['"same"'] == [a.run_key for a in answers]


def sharded(tmp_path: pathlib.Path, extra: str, **settings: Any) -> list[Driver]:
    spec = make_spec(tmp_path, f"name: wide\non:\n  http.request: {{}}\n  as: hook\n{extra}", task_queue="q",
                     scale={"shards": SHARDS}, **settings)
    return [drive(Engine(p, initial_state(p, T0))) for p in (spec.as_shard(k).shard_part() for k in range(SHARDS))]


def spread_ids(count: int) -> list[str]:
    """Ids whose own shards cover every shard."""
    by_shard: dict[int, list[str]] = {}
    for n in range(400):
        by_shard.setdefault(shard_of("hook", f"x-{n}", SHARDS), []).append(f"x-{n}")
    return [by_shard[n % SHARDS][n // SHARDS] for n in range(count)]


def test_a_batch_partition_collects_its_events_on_one_shard_whatever_their_ids(tmp_path: pathlib.Path) -> None:
    # proves: EXT-6, BATCH-2, BATCH-4 (one batch per partition across the shards of an activation)
    shards = sharded(tmp_path, '  batch: {size: 4, partition_by: "{{ hook.body.p }}"}\n')
    ids = spread_ids(8)
    answers = [deliver(shards, hook(i, p="north" if n % 2 else "south"), T0 + timedelta(seconds=n)) for n, i in enumerate(ids)]
    assert {a.disposition for a in answers} == {Disposition.BATCHED}
    by_partition = {p: {a.run_key for n, a in enumerate(answers) if (n % 2 == 1) == (p == "north")} for p in ("north", "south")}
    assert all(len(keys) == 1 for keys in by_partition.values()), "each partition's events share one batch and run"
    holders = [k for k, s in enumerate(shards) if s.core.state.runs]
    assert len(holders) <= 2 and sum(len(s.core.state.runs) for s in shards) == 2, "two closed batches, two runs"
    run = next(r for s in shards for r in s.core.state.runs.values())
    assert len(run.event_keys) == 4, "size 4: each run carries its partition's four events"


def test_an_activation_wide_overlap_or_limit_is_decided_on_shard_zero(tmp_path: pathlib.Path) -> None:
    # proves: EXT-13, EXT-12 (overlap across every run of a sharded activation)
    skip = sharded(tmp_path, '  when: "{{ hook.body.go }}"\n', overlap="skip")
    first, second, quiet = spread_ids(3)
    assert deliver(skip, hook(first, go=True), T0).disposition is Disposition.ACCEPTED
    skipped = deliver(skip, hook(second, go=True), T0)
    assert skipped.disposition is Disposition.SKIPPED, "a run of the activation is in flight, wherever its id was"
    assert deliver(skip, hook(quiet, go=False), T0).disposition is Disposition.SUPPRESSED, "when before overlap"
    assert all(not s.core.state.runs for s in skip[1:]), "every run is shard 0's"

    limited = sharded(tmp_path, "", max_concurrent_runs=2)
    answers = [deliver(limited, hook(i), T0).disposition for i in spread_ids(4)]
    assert answers == [Disposition.ACCEPTED, Disposition.ACCEPTED, Disposition.QUEUED, Disposition.QUEUED]


def starts(driver: Driver) -> list[str]:
    """Run keys the engine decided to start since the last look."""
    from wf_initiation.core.engine import StartRun

    return [c.run_key for c in driver.take_commands() if isinstance(c, StartRun)]


def notices(driver: Driver) -> list[tuple[str, dict[str, Any]]]:
    from wf_initiation.core.engine import LANES_SIGNAL, SignalRun

    return [(c.workflow_id, c.payload) for c in driver.outbox if isinstance(c, SignalRun) and c.signal == LANES_SIGNAL]


def test_a_split_moves_a_queue_key_only_after_its_parent_ran_the_key_s_events(tmp_path: pathlib.Path) -> None:
    # proves: EXT-11 (a key's order kept while a split moves it to another shard)
    from wf_initiation.core.activation import Split
    from wf_initiation.core.engine import LaneNotice

    before = make_spec(tmp_path, WORKFILE, task_queue="q", scale={"shards": 2})
    after = make_spec(tmp_path, WORKFILE, task_queue="q", scale={"shards": 4})
    moved = [k for k in (f"m-{n}" for n in range(200)) if lane_of(f'"{k}"', 4) >= 2]
    key, idle = moved[0], next(k for k in moved[1:] if lane_of(f'"{k}"', 4) == lane_of(f'"{moved[0]}"', 4))
    child_no = lane_of(f'"{key}"', 4)
    parent_no = child_no % 2
    parent = drive(Engine(before.as_shard(parent_no).shard_part(), initial_state(before.as_shard(parent_no).shard_part(), T0)))
    first = parent.deliver("hook", hook("e-0", k=key), T0, lane=True)
    second = parent.deliver("hook", hook("e-1", k=key), T0, lane=True)
    assert (first.disposition, second.disposition) == (Disposition.ACCEPTED, Disposition.QUEUED)
    assert starts(parent) == [first.run_key]

    split = Split(from_shards=2, seq=parent.last_seq)
    parent.rebind(after.model_copy(update={"split": split}).as_shard(parent_no).shard_part(), T0)
    [(target, handover)] = notices(parent)
    assert target.endswith(f"#{child_no}") and handover == {"parent": parent_no, "kind": "handover", "keys": [f'"{key}"'],
                                                            "part": 0, "parts": 1}
    late = parent.deliver("hook", hook("e-9", k=key), T0, lane=True)
    assert (late.disposition, late.shard) == (Disposition.ROUTED, child_no), "the parent takes no new event of a moved key"

    part = after.model_copy(update={"split": split}).as_shard(child_no).shard_part()
    child = drive(Engine(part, initial_state(part, T0)))
    third = child.deliver("hook", hook("e-2", k=key), T0, lane=True)
    other = child.deliver("hook", hook("f-0", k=idle), T0, lane=True)
    assert (third.disposition, other.disposition) == (Disposition.QUEUED, Disposition.QUEUED), "held until the handover"
    assert starts(child) == []
    child.lanes_noticed(LaneNotice.model_validate(handover), T0)
    assert starts(child) == [other.run_key], "a key with nothing on the parent starts at the handover"

    parent.outbox.clear()
    parent.run_started(first.run_key, "r-0", T0)
    parent.run_finished(first.run_key, "completed", T0 + timedelta(seconds=1))
    assert notices(parent) == [] and starts(parent) == [second.run_key], "the key still has an event on the parent"
    parent.run_started(second.run_key, "r-1", T0)
    parent.run_finished(second.run_key, "completed", T0 + timedelta(seconds=2))
    [(_, free)] = notices(parent)
    assert free == {"parent": parent_no, "kind": "free", "keys": [f'"{key}"'], "part": 0, "parts": 1}
    child.lanes_noticed(LaneNotice.model_validate(free), T0 + timedelta(seconds=2))
    assert starts(child) == [third.run_key], "the moved key's next event starts once the parent's have ended"
    child.lanes_noticed(LaneNotice.model_validate(handover), T0 + timedelta(seconds=3))
    assert child.core.state.lanes_held == [], "a repeated handover (the parent restarted) holds nothing again"


def test_a_free_before_the_handover_is_kept(tmp_path: pathlib.Path) -> None:
    from wf_initiation.core.activation import Split
    from wf_initiation.core.engine import LaneNotice

    after = make_spec(tmp_path, WORKFILE, task_queue="q", scale={"shards": 4})
    part = after.model_copy(update={"split": Split(from_shards=2)}).as_shard(3).shard_part()
    child = drive(Engine(part, initial_state(part, T0)))
    assert child.core.state.lanes_awaited == 1
    child.lanes_noticed(LaneNotice(parent=1, kind="free", keys=['"a"']), T0)
    child.lanes_noticed(LaneNotice(parent=0, kind="handover", keys=['"b"']), T0)
    assert child.core.state.lanes_awaited == 1, "not this child's parent"
    child.lanes_noticed(LaneNotice(parent=1, kind="handover", keys=['"a"', '"b"']), T0)
    assert (child.core.state.lanes_awaited, child.core.state.lanes_held) == (None, ['"b"'])


def test_a_run_waiting_on_a_sharded_entry_gets_its_event_whatever_shard_its_id_is_on(tmp_path: pathlib.Path) -> None:
    # proves: INIT-8, INIT-10 (subscriptions of a sharded activation: copies on every shard, selection on shard 0)
    from tests.support.replies import REPLIES, reply
    from wf_initiation.core.engine import SignalRun, SubscribeRequest, UnsubscribeRequest
    from wf_initiation.core.engine._offer import EVENT_SIGNAL

    spec = make_spec(tmp_path, REPLIES.format(name="replies"), task_queue="q", scale={"shards": SHARDS})
    shards = [drive(Engine(p, initial_state(p, T0))) for p in (spec.as_shard(k).shard_part() for k in range(SHARDS))]
    request = SubscribeRequest(sub_id="s-1", entry="reply", run_workflow_id="waiter-1", match={"body.thread": "t1"})
    shards[0].subscribe(request, T0)
    copies = [c for c in shards[0].take_commands() if isinstance(c, SignalRun)]
    assert sorted(c.workflow_id for c in copies) == [f"wfi-activation:replies#{k}" for k in range(1, SHARDS)]
    for copy in copies:  # the shell signals each shard; each registers a copy
        shards[int(copy.workflow_id.rsplit("#", 1)[1])].subscribe(SubscribeRequest.model_validate(copy.payload), T0)

    def send(ident: str, thread: str) -> Any:
        home = shards[shard_of("reply", ident, SHARDS)]
        first = home.deliver("reply", reply(ident, thread), T0)
        if first.disposition is not Disposition.ROUTED:
            return first
        return shards[first.shard].deliver("reply", reply(ident, thread), T0, lane=True)

    away = next(i for i in (f"r-{n}" for n in range(100)) if shard_of("reply", i, SHARDS) != 0)
    other = send(next(i for i in (f"o-{n}" for n in range(100)) if shard_of("reply", i, SHARDS) != 0), "t2")
    assert other.disposition is Disposition.SUPPRESSED, "no copy matches another thread: judged where its id is"
    got = send(away, "t1")
    assert got.disposition is Disposition.DELIVERED, got
    delivered = [c for c in shards[0].take_commands() if isinstance(c, SignalRun)]
    assert [c.workflow_id for c in delivered if c.signal == EVENT_SIGNAL] == ["waiter-1"]
    dropped = [c for c in delivered if c.signal == "unsubscribe"]
    assert len(dropped) == SHARDS - 1, "shard 0 drops the copies of a subscription it consumed"
    for c in dropped:
        shards[int(c.workflow_id.rsplit("#", 1)[1])].unsubscribe(UnsubscribeRequest.model_validate(c.payload), T0)
    assert all(not s.core.state.subscriptions for s in shards)
    again = send(next(i for i in (f"z-{n}" for n in range(100)) if shard_of("reply", i, SHARDS) != 0), "t1")
    assert again.disposition is Disposition.SUPPRESSED, "one event per wait: the next is no longer delivered"
    assert [c for c in shards[1].take_commands() if isinstance(c, SignalRun) and c.signal == EVENT_SIGNAL] == [], \
        "only shard 0 signals waiting runs"


def test_a_split_gives_the_new_shards_copies_of_the_subscriptions(tmp_path: pathlib.Path) -> None:
    # proves: INIT-8 (a split's new shards offer their events to the subscriptions active then)
    from tests.support.replies import REPLIES
    from wf_initiation.core.activation import Split
    from wf_initiation.core.engine import SignalRun, SubscribeRequest

    before = make_spec(tmp_path, REPLIES.format(name="replies"), task_queue="q", scale={"shards": 2})
    after = make_spec(tmp_path, REPLIES.format(name="replies"), task_queue="q", scale={"shards": 4})
    zero = drive(Engine(before.shard_part(), initial_state(before.shard_part(), T0)))
    zero.subscribe(SubscribeRequest(sub_id="s-1", entry="reply", run_workflow_id="waiter-1"), T0)
    assert [c.workflow_id for c in zero.take_commands() if isinstance(c, SignalRun)] == ["wfi-activation:replies#1"]
    zero.rebind(after.model_copy(update={"split": Split(from_shards=2, seq=zero.last_seq)}).shard_part(), T0)
    copies = [c for c in zero.take_commands() if isinstance(c, SignalRun) and c.signal == "subscribe"]
    assert sorted(c.workflow_id for c in copies) == ["wfi-activation:replies#2", "wfi-activation:replies#3"]
    assert all(SubscribeRequest.model_validate(c.payload).replica for c in copies)


def test_a_split_moves_a_batch_partition_only_after_its_parent_s_open_batch_closed(tmp_path: pathlib.Path) -> None:
    # proves: BATCH-4, EXT-11 (a partition's batches start in order across a split that moves it)
    from wf_initiation.core.activation import Split
    from wf_initiation.core.engine import LaneNotice
    from wf_initiation.core.sharding import batch_lane_text

    workfile = 'name: wide\non:\n  http.request: {}\n  as: hook\n  batch: {size: 2, max_wait: 1m, partition_by: "{{ hook.body.p }}"}\n'
    before = make_spec(tmp_path, workfile, task_queue="q", scale={"shards": 2})
    after = make_spec(tmp_path, workfile, task_queue="q", scale={"shards": 4})
    part = next(p for p in (f"p-{n}" for n in range(200)) if lane_of(batch_lane_text("hook", f'"{p}"'), 4) >= 2)
    text = batch_lane_text("hook", f'"{part}"')  # the partition's canonical JSON, as partition_by gives it
    child_no = lane_of(text, 4)
    parent_no = child_no % 2
    parent = drive(Engine(before.as_shard(parent_no).shard_part(), initial_state(before.as_shard(parent_no).shard_part(), T0)))
    opened = parent.deliver("hook", hook("a-0", p=part), T0, lane=True)
    assert opened.disposition is Disposition.BATCHED and starts(parent) == []

    split = Split(from_shards=2, seq=parent.last_seq)
    parent.rebind(after.model_copy(update={"split": split}).as_shard(parent_no).shard_part(), T0)
    [(_, handover)] = notices(parent)
    assert handover["keys"] == [text], "the parent's open batch holds the partition"

    spec = after.model_copy(update={"split": split}).as_shard(child_no).shard_part()
    child = drive(Engine(spec, initial_state(spec, T0)))
    child.lanes_noticed(LaneNotice.model_validate(handover), T0)
    later = [child.deliver("hook", hook(f"b-{n}", p=part), T0 + timedelta(seconds=n), lane=True) for n in range(2)]
    assert {r.disposition for r in later} == {Disposition.BATCHED} and later[0].run_key == later[1].run_key
    assert starts(child) == [] and child.core.state.lanes_waiting == [later[0].run_key], "full, but held behind the parent's"

    parent.outbox.clear()
    parent.tick(T0 + timedelta(minutes=1))  # the parent's batch closes at max_wait: its run starts, the partition is free
    [(_, free)] = notices(parent)
    assert starts(parent) == [opened.run_key]
    assert free["kind"] == "free" and free["keys"] == [text]
    child.lanes_noticed(LaneNotice.model_validate(free), T0 + timedelta(minutes=1))
    assert starts(child) == [later[0].run_key] and child.core.state.lanes_waiting == []


def test_a_handover_too_large_for_one_signal_comes_in_parts(tmp_path: pathlib.Path) -> None:
    # A parent with many busy moved keys: every part is within the signal budget; the child holds
    # every key until the last part came, then releases what no part named (and what was freed).
    from wf_initiation.core.activation import Split
    from wf_initiation.core.engine import LaneNotice
    from wf_initiation.core.engine._lanes import NOTICE_BYTES, _chunks

    keys = [f'"{"k" * 200}-{n}"' for n in range(2000)]
    chunks = _chunks(keys)
    assert len(chunks) > 1 and sum(chunks, []) == keys
    assert all(sum(len(k) + 8 for k in c) <= NOTICE_BYTES for c in chunks)
    assert _chunks([]) == [[]], "a handover with nothing busy is one empty part"
    spec = make_spec(tmp_path, WORKFILE, task_queue="q", scale={"shards": 4})
    part = spec.model_copy(update={"split": Split(from_shards=2)}).as_shard(3).shard_part()
    child = drive(Engine(part, initial_state(part, T0)))
    child.lanes_noticed(LaneNotice(parent=1, kind="handover", keys=['"a"', '"b"'], part=1, parts=2), T0)
    child.lanes_noticed(LaneNotice(parent=1, kind="free", keys=['"b"']), T0)
    assert child.core.state.lanes_awaited == 1, "one part of two: still every key held"
    child.lanes_noticed(LaneNotice(parent=1, kind="handover", keys=['"c"'], part=0, parts=2), T0)
    assert (child.core.state.lanes_awaited, child.core.state.lanes_held) == (None, ['"a"', '"c"'])
