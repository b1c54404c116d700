"""`wfi state --summary` of a sharded activation names its shards and each shard's part in a split."""

from __future__ import annotations

from wf_initiation.cli.state import render_state


def test_the_summary_shows_the_shards_and_a_split_going_on() -> None:
    summary = {
        "workflow": "hooks", "activation_id": "hooks@1", "status": "active", "counters": {},
        "shards": [
            {"shard": 0, "split": {"from_shards": 2, "seq": 9, "drain_after": "2026-12-03T10:00:00+00:00", "drained": False}},
            {"shard": 1, "split": {"from_shards": 2, "seq": 4, "drain_after": None, "drained": False}},
            {"shard": 2, "split": {"from_shards": 2, "seq": None, "drain_after": None, "drained": False}},
            {"shard": 3},
        ],
    }
    text = render_state(summary, None)
    assert "  shards: 4" in text
    assert "shard 0: split from 2 shards; the ids it held then expire by 2026-12-03T10:00:00+00:00" in text
    assert "shard 1: split from 2 shards; runs of ids it held then are still going" in text
    assert "shard 2: new in the split from 2 shards; asks shard 0 about ids it does not know" in text
    assert "shard 3" not in text, "a child whose parent drained judges alone: nothing to say"
    done = render_state({**summary, "shards": [{"shard": 0, "split": {"from_shards": 1, "drained": True}}, {"shard": 1}]}, None)
    assert "shard 0: split from 1 shards, drained" in done
    assert "shards" not in render_state({k: v for k, v in summary.items() if k != "shards"}, None)


def test_the_summary_shows_each_shard_s_part_in_moving_keys_and_partitions() -> None:
    summary = {
        "workflow": "hooks", "activation_id": "hooks@1", "status": "active", "counters": {},
        "shards": [
            {"shard": 0, "lanes": {"awaiting_parent": None, "held": 0, "handed_over": 3, "batches_waiting": 0}},
            {"shard": 1},
            {"shard": 2, "lanes": {"awaiting_parent": None, "held": 2, "handed_over": 0, "batches_waiting": 1}},
            {"shard": 3, "lanes": {"awaiting_parent": 1, "held": 0, "handed_over": 0, "batches_waiting": 0}},
        ],
    }
    text = render_state(summary, None)
    assert "shard 0: 3 moved key(s)/partition(s) still busy here" in text
    assert "shard 2: 2 moved key(s)/partition(s) wait for their earlier events" in text and "1 closed batch(es)" in text
    assert "shard 3: holds every queue key and batch partition until shard 1 hands over" in text
    assert "  shard 1:" not in text, "a shard with no part in it: nothing to say"


def test_the_summary_names_a_shard_that_is_not_running_with_the_command_that_starts_it_again() -> None:
    summary = {"workflow": "hooks", "activation_id": "hooks@1", "status": "active", "counters": {},
               "shards": [{"shard": 0}, {"shard": 1}],
               "shards_not_running": [{"shard": 1, "status": "terminated", "run_id": "r", "at": "2026-12-04T10:00:00+00:00",
                                       "restart": "wfi activate WORKFILE --deployment FILE"}]}
    text = render_state(summary, None)
    assert ("  shard 1: NOT RUNNING (terminated at 2026-12-04T10:00:00+00:00): its deliveries are answered 503 and its "
            "queue keys wait; `wfi activate WORKFILE --deployment FILE` starts it again with its complete state") in text
    assert "NOT RUNNING" not in render_state({k: v for k, v in summary.items() if k != "shards_not_running"}, None)


def test_the_summary_shows_the_throttle_what_waits_and_when_the_next_may_start() -> None:
    base = {"workflow": "hooks", "activation_id": "hooks@1", "status": "active", "counters": {}}
    keyed = {"runs": 5, "per": "1m", "key": "{{ hook.body.c }}", "waiting": 12, "keys_waiting": 3,
             "next_start_at": "2026-12-04T09:01:00+00:00"}
    assert ("  throttle: at most 5 run(s) per 1m per key {{ hook.body.c }}: 12 waiting (3 keys), next start at "
            "2026-12-04T09:01:00+00:00") in render_state({**base, "throttle": keyed}, None)
    idle = {"runs": 2, "per": "1h", "key": None, "waiting": 0, "keys_waiting": 0, "next_start_at": None}
    assert "  throttle: at most 2 run(s) per 1h: 0 waiting, a run may start now" in render_state({**base, "throttle": idle}, None)
    assert "throttle" not in render_state({**base, "throttle": None}, None)


def test_the_summary_shows_each_shard_s_fill_and_the_next_automatic_growth() -> None:
    summary = {
        "workflow": "hooks", "activation_id": "hooks@1", "status": "active", "counters": {},
        "shards": [{"shard": 0, "capacity": 0.12}, {"shard": 1, "capacity": 0.41}],
        "growth": {"grow_at": 0.8, "max_shards": 8, "grown": 1, "fills": {"0": 0.12, "1": 0.41},
                   "next": "grows to 4 shards when the fullest shard passes 80% of its capacity (now 41% on shard 1)"},
    }
    text = render_state(summary, None)
    assert "  shards: 2 · fill per shard: 0 12% · 1 41%" in text
    assert ("  grows itself (scale.grow_at 80%, at most 8 shards, grown 1 time(s)): next: grows to 4 shards when the "
            "fullest shard passes 80% of its capacity (now 41% on shard 1)") in text
