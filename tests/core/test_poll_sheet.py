"""`sheet.row_added` against real CSV files appended between polls (no mocks)."""

from __future__ import annotations

import pathlib

import jsonschema
import pytest
from temporalio.exceptions import ApplicationError

from tests.support.pollsources import activity_env, assert_manifest_names_activity, assert_payloads_conform
from wf_initiation.activities.poll import POLL_CONFIG_INVALID, POLL_SOURCE_UNAVAILABLE, PollRequest, PollResponse, poll_sheet

CONNECTOR = "sheet.row_added"
SHEET = "Content Calendar"


async def poll(connection: dict, cursor: str | None = None, *, limit: int = 500, **config) -> PollResponse:
    req = PollRequest(
        connector=CONNECTOR, config={"sheet": SHEET, **config}, connection=connection, cursor=cursor, limit=limit
    )
    return await activity_env().run(poll_sheet, req)


async def poll_error(connection: dict, cursor: str | None = None, **config) -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        await poll(connection, cursor, **config)
    return caught.value


def append(path: pathlib.Path, text: str) -> None:
    with path.open("a", encoding="utf-8", newline="") as file:
        file.write(text)


def titles(response: PollResponse) -> list[str]:
    return [item.payload["title"] for item in response.items]


@pytest.fixture
def calendar(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "calendar.csv"
    path.write_text("slug,title,due\r\npost-a,Post A,2024-05-01\r\npost-b,\"Post B, part 2\",2024-05-02\r\n")
    return path


async def test_rows_appended_between_polls_are_returned_once_in_row_order(calendar):
    # proves: POLL-6
    connection = {"sheets": {SHEET: str(calendar)}}
    first = await poll(connection)
    append(calendar, "post-c,Post C,2024-05-03\r\n\r\npost-d,Post D,\r\n")
    second = await poll(connection, first.cursor)
    third = await poll(connection, second.cursor)
    # The blank line keeps its number (4), as a spreadsheet would show it, but is not a row.
    assert titles(first) == ["Post A", "Post B, part 2"] and first.stable_order
    assert titles(second) == ["Post C", "Post D"] and third.items == [] and third.cursor == second.cursor
    assert second.items[1].payload == {"slug": "post-d", "title": "Post D", "due": "", "row_id": "5", "row_number": 5}
    assert_payloads_conform(CONNECTOR, [i.payload for i in first.items + second.items])


async def test_id_column_gives_the_row_identity_and_a_row_without_one_is_returned_not_dropped(calendar):
    append(calendar, ",Untitled draft,\r\n")
    first = await poll({"sheets": {SHEET: str(calendar)}}, id_column="slug")
    assert [i.payload["row_id"] for i in first.items] == ["post-a", "post-b", ""]
    assert [i.payload["row_number"] for i in first.items] == [1, 2, 3]
    assert_payloads_conform(CONNECTOR, [i.payload for i in first.items[:2]])
    with pytest.raises(jsonschema.ValidationError):  # the activation holds or quarantines it
        assert_payloads_conform(CONNECTOR, [first.items[2].payload])


async def test_a_half_written_last_row_waits_until_its_line_is_complete(calendar):
    connection = {"dir": str(calendar.parent)}
    calendar.rename(calendar.parent / f"{SHEET}.csv")
    path = calendar.parent / f"{SHEET}.csv"
    first = await poll(connection)
    append(path, "post-c,Post")
    assert (await poll(connection, first.cursor)).items == []
    append(path, " C,2024-05-03\n")
    assert titles(await poll(connection, first.cursor)) == ["Post C"]


async def test_resuming_from_the_cursor_after_any_row_returns_exactly_the_rows_after_it(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("title\n" + "".join(f"row {n}\n" for n in range(1, 7)))
    connection = {"sheets": {SHEET: str(path)}}
    full = await poll(connection)
    for k, item in enumerate(full.items):
        assert titles(await poll(connection, item.cursor_after)) == titles(full)[k + 1 :]


async def test_limit_pages_through_rows_and_says_there_is_more(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("title\n" + "".join(f"row {n}\n" for n in range(1, 6)))
    connection, pages, cursor = {"sheets": {SHEET: str(path)}}, [], None
    for _ in range(3):
        page = await poll(connection, cursor, limit=2)
        pages.append(([i.payload["row_id"] for i in page.items], page.more))
        cursor = page.cursor
    assert pages == [(["1", "2"], True), (["3", "4"], True), (["5"], False)]


async def test_a_missing_file_raises_source_unavailable_and_the_cursor_resumes_once_it_is_back(calendar):
    connection = {"sheets": {SHEET: str(calendar)}}
    first = await poll(connection)
    moved = calendar.rename(calendar.with_suffix(".bak"))
    error = await poll_error(connection, first.cursor)
    assert error.type == POLL_SOURCE_UNAVAILABLE and error.non_retryable
    assert str(calendar) in error.message and SHEET in error.message
    moved.rename(calendar)
    append(calendar, "post-c,Post C,2024-05-03\r\n")
    assert titles(await poll(connection, first.cursor)) == ["Post C"]


@pytest.mark.parametrize(
    ("connection", "config", "fix"),
    [
        ({"sheets": {"Other": "/tmp/x.csv"}}, {}, "maps no file to sheet 'Content Calendar'"),
        ({}, {}, "add it under 'sheets'"),
        ({"dir": "relative/dir"}, {}, "absolute paths"),
        (None, {"id_column": "uid"}, "has no column 'uid'"),
    ],
)
async def test_a_bad_connection_or_configuration_is_invalid_and_says_what_to_fix(calendar, connection, config, fix):
    error = await poll_error({"sheets": {SHEET: str(calendar)}} if connection is None else connection, **config)
    assert error.type == POLL_CONFIG_INVALID and error.non_retryable and fix in error.message


@pytest.mark.parametrize("cursor", ["{", "-1", '"3"', "true", "1.5"])
async def test_a_cursor_this_connector_did_not_write_is_invalid(calendar, cursor):
    error = await poll_error({"sheets": {SHEET: str(calendar)}}, cursor)
    assert error.type == POLL_CONFIG_INVALID and "clear it" in error.message


def test_the_manifest_names_this_activity():
    assert_manifest_names_activity(CONNECTOR, poll_sheet)
