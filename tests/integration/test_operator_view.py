"""The operator's page (Current Details in the Temporal UI): what it says, its size, no secrets, and
what a real browser shows of it in the dev server's Web UI."""

from __future__ import annotations

import os
import pathlib
import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.support.activation import make_spec
from tests.support.browser import Browser, find_chromium, free_port
from tests.support.engine import drive
from tests.support.operator_view import SECRET_TOKEN, Page, build_scenario, page_url, pages
from tests.support.temporal import DEV_SERVER_ARGS, binary
from wf_initiation.core.engine import Engine, initial_state
from wf_initiation.core.engine._view import MAX_BYTES, redact, secrets_of
from wf_initiation.core.engine._view import markdown as render
from wf_initiation.core.schedule import next_occurrences, parse_schedule
from wf_initiation.plugin import WfiPlugin
from wf_initiation.wire.search_attributes import ALL as SEARCH_ATTRIBUTES

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
MANY = "name: wide\non:\n" + "".join(
    f"  - mail.received: {{inbox: box{i}@acme.com}}\n    as: m{i}\n"
    f"    when: \"{{{{ m{i}.recipient != 'noreply@acme.com' and m{i}.priority > 0 }}}}\"\n"
    f"    queue_by: \"{{{{ m{i}.thread_id }}}}\"\n" for i in range(16))

# The scenario is built once for the module (scenario_pages) and read by most of its tests: they run
# in one xdist worker together.
pytestmark = pytest.mark.xdist_group("operator_view")


def _mail(i: int, *, thread: str, **extra: object) -> dict[str, object]:
    return {"message_id": f"{'x' * 180}-{i}", "from": "a@b.c", "recipient": "help@acme.com", "subject": "s" * 300,
            "thread_id": thread, "priority": 1, **extra}


@pytest.fixture(scope="module")
async def scenario_pages(dev_env, tmp_path_factory: pytest.TempPathFactory) -> list[Page]:
    queue = f"view-{uuid.uuid4().hex[:8]}"
    async with Worker(dev_env.client, task_queue=queue, plugins=[WfiPlugin(sample_runs=True)]):
        names = await build_scenario(dev_env.client, queue, tmp_path_factory.mktemp("view"))
        return await pages(dev_env.client, names)


async def test_the_page_shows_dispositions_with_reasons_and_errors_with_their_text(scenario_pages: list[Page]) -> None:
    # proves: TRIG-8, TRIG-9, EXT-4, EXT-10 (recorded, and shown to the operator as such)
    support = scenario_pages[0].markdown
    assert f"## {scenario_pages[0].workflow} · ACTIVE" in support
    assert "`m-102` **suppressed** — `when` was false" in support
    assert "`m-104` **guard_fault** — " in support and "TypeError: '>' not supported" in support
    assert "`m-100` **conflict** — `delivery 'm-100' was accepted" in support and "the first payload stands" in support
    assert ("`m-103` **invalid** — `2 problems: payload: 'recipient' is a required property; payload: 'subject' is a "
            "required property`") in support  # every problem named, not "(and 1 more)"
    assert "**queues** 1 queue key(s), deepest: `\"t1\"` 2" in support  # m-100 holds thread t1, m-101 waits
    assert "### Recent errors (3 recorded)" in support


async def test_the_page_names_each_schedule_s_zone_and_shows_next_and_last_in_utc_with_the_overflow_command(
    scenario_pages: list[Page],
) -> None:
    # proves: SCHED-9, SCHED-10 (the policy, the bound and the omitted range, with what resolves it)
    nightly = scenario_pages[1]
    text = nightly.markdown
    assert f"## {nightly.workflow} · NEEDS OPERATOR" in text
    assert "- cron `0 9 * * 1-5` in **Europe/Berlin** · missed: catch_up (bound 1)" in text
    # The next weekday 09:00 in Berlin after the page was read (the clock is real: either side of 09:00),
    # shown in UTC as every instant of the page is (one zone, labelled).
    read = datetime.now(UTC)
    expected = {next_occurrences(parse_schedule({"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin"}), after, 1)[0]
                for after in (read - timedelta(minutes=5), read)}
    assert any(f"- next **{at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC**" in text for at in expected), (expected, text)
    assert "- last 2026-11-27 08:00:00 UTC → **backfilled**" in text  # 09:00 in Berlin
    assert "- interval `2s` in **Europe/Berlin**" in text
    assert "beyond the catch-up bound" in text
    assert f"`wfi operate --deployment FILE --workflow {nightly.workflow} decide_overflow --range-id pulse-" in text


async def test_the_page_names_the_command_that_releases_a_held_item_and_shows_a_failing_poll(
    scenario_pages: list[Page],
) -> None:
    # proves: POLL-4, POLL-11 (cursor and held item shown to the operator with the action that resolves it)
    orders = scenario_pages[2]
    text = orders.markdown
    assert "poll `order` holds an invalid item since" in text and "`row_id: '' should be non-empty`" in text
    assert f"`wfi operate --deployment FILE --workflow {orders.workflow} release_held --entry order --choice quarantine`" in text
    assert "- cursor `2` · last success" in text and "`o-2` **suppressed**" in text and "`o-1` **accepted** — run" in text
    assert "- **failing** (" in text and "PollSourceUnavailable" in text


async def test_no_page_carries_a_secret_or_exceeds_its_size(scenario_pages: list[Page]) -> None:
    for page in scenario_pages:
        assert SECRET_TOKEN not in page.markdown
        assert len(page.markdown.encode()) <= MAX_BYTES
    assert "PollSourceUnavailable" in scenario_pages[2].markdown  # the failing feed's error is there, its token is not


def _wide_engine(tmp_path: pathlib.Path) -> Engine:
    """16 entries, long delivery ids and subjects, 300 queue keys, faults with long texts, a held poll."""
    spec = make_spec(tmp_path, MANY, task_queue="unused")
    engine = drive(Engine(spec, initial_state(spec, T0)))
    for i in range(600):
        entry = f"m{i % 16}"
        engine.deliver(entry, _mail(i, thread=f"thread-{i % 300}-{'k' * 60}"), T0 + timedelta(seconds=i))
        engine.deliver(entry, _mail(i, thread="t", priority="high"), T0 + timedelta(seconds=i))  # conflict
        engine.deliver(entry, _mail(10_000 + i, thread="t", priority="high"), T0 + timedelta(seconds=i))  # guard fault
    return engine


def test_the_page_stays_within_8_kb_for_a_wide_busy_activation(tmp_path: pathlib.Path) -> None:
    engine = _wide_engine(tmp_path)
    full = render(engine.core, "active", max_bytes=10**9)
    assert len(full.encode()) > MAX_BYTES  # without the bound this page would be too large
    page = engine.markdown()
    assert len(page.encode()) <= MAX_BYTES
    assert page.startswith("## wide · ACTIVE") and "**queues** 300 queue key(s)" in page
    assert "#### `m11` · mail.received" in page and "… and 4 more entries (query `summary`)" in page
    assert "- **guard_fault** ×" in page and "TypeError: '>' not supported" in page


def test_the_size_bound_holds_at_the_limit_and_one_byte_below(tmp_path: pathlib.Path) -> None:
    engine = _wide_engine(tmp_path)
    full = render(engine.core, "active", max_bytes=10**9)
    size = len(full.encode())
    assert render(engine.core, "active", max_bytes=size) == full  # exactly at the limit: everything
    smaller = render(engine.core, "active", max_bytes=size - 1)  # one byte less: less detail, still the page
    assert len(smaller.encode()) <= size - 1 and smaller.startswith("## wide · ACTIVE")
    tiny = render(engine.core, "active", max_bytes=600)  # nothing fits: cut, and says where the rest is
    assert len(tiny.encode()) <= 600 and tiny.endswith("query `state` for everything")


def test_secrets_in_connection_settings_and_in_error_texts_are_masked() -> None:
    settings = [{"connector": "sql", "dsn": "postgresql://wfi:pg-pass-123@db:5432/orders", "sqlite": "/tmp/o.db"},
                {"connector": "http", "api_key": "k-abcdef", "headers": {"Authorization": "Bearer zzz-token"}}]
    secrets = secrets_of(settings)
    text = ("connect to postgresql://wfi:pg-pass-123@db:5432/orders failed; retried with k-abcdef and "
            "Bearer zzz-token; feed https://u:other-pass@h/f.xml?api_key=q1w2e3&page=2 and /tmp/o.db; "
            "http://h/feed.xml?token=t0k3n-9 and host=db password=conninfo-pw")
    masked = redact(text, secrets)
    for secret in ("pg-pass-123", "k-abcdef", "zzz-token", "other-pass", "q1w2e3", "t0k3n-9", "conninfo-pw"):
        assert secret not in masked
    assert "/tmp/o.db" in masked and "page=2" in masked  # what is not secret stays readable


# ---------------------------------------------------------------------------- in a real browser
@pytest.fixture
async def ui_env() -> WorkflowEnvironment:
    port = free_port()
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=binary("temporal"), ui=True, ui_port=port, search_attributes=list(SEARCH_ATTRIBUTES),
        dev_server_extra_args=DEV_SERVER_ARGS, data_converter=pydantic_data_converter)
    env.ui = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    yield env
    await env.shutdown()


async def test_the_web_ui_renders_the_page_as_markdown(ui_env: WorkflowEnvironment, tmp_path: pathlib.Path) -> None:
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no Chromium on PATH (Debian: apt-get install -y chromium); see docs/operator-view.md")
    shots = pathlib.Path(os.environ.get("WFI_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    queue = f"ui-{uuid.uuid4().hex[:8]}"
    async with Worker(ui_env.client, task_queue=queue, plugins=[WfiPlugin(sample_runs=True)]):
        names = await build_scenario(ui_env.client, queue, tmp_path)
        shown: dict[str, str] = {}
        async with Browser(chromium, height=1600) as browser:
            for page in await pages(ui_env.client, names):
                text = await browser.open(page_url(ui_env.ui, ui_env.client.namespace, page),  # type: ignore[attr-defined]
                                          wait_for=f"{page.workflow} · ")
                await browser.screenshot(shots / f"{page.workflow}.png")
                # Rendered (the UI renders it in a frame of its own), not shown raw: headings, list items,
                # code and bold exist, and no markdown syntax is left in the text.
                rendered = set(await browser.frame_tags(f"{page.workflow} · "))
                assert {"H2", "H4", "LI", "CODE", "STRONG"} <= rendered, rendered
                assert "**runs**" not in text and "## " not in text and "`wfi operate" not in text
                shown[page.workflow] = text
    assert f"wfi operate --deployment FILE --workflow {names[1]} decide_overflow" in shown[names[1]]
    assert "Needs an operator" in shown[names[2]] and "release_held --entry order" in shown[names[2]]
    assert all((shots / f"{name}.png").stat().st_size > 20_000 for name in names)


CLAUSE_ID = re.compile(r"\b(?:INIT|BATCH|SCHED|EXT|POLL|CAP|TRIG|COMP)-\d+")


async def test_external_dispositions_carry_a_date_and_zone_and_no_page_text_cites_a_clause(scenario_pages: list[Page]) -> None:
    # A time alone ("21:08:55") is ambiguous to an operator in another zone: each line says its date and zone.
    support = scenario_pages[0].markdown
    dated = re.findall(r"^- (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC) `m-10\d` \*\*", support, re.M)
    assert len(dated) >= 4, support
    assert not re.search(r"^- \d\d:\d\d:\d\d ", support, re.M), "no time without its date and zone"
    assert "the first payload stands" in support  # the conflict's text, without "(EXT-3, EXT-4)"
    for page in scenario_pages:
        assert not CLAUSE_ID.search(page.markdown), (page.workflow, CLAUSE_ID.findall(page.markdown))


UNLABELLED = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?! UTC)(?!\d|:|\.)")
OFFSET = re.compile(r"\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z\b|[+-]\d\d:\d\d)")


async def test_every_instant_on_a_page_is_in_utc_and_labelled_so(scenario_pages: list[Page]) -> None:
    for page in scenario_pages:
        assert "- times in UTC" in page.markdown
        assert not UNLABELLED.findall(page.markdown), (page.workflow, UNLABELLED.findall(page.markdown))
        assert not OFFSET.findall(page.markdown), (page.workflow, OFFSET.findall(page.markdown))  # no +01:00, no Z
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", scenario_pages[1].markdown)


async def test_conflict_and_invalid_errors_say_what_to_do(scenario_pages: list[Page]) -> None:
    support = scenario_pages[0].markdown
    conflict = support.split("- **conflict**", 1)[1].split("\n- ", 1)[0]
    assert "what to do: nothing changed and no second run started" in conflict
    assert "A new event needs an id of its own" in conflict and "docs/webhooks.md" in conflict
    invalid = support.split("- **invalid**", 1)[1].split("\n- ", 1)[0]
    assert "what to do: no run started and the id is not consumed" in invalid
    assert "send it again, with the same delivery id" in invalid


def test_a_message_loses_its_clause_references_on_the_page_but_an_identifier_keeps_its_text() -> None:
    from wf_initiation.core.engine._view import clip

    assert clip("waits behind its key (TRIG-11); the first payload stands (EXT-3, EXT-4)", prose=True) == \
        "waits behind its key; the first payload stands"
    assert clip("no future occurrence (SCHED-4) and (BATCH-1..7)", prose=True) == "no future occurrence and"
    assert clip("EXT-3 (EXT-4)") == "EXT-3 (EXT-4)", "a delivery id is shown as it is"
