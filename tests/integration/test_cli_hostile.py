"""Hostile input to the CLI (issue 11, CLI items): every payload the activation could not take is
refused by `wfi deliver` before anything is sent, with one line and exit 2, never a traceback; the
activation then still accepts a normal delivery and starts its run. Also against the dev server:
`--timeout` while an update hangs, an unknown namespace, a closed output pipe, no `None` in output."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import time

import pytest
from temporalio.worker import Worker

from tests.support.activation import unique
from tests.support.cli import MAIL_WORKFILE, WFI, Cli, Pair, cli_env, mail, wfi
from wf_initiation.cli._payload import PayloadRefused, parse
from wf_initiation.core.limits import MAX_DELIVERY_BYTES, MAX_INT_DIGITS, MAX_PAYLOAD_DEPTH
from wf_initiation.plugin import WfiPlugin


@pytest.fixture
def pair(dev_env, task_queue: str, tmp_path: pathlib.Path) -> Pair:
    name = unique("hostile")
    workfile = tmp_path / f"{name}.yaml"
    workfile.write_text(MAIL_WORKFILE.format(name=name))
    made = Pair(name, workfile, tmp_path / "deployment.yaml")
    made.write_deployment(dev_env.client.service_client.config.target_host, task_queue)
    return made


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _file(tmp_path: pathlib.Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def hostile_payloads(tmp_path: pathlib.Path) -> list[tuple[str, list[str], str]]:
    """(what, wfi deliver arguments giving the payload, fragment of the one-line refusal)."""
    return [
        ("nested 10,000 deep", ["--payload", nested(10_000)], f"deeper than the limit of {MAX_PAYLOAD_DEPTH} levels"),
        ("nested one past the limit", ["--payload", nested(MAX_PAYLOAD_DEPTH + 1)], f"({MAX_PAYLOAD_DEPTH + 1} levels)"),
        ("a lone surrogate escape", ["--payload", '{"subject": "\\ud800"}'], "lone UTF-16 surrogate (\\ud800)"),
        ("invalid UTF-8 in a file", ["--payload-file", _file(tmp_path, "latin1.json", b'{"subject": "caf\xe9"}')],
         "is not UTF-8 text (byte 0xe9 at offset 16)"),
        ("invalid UTF-8 on stdin", ["--payload-file", "-"], "is not UTF-8 text"),
        ("a 5,000-digit integer", ["--payload", '{"n": ' + "7" * 5000 + "}"], f"integer of more than {MAX_INT_DIGITS} digits"),
        ("an integer one digit past the limit", ["--payload", "[-" + "9" * (MAX_INT_DIGITS + 1) + "]"],
         f"integer of more than {MAX_INT_DIGITS} digits"),
        ("NaN", ["--payload", '{"n": NaN}'], "contains NaN, which is not a JSON number"),
        ("Infinity", ["--payload-file", _file(tmp_path, "inf.json", b'[-Infinity]')], "contains -Infinity"),
        ("a number beyond a double", ["--payload", "[1e999]"], "1e999, beyond the range of a double"),
        ("one byte over the size limit",
         ["--payload-file", _file(tmp_path, "big.json", json.dumps("x" * (MAX_DELIVERY_BYTES - 1)).encode())],
         f"is {MAX_DELIVERY_BYTES + 1} bytes; the limit is {MAX_DELIVERY_BYTES}"),
        ("not JSON", ["--payload", "{nope"], "is not valid JSON"),
        ("empty", ["--payload", "  "], "is empty"),
    ]


async def test_every_hostile_payload_is_refused_before_sending_and_the_activation_still_starts_runs(
    worker, pair: Pair, tmp_path: pathlib.Path,
) -> None:
    activated = await wfi("activate", str(pair.workfile), "--deployment", str(pair.deployment))
    assert activated.code == 0, activated.stderr
    for what, args, fragment in hostile_payloads(tmp_path):
        stdin = b'{"subject": "\xff"}' if args == ["--payload-file", "-"] else None
        refused = await wfi("deliver", *pair.target, *args, input=stdin)
        refused.assert_one_line_error(2, fragment)
        assert refused.stdout == "", what
    # A lone surrogate straight from the command line (bytes that are not UTF-8 in argv) too.
    raw = await _wfi_bytes("deliver", *pair.target, "--payload", b'{"subject": "\xed\xa0\x80"}')
    raw.assert_one_line_error(2, "lone UTF-16 surrogate")

    state = await wfi("state", *pair.target, "--json")
    assert state.json()["summary"]["counters"].get("deliveries", 0) == 0, "nothing reached the activation"
    normal = await wfi("deliver", *pair.target, "--payload", mail("after-hostile"), "--json")
    assert (normal.code, normal.json()["disposition"]) == (0, "accepted"), normal.stderr
    assert normal.json()["run_key"]


async def _wfi_bytes(*args: str | bytes) -> Cli:
    proc = await asyncio.create_subprocess_exec(*WFI, *args, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                env=cli_env())
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return Cli(proc.returncode or 0, out.decode(), err.decode())


def test_the_payload_limits_hold_at_the_limit_and_one_past_it() -> None:
    assert parse(nested(MAX_PAYLOAD_DEPTH), "t") is not None
    with pytest.raises(PayloadRefused, match=f"\\({MAX_PAYLOAD_DEPTH + 1} levels\\)"):
        parse(nested(MAX_PAYLOAD_DEPTH + 1), "t")
    at_limit = json.dumps("x" * (MAX_DELIVERY_BYTES - 2))
    assert len(at_limit) == MAX_DELIVERY_BYTES and parse(at_limit, "t")
    with pytest.raises(PayloadRefused, match="bytes; the limit is"):
        parse(json.dumps("x" * (MAX_DELIVERY_BYTES - 1)), "t")
    assert parse("9" * MAX_INT_DIGITS, "t") == int("9" * MAX_INT_DIGITS)
    with pytest.raises(PayloadRefused, match=f"more than {MAX_INT_DIGITS} digits"):
        parse("[1" + "0" * MAX_INT_DIGITS + "]", "t")
    assert parse('{"a": 1.5e308, "b": -0.0, "c": "\\ud83d\\ude00"}', "t")["c"] == "\U0001f600", "a surrogate pair is fine"


async def test_the_timeout_holds_while_an_update_hangs(dev_env, pair: Pair, task_queue: str) -> None:
    async with Worker(dev_env.client, task_queue=task_queue, plugins=[WfiPlugin(sample_runs=True)]):
        assert (await wfi("activate", str(pair.workfile), "--deployment", str(pair.deployment))).code == 0
    # No worker serves the activation now: the update waits, the client retries it past every rpc timeout.
    started = time.monotonic()
    hung = await wfi("deliver", *pair.target, "--payload", mail("hangs"), "--timeout", "3", timeout=120)
    elapsed = time.monotonic() - started
    hung.assert_one_line_error(1, f"no answer from the activation of {pair.name!r} within 3s (--timeout)",
                               "is a worker serving task queue")
    assert elapsed < 30, f"took {elapsed:.0f}s: the deadline covers the whole command"


async def test_an_unknown_namespace_is_said_as_such(worker, pair: Pair) -> None:
    for verb in (("state", *pair.target), ("deliver", *pair.target, "--payload", mail("ns")),
                 ("activate", str(pair.workfile), "--deployment", str(pair.deployment))):
        result = await wfi(*verb, "--namespace", "no-such-namespace")
        result.assert_one_line_error(1, "namespace 'no-such-namespace' does not exist on the Temporal at",
                                     "temporal operator namespace create --namespace no-such-namespace")


async def test_the_worker_refuses_an_unknown_namespace_in_one_line(pair: Pair) -> None:
    result = await wfi("worker", "--deployment", str(pair.deployment), "--namespace", "no-such-namespace")
    result.assert_one_line_error(1, "namespace 'no-such-namespace' does not exist")


async def test_state_into_a_closed_pipe_ends_quietly(worker, pair: Pair) -> None:
    assert (await wfi("activate", str(pair.workfile), "--deployment", str(pair.deployment))).code == 0
    read, write = os.pipe()
    os.close(read)  # `wfi state | head -0`: the reader is gone before anything is written
    try:
        proc = await asyncio.create_subprocess_exec(*WFI, "state", *pair.target, stdout=write,
                                                    stderr=asyncio.subprocess.PIPE, env=cli_env())
    finally:
        os.close(write)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert (proc.returncode, err.decode()) == (141, "")


async def test_no_python_none_in_human_output(worker, pair: Pair) -> None:
    assert (await wfi("activate", str(pair.workfile), "--deployment", str(pair.deployment))).code == 0
    invalid = await wfi("deliver", *pair.target, "--payload", '{"subject": "no id"}')
    assert invalid.code == 1 and invalid.stdout.startswith("invalid"), invalid.stdout + invalid.stderr
    state = await wfi("state", *pair.target, "--events")
    summary = await wfi("state", *pair.target, "--summary")
    for shown in (invalid, state, summary):
        assert "None" not in shown.stdout, shown.stdout


def test_rendering_says_what_a_missing_value_means() -> None:
    from wf_initiation.cli.deliver import render_delivery
    from wf_initiation.cli.state import render_state
    from wf_initiation.core.engine import DeliveryResult, Disposition

    line = render_delivery(DeliveryResult(entry=None, delivery_id=None, disposition=Disposition("invalid"),
                                          activation_id="w@1", message="no entry named 'x'"))
    assert "None" not in line and "no delivery id in the payload" in line and "entry not resolved" in line
    summary = {"workflow": "w", "activation_id": "w@1", "status": "active", "entries": [],
               "schedules": {"nightly": {"next": None, "paused": False, "inactive_reason": "no future occurrence"}},
               "polls": {"orders": {"cursor": None, "paused": False, "held": False, "failures": 0, "last_error": None}}}
    full = {"queues": {"t1": {"length": 0, "head": None}}, "runs": {},
            "errors": [{"kind": "invalid", "entry": None, "delivery_id": None, "message": "bad"}]}
    text = render_state(summary, full)
    assert "None" not in text
    assert "no cursor yet (reads from the start)" in text and "no next occurrence" in text and "empty" in text


async def test_a_profile_or_the_environment_reaches_the_server_like_the_temporal_cli(dev_env, tmp_path: pathlib.Path) -> None:
    address = dev_env.client.service_client.config.target_host
    deployment = tmp_path / "bare.yaml"
    deployment.write_text("temporal: {task_queue: wfi-profile-test}\n")  # no address: it comes from elsewhere
    config = tmp_path / "temporal.toml"
    config.write_text(f'[profile.local]\naddress = "{address}"\n')
    target = ("state", "--deployment", str(deployment), "--workflow", "nobody", "--timeout", "30")
    by_profile = await wfi(*target, "--profile", "local", "--config-file", str(config))
    by_env = await wfi(*target, env=cli_env(TEMPORAL_PROFILE="local", TEMPORAL_CONFIG_FILE=str(config)))
    by_address = await wfi(*target, env=cli_env(TEMPORAL_ADDRESS=address))
    for reached in (by_profile, by_env, by_address):  # the server answered: there is no such activation
        reached.assert_one_line_error(1, "no activation of workflow 'nobody' is running")
