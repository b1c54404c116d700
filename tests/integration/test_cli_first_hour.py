"""The first hour at the command line (issue 31, item 6), against a real activation: `wfi operate
pause` of an activation with nothing to pause says so in words (exit 1), an invalid delivery lists
every problem of its payload, and `wfi state --summary` shows the capacity fill; the activation then
still accepts a normal delivery and starts its run."""

from __future__ import annotations

import json
import pathlib

import pytest

from tests.support.activation import unique
from tests.support.cli import MAIL_WORKFILE, Pair, mail, wfi
from tests.support.hostile import run_started


@pytest.fixture
def pair(dev_env, task_queue: str, tmp_path: pathlib.Path) -> Pair:
    name = unique("first-hour")
    workfile = tmp_path / f"{name}.yaml"
    workfile.write_text(MAIL_WORKFILE.format(name=name))
    made = Pair(name, workfile, tmp_path / "deployment.yaml")
    made.write_deployment(dev_env.client.service_client.config.target_host, task_queue)
    return made


async def test_pause_without_schedules_an_invalid_delivery_and_the_summary_say_it_in_words(worker, pair: Pair,
                                                                                          dev_env) -> None:
    assert (await wfi("activate", str(pair.workfile), "--deployment", str(pair.deployment))).code == 0
    paused = await wfi("operate", "pause", *pair.target)
    assert paused.code == 1, paused
    assert paused.stdout.strip() == (
        f"pause: refused: nothing to pause: the activation of {pair.name!r} has no schedule or poll entry (pause acts "
        "on those only; its external deliveries are always taken: to stop them, `wfi deactivate`)")

    bad = json.dumps({"message_id": "m-bad", "from": 7, "recipient": "help@acme.com"})  # `from` a number, no subject
    invalid = await wfi("deliver", *pair.target, "--payload", bad, "--json")
    answer = invalid.json()
    assert answer["disposition"] == "invalid", invalid
    assert answer["message"].startswith("2 problems: ") and "more)" not in answer["message"]
    assert "from: 7 is not of type 'string'" in answer["message"] and "'subject' is a required property" in answer["message"]

    accepted = await wfi("deliver", *pair.target, "--payload", mail("m-1"), "--json")
    assert accepted.json()["disposition"] == "accepted", accepted
    await run_started(dev_env.client, accepted.json()["run_key"])
    summary = await wfi("state", *pair.target, "--summary")
    assert summary.code == 0, summary
    [line] = [line for line in summary.stdout.splitlines() if line.startswith("  capacity ")]
    assert "% full (" in line and "1 dedup ids; at capacity: refuse)" in line, summary.stdout
