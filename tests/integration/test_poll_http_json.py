"""`http_json.item_added` against a real JSON API on a local socket (tests/support/pollsources.JsonApi):
pages, ETags, rate limits, failures, watermarks, credentials. No mocks: every poll is HTTP."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import jsonschema
import pytest
from temporalio.exceptions import ApplicationError

from tests.support.pollsources import (
    Answer,
    JsonApi,
    activity_env,
    assert_manifest_names_activity,
    assert_payloads_conform,
)
from wf_initiation.activities.poll import POLL_CONFIG_INVALID, POLL_SOURCE_UNAVAILABLE, PollRequest, PollResponse, poll_http_json
from wf_initiation.activities.poll._runtime import worker_connections
from wf_initiation.activities.poll.http_json import retry_after
from wf_initiation.core._catalog import Catalog
from wf_initiation.core.connections import WorkerConnections
from wf_initiation.core.deployment import parse_deployment

CONNECTOR = "http_json.item_added"
SECRET = "json-api-t0ken-9c2e"


def tokens(api: JsonApi, **config: Any) -> dict[str, Any]:
    """The API's listing in page_token mode: items under data, ids at id, next token at meta.next."""
    return {"url": api.url, "items": "data", "id": "id", "next": "meta.next", "token_param": "cursor", **config}


def watermarks(api: JsonApi, **config: Any) -> dict[str, Any]:
    return {**tokens(api), "mode": "watermark", "watermark": "seq", **config}


async def poll(config: dict[str, Any], cursor: str | None = None, *, connection: dict | None = None,
               limit: int = 500) -> PollResponse:
    req = PollRequest(connector=CONNECTOR, config=config, connection=connection or {}, cursor=cursor, limit=limit)
    return await activity_env().run(poll_http_json, req)


async def poll_error(config: dict[str, Any], cursor: str | None = None, **kw: Any) -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        await poll(config, cursor, **kw)
    assert caught.value.non_retryable and caught.value.__cause__ is None
    return caught.value


def ids(response: PollResponse) -> list[str]:
    return [item.payload["item_id"] for item in response.items]


def items(*numbers: int) -> list[dict[str, Any]]:
    return [{"id": f"i{n}", "seq": n, "title": f"Item {n}"} for n in numbers]


async def test_items_across_pages_are_returned_once_in_source_order(json_api: JsonApi) -> None:
    # proves: POLL-6, POLL-5
    json_api.add(*items(1, 2, 3, 4, 5))
    first = await poll(tokens(json_api))
    json_api.add(*items(6, 7))
    second = await poll(tokens(json_api), first.cursor)
    third = await poll(tokens(json_api), second.cursor)
    assert ids(first) == ["i1", "i2", "i3", "i4", "i5"] and ids(second) == ["i6", "i7"] and ids(third) == []
    assert first.stable_order and not first.more
    assert first.items[0].payload == {"item_id": "i1", "source": json_api.url, "item": items(1)[0]}
    assert_payloads_conform(CONNECTOR, [i.payload for i in first.items + second.items])


async def test_resuming_from_the_cursor_after_any_item_returns_exactly_the_items_after_it(json_api: JsonApi) -> None:
    # proves: POLL-8
    json_api.add(*items(*range(1, 8)))
    full = await poll(tokens(json_api))
    for k, item in enumerate(full.items):
        assert ids(await poll(tokens(json_api), item.cursor_after)) == ids(full)[k + 1:], k


async def test_next_page_urls_and_post_bodies_page_the_same_way(json_api: JsonApi) -> None:
    json_api.add(*items(*range(1, 6)))
    json_api.next_style = "url"
    by_url = await poll({"url": json_api.url, "items": "data", "id": "id", "next": "meta.next"})
    json_api.next_style = "token"
    by_post = await poll(tokens(json_api, method="POST", body={"filter": "open"}))
    assert ids(by_url) == ids(by_post) == [f"i{n}" for n in range(1, 6)]
    posts = [r for r in json_api.sent() if r[1] == "POST"]
    assert [r[5] for r in posts] == [{"filter": "open"}, {"filter": "open", "cursor": "2"},
                                     {"filter": "open", "cursor": "4"}]


async def test_pages_per_poll_are_bounded_and_the_rest_comes_at_the_next_poll(json_api: JsonApi) -> None:
    json_api.add(*items(*range(1, 8)))
    json_api.page_size = 1
    first = await poll(tokens(json_api, max_pages=3))
    assert ids(first) == ["i1", "i2", "i3"] and first.more and len(json_api.sent()) == 3
    rest = await poll(tokens(json_api, max_pages=20), first.cursor)
    assert ids(rest) == ["i4", "i5", "i6", "i7"] and not rest.more
    limited = await poll(tokens(json_api), limit=2)
    assert ids(limited) == ["i1", "i2"] and limited.more


async def test_an_unchanged_listing_is_asked_with_its_etag_and_a_304_is_an_empty_poll(json_api: JsonApi) -> None:
    json_api.add(*items(1, 2, 3))
    first = await poll(tokens(json_api))
    unchanged = await poll(tokens(json_api), first.cursor)
    assert ids(unchanged) == [] and unchanged.cursor == first.cursor and json_api.statuses()[-1] == 304
    assert json_api.sent()[-1][3]["If-None-Match"].startswith('"')
    json_api.add(*items(4))
    changed = await poll(tokens(json_api), first.cursor)
    assert ids(changed) == ["i4"] and json_api.statuses()[-1] == 200
    mid = await poll(tokens(json_api), first.items[0].cursor_after)
    assert ids(mid) == ["i2", "i3", "i4"], "a cursor inside a page never carries an ETag: nothing is skipped"
    assert "If-None-Match" not in json_api.sent()[-2][3]


async def test_a_rate_limit_fails_the_poll_with_the_wait_the_source_asked_for(json_api: JsonApi) -> None:
    # proves: POLL-10, POLL-2
    json_api.add(*items(1, 2))
    json_api.script(Answer(429, {"Retry-After": "7"}), Answer(503, {"Retry-After": format_datetime(
        datetime.now(UTC) + timedelta(seconds=90), usegmt=True)}), Answer(429))
    for expected in (timedelta(seconds=7), timedelta(seconds=90), None):
        error = await poll_error(tokens(json_api))
        assert error.type == POLL_SOURCE_UNAVAILABLE and "answered HTTP" in error.message
        if expected is None:
            assert error.next_retry_delay is None
        else:
            assert error.next_retry_delay is not None and expected - timedelta(seconds=5) <= error.next_retry_delay <= expected
            assert "asked to wait" in error.message
    assert ids(await poll(tokens(json_api))) == ["i1", "i2"], "and then it polls normally"


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)
    assert retry_after("120", now) == timedelta(seconds=120)
    assert retry_after("Sat, 05 Dec 2026 10:01:30 GMT", now) == timedelta(seconds=90)
    assert retry_after("Sat, 05 Dec 2026 09:00:00 GMT", now) == timedelta(0)
    assert retry_after("soon", now) is None and retry_after(None, now) is None


async def test_a_page_failing_after_the_first_keeps_the_items_before_it(json_api: JsonApi) -> None:
    # proves: POLL-10, POLL-8
    json_api.add(*items(1, 2, 3, 4, 5))
    first_page = json_api.page({}, None)
    json_api.script(first_page, Answer(500, {}, b"boom"))
    partial = await poll(tokens(json_api))
    assert ids(partial) == ["i1", "i2"] and partial.more
    rest = await poll(tokens(json_api), partial.cursor)
    assert ids(rest) == ["i3", "i4", "i5"]
    json_api.script(Answer(500, {}, b"boom"))
    error = await poll_error(tokens(json_api), rest.cursor)
    assert error.type == POLL_SOURCE_UNAVAILABLE and "HTTP 500" in error.message


async def test_an_item_without_an_id_is_still_returned_and_fails_the_payload_schema(json_api: JsonApi) -> None:
    # proves: POLL-11 (never dropped: the activation quarantines or holds it)
    json_api.add(*items(1), {"seq": 2, "title": "no id"}, {"id": None, "seq": 3}, *items(4))
    response = await poll(tokens(json_api))
    assert ids(response) == ["i1", "", "", "i4"]
    manifest = Catalog.default(third_party=False).get(CONNECTOR)
    assert manifest is not None
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(response.items[1].payload, manifest.payload_schema)


async def test_numbers_json_cannot_carry_are_kept_as_their_text(json_api: JsonApi) -> None:
    json_api.script(Answer(200, {}, b'{"data": [{"id": "n1", "a": NaN, "b": -Infinity, "c": 1e999, "d": 2.5}]}'))
    (item,) = (await poll(tokens(json_api))).items
    assert item.payload["item"] == {"id": "n1", "a": "NaN", "b": "-Infinity", "c": "1e999", "d": 2.5}


async def test_an_item_the_activation_could_not_carry_is_an_invalid_stand_in(json_api: JsonApi) -> None:
    # proves: POLL-11 (a lone surrogate or a nesting past the payload depth would wedge the poll's result)
    deep = "[" * 70 + "]" * 70
    body = '{"data": [{"id": "d1", "x": ' + deep + '}, {"id": "s1", "x": "\\ud800"}, {"id": "ok"}]}'
    json_api.script(Answer(200, {}, body.encode()))
    deep_item, lone, fine = (await poll(tokens(json_api))).items
    assert deep_item.payload == {"item_id": "d1", "source": json_api.url, "item": None}
    assert deep_item.problem and "nested more than 63 levels" in deep_item.problem
    assert lone.payload["item"] is None and lone.problem and "surrogate" in lone.problem
    assert fine.problem is None and fine.payload["item"] == {"id": "ok"}


async def test_a_next_token_that_is_not_text_fails_the_poll_naming_next(json_api: JsonApi) -> None:
    json_api.script(Answer(200, {}, b'{"data": [{"id": "a"}], "meta": {"next": "\\udc00"}}'))
    error = await poll_error(tokens(json_api))
    assert error.type == POLL_SOURCE_UNAVAILABLE and "not valid Unicode" in error.message and "'next'" in error.message


async def test_watermark_mode_returns_new_items_in_increasing_order_whatever_the_source_order(json_api: JsonApi) -> None:
    # proves: POLL-6
    json_api.add(*items(3, 1, 2))
    json_api.newest_first = True
    config = watermarks(json_api, watermark_param="since", order="descending")
    first = await poll(config)
    assert ids(first) == ["i1", "i2", "i3"] and first.items[-1].cursor_after == first.cursor
    json_api.add(*items(4, 5, 6, 7))
    second = await poll(config, first.cursor)
    assert ids(second) == ["i4", "i5", "i6", "i7"]
    assert json_api.sent()[-1][2].endswith("since=3"), "the watermark is sent to the source"
    empty = await poll(config, second.cursor)
    assert ids(empty) == [] and '"etag"' in (empty.cursor or "")


async def test_a_newest_first_listing_stops_paging_at_the_first_seen_item(json_api: JsonApi) -> None:
    json_api.add(*items(*range(1, 11)))
    json_api.newest_first = True
    config = watermarks(json_api, order="descending", max_pages=2)
    cursor = '{"mode":"watermark","v":1,"w":7}'
    response = await poll(config, cursor)
    assert ids(response) == ["i8", "i9", "i10"] and len(json_api.sent()) == 2
    error = await poll_error(config, '{"mode":"watermark","v":1,"w":1}')
    assert error.type == POLL_SOURCE_UNAVAILABLE and "raise 'max_pages'" in error.message


async def test_an_item_without_a_watermark_is_returned_once_as_an_invalid_item(json_api: JsonApi) -> None:
    # proves: POLL-11
    json_api.add(*items(1), {"id": "odd", "title": "no seq"}, *items(2))
    first = await poll(watermarks(json_api))
    assert ids(first) == ["odd", "i1", "i2"]
    assert first.items[0].problem and "no usable watermark" in first.items[0].problem
    assert [i.problem for i in first.items[1:]] == [None, None]
    json_api.add(*items(3))
    again = await poll(watermarks(json_api), first.cursor)
    assert ids(again) == ["i3"], "remembered by its digest in the cursor, not returned again"


async def test_credentials_from_references_go_only_to_the_connections_origins(json_api: JsonApi, monkeypatch) -> None:
    monkeypatch.setenv("WFI_T_JSON_TOKEN", SECRET)
    json_api.add(*items(1))
    connections = {
        "bearer": {"connector": "http_json", "bearer_token": "env:WFI_T_JSON_TOKEN", "origins": [json_api.origin]},
        "basic": {"connector": "http_json", "username": "app", "password": "env:WFI_T_JSON_TOKEN",
                  "origins": [json_api.origin], "headers": {"X-Tenant": "acme"}},
        "elsewhere": {"connector": "http_json", "bearer_token": "env:WFI_T_JSON_TOKEN",
                      "origins": ["https://api.example.com"]},
    }
    dep = parse_deployment({"connections": connections})
    sent = {name: c.model_dump() for name, c in dep.connections.items()}
    with worker_connections(WorkerConnections(dep.connections)):
        assert ids(await poll(tokens(json_api), connection=sent["bearer"])) == ["i1"]
        assert json_api.sent()[-1][3]["Authorization"] == f"Bearer {SECRET}"
        await poll(tokens(json_api), connection=sent["basic"])
        headers = json_api.sent()[-1][3]
        assert headers["Authorization"] == "Basic " + base64.b64encode(f"app:{SECRET}".encode()).decode()
        assert headers["X-Tenant"] == "acme"
        before = len(json_api.sent())
        error = await poll_error(tokens(json_api), connection=sent["elsewhere"])
        assert error.type == POLL_CONFIG_INVALID and "not one of the connection's origins" in error.message
        assert len(json_api.sent()) == before, "nothing was sent"
        json_api.script(Answer(401, {}, {"error": f"bad token {SECRET}"}))
        error = await poll_error(tokens(json_api), connection=sent["bearer"])
        assert "credentials" in error.message and SECRET not in error.message


@pytest.mark.parametrize(("answer", "expected"), [
    (Answer(302, {"Location": "https://elsewhere.example/items"}), "redirects are not followed"),
    (Answer(200, {"Content-Type": "text/html"}, b"<html>login</html>"), "not JSON"),
    (Answer(200, {}, {"data": {"not": "a list"}}), "not a list"),
    (Answer(200, {}, b"[" * 100_000 + b"]" * 100_000), "not JSON"),
    (Answer(200, {}, {"data": [], "meta": {"next": "https://other.example/items?page=2"}}), "another origin"),
    (Answer(404), "check the trigger's 'url'"),
])
async def test_what_the_source_answers_wrong_fails_the_poll_naming_the_fix(json_api: JsonApi, answer, expected) -> None:
    json_api.script(answer)
    error = await poll_error(tokens(json_api))
    assert expected in error.message, error.message
    json_api.add(*items(1))
    assert ids(await poll(tokens(json_api))) == ["i1"], "the next poll reads normally"


@pytest.mark.parametrize(("config", "expected"), [
    ({"method": "PUT"}, "'method' must be GET or POST"),
    ({"body": {"a": 1}}, "'body' must be a JSON object, with method: POST"),
    ({"mode": "watermark"}, "needs 'watermark'"),
    ({"max_pages": 21}, "from 1 to 20"),
    ({"url": "ftp://host/items"}, "only http:// and https://"),
    ({"url": "http://user:pw@127.0.0.1/items"}, "carries credentials"),
])
async def test_a_bad_configuration_is_invalid_and_names_the_key(json_api: JsonApi, config, expected) -> None:
    error = await poll_error(tokens(json_api, **config))
    assert error.type == POLL_CONFIG_INVALID and expected in error.message


@pytest.mark.parametrize("cursor", ["{", '{"mode":"watermark","v":1,"w":3}', '{"mode":"page_token","v":1,"skip":-1}', "7"])
async def test_a_cursor_this_connector_did_not_write_for_this_mode_is_invalid(json_api: JsonApi, cursor: str) -> None:
    error = await poll_error(tokens(json_api), cursor)
    assert error.type == POLL_CONFIG_INVALID and "clear it" in error.message


async def test_a_token_next_page_without_token_param_names_the_missing_key(json_api: JsonApi) -> None:
    json_api.add(*items(1, 2, 3))
    error = await poll_error({"url": json_api.url, "items": "data", "id": "id", "next": "meta.next"})
    assert error.type == POLL_CONFIG_INVALID and "token_param" in error.message


def test_the_manifest_names_this_activity() -> None:
    assert_manifest_names_activity(CONNECTOR, poll_http_json)
