"""From HTTP request to payload, pure: body parsing and its limits, delivery ids, kept headers."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wf_initiation.ingress._payload import (
    BadRequest,
    body_delivery_id,
    decode_content,
    depth_exceeds,
    fields,
    header_delivery_id,
    kept_headers,
    parse_body,
    request_payload,
    without_paths,
)
from wf_initiation.ingress.limits import MAX_INT_DIGITS, MAX_JSON_DEPTH


def nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = {"a": value} if depth % 2 else [value]
    return value


def test_json_depth_at_the_limit_parses_and_one_more_level_is_refused() -> None:
    at = json.dumps(nested(MAX_JSON_DEPTH)).encode()
    assert parse_body(at, "application/json", MAX_JSON_DEPTH) == nested(MAX_JSON_DEPTH)
    with pytest.raises(BadRequest) as over:
        parse_body(json.dumps(nested(MAX_JSON_DEPTH + 1)).encode(), "application/json", MAX_JSON_DEPTH)
    assert over.value.code == "json_too_deep" and over.value.status == 400
    with pytest.raises(BadRequest) as hostile:  # far past the interpreter's recursion limit
        parse_body(b"[" * 200_000 + b"]" * 200_000, "application/json", MAX_JSON_DEPTH)
    assert hostile.value.code == "json_too_deep"


@given(st.recursive(st.none() | st.integers() | st.text(max_size=3),
                    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=2), children, max_size=3),
                    max_leaves=30))
def test_depth_check_agrees_with_a_recursive_definition(value: object) -> None:
    def depth(v: object) -> int:
        if isinstance(v, dict):
            return 1 + max((depth(x) for x in v.values()), default=0)
        if isinstance(v, list):
            return 1 + max((depth(x) for x in v), default=0)
        return 0

    for limit in range(0, 6):
        assert depth_exceeds(value, limit) == (depth(value) > limit)


def test_bodies_by_content_type() -> None:
    assert parse_body(b"", "application/json", 8) is None
    assert parse_body(b'{"a": 1}', "application/vnd.api+json; charset=utf-8", 8) == {"a": 1}
    assert parse_body(b"a=1&b=2&b=3&c=", "application/x-www-form-urlencoded", 8) == {"a": "1", "b": ["2", "3"], "c": ""}
    github_form = b"payload=" + json.dumps({"ref": "refs/heads/main"}).encode().replace(b" ", b"+")
    assert parse_body(github_form, "application/x-www-form-urlencoded", 8, form_payload=True) == {"ref": "refs/heads/main"}
    assert parse_body(b"hello", "text/plain", 8) == "hello"
    assert parse_body(b'{"a": 1}', None, 8) == {"a": 1}
    assert parse_body(b"plain words", None, 8) == "plain words"
    digits = MAX_INT_DIGITS
    assert parse_body(b"[" + b"9" * digits + b"]", "application/json", 8) == [int("9" * digits)]
    for too_big in (b"[" + b"9" * (digits + 1) + b"]", b"[-" + b"9" * (digits + 1) + b"]", b"[1e999]", b"[Infinity]"):
        with pytest.raises(BadRequest) as refused:
            parse_body(too_big, "application/json", 8)
        assert refused.value.code == "bad_json"
    for body, media, code in ((b"\xff\xfe", "text/plain", "bad_encoding"), (b"{", "application/json", "bad_json"),
                              (b"[NaN]", "application/json", "bad_json"), (b"\x00\x01", "application/octet-stream",
                                                                          "unsupported_media_type")):
        with pytest.raises(BadRequest) as refused:
            parse_body(body, media, 8)
        assert refused.value.code == code


def test_delivery_ids_from_headers_and_bodies() -> None:
    # IETF draft-ietf-httpapi-idempotency-key-header: the value is a structured-field string.
    assert header_delivery_id({"idempotency-key": '"8e03978e-40d5-43e8-bc93-6894a57f9324"'}, "Idempotency-Key") \
        == "8e03978e-40d5-43e8-bc93-6894a57f9324"
    assert header_delivery_id({"idempotency-key": "bare-token"}, "Idempotency-Key") == "bare-token"
    assert header_delivery_id({"idempotency-key": '"a\\"b"'}, "Idempotency-Key") == 'a"b'
    assert header_delivery_id({"idempotency-key": '""'}, "Idempotency-Key") is None
    assert header_delivery_id({"idempotency-key": "  "}, "Idempotency-Key") is None
    assert body_delivery_id({"event": {"id": "e-1"}}, "event.id") == "e-1"
    assert body_delivery_id({"id": 42}, "id") == "42"
    for body in ({"id": True}, {"id": None}, {"id": {"x": 1}}, {"other": 1}, ["id"], "id"):
        assert body_delivery_id(body, "id") is None


def test_the_payload_leaves_out_credentials_transport_and_retry_dependent_parts() -> None:
    raw = [("Content-Type", "application/json"), ("X-GitHub-Event", "push"), ("Authorization", "Bearer t"),
           ("X-Hub-Signature-256", "sha256=ab"), ("webhook-timestamp", "1"), ("X-Forwarded-For", "10.0.0.1"),
           ("traceparent", "00-ab-cd-01"), ("Accept", "a"), ("X-Tag", "a"), ("X-Tag", "b"), ("X-Token", "secret")]
    assert kept_headers(raw, None, ["x-token"]) == {"content-type": "application/json", "x-github-event": "push",
                                                    "x-tag": "a, b"}
    assert kept_headers(raw, ["X-GitHub-Event", "Authorization"]) == {"x-github-event": "push"}, \
        "an allowlist never lets a credential through"
    body = {"id": "evt", "pending_webhooks": 3, "data": {"object": {"x": 1, "y": 2}}}
    assert without_paths(body, ["pending_webhooks", "data.object.y", "absent.path"]) == \
        {"id": "evt", "data": {"object": {"x": 1}}}
    assert body["pending_webhooks"] == 3, "the parsed body itself is not changed"
    payload = request_payload(delivery_id="d", method="POST", path="/hooks/x", headers={}, query=[("a", "1"), ("a", "2")],
                              body=None)
    assert payload == {"delivery_id": "d", "method": "POST", "path": "/hooks/x", "headers": {}, "query": {"a": ["1", "2"]},
                       "body": None}


def test_the_ingress_public_names_are_pinned() -> None:
    import wf_initiation.ingress as ingress

    assert ingress.__all__ == ["IngressConfig", "IngressConfigError", "app", "build"]
    assert all(callable(getattr(ingress, name)) for name in ingress.__all__)


def test_a_declared_charset_is_honoured_and_invalid_text_is_refused_never_replaced() -> None:
    form = "application/x-www-form-urlencoded"
    assert parse_body(b"name=%C3%A9t%C3%A9&x=a+b", form, 8) == {"name": "été", "x": "a b"}
    assert parse_body(b"name=%E9t%E9", f"{form}; charset=ISO-8859-1", 8) == {"name": "été"}
    assert parse_body(b"caf\xe9 \x80", "text/plain; charset=windows-1252", 8) == "café €"
    assert parse_body(b"caf\xc3\xa9", "text/plain; charset=utf-8", 8) == "café"
    assert parse_body(b'{"a": "\xc3\xa9"}', "application/json; charset=UTF-8", 8) == {"a": "é"}
    for body, media, code, status in (
        (b"name=%FF", form, "bad_encoding", 400),  # not UTF-8: refused, never U+FFFD
        (b"%FF=1", form, "bad_encoding", 400),
        (b"name=%C3", form, "bad_encoding", 400),  # a cut sequence
        (b"name=\xff", form, "bad_encoding", 400),
        (b"caf\xe9", "text/plain", "bad_encoding", 400),  # latin-1 bytes, no charset: UTF-8 is the default
        (b"caf\xe9", "text/plain; charset=us-ascii", "bad_encoding", 400),
        (b"x", "text/plain; charset=klingon", "unsupported_charset", 415),
        (b"x", "text/plain; charset=utf-16", "unsupported_charset", 415),
        (b'{"a": 1}', "application/json; charset=iso-8859-1", "unsupported_charset", 415),
        (b'{"a": "\xe9"}', "application/json", "bad_encoding", 400),
        (b'\xff\xfe{\x00}\x00', "application/json", "bad_encoding", 400),  # UTF-16 JSON is not guessed
    ):
        with pytest.raises(BadRequest) as refused:
            parse_body(body, media, 8)
        assert (refused.value.code, refused.value.status) == (code, status), (body, media)


def test_query_and_form_fields_keep_their_order_and_refuse_invalid_utf8() -> None:
    assert fields("a=1&b=%C3%A9&a=2&c", "utf-8", what="query parameter") == [("a", "1"), ("b", "é"), ("a", "2"), ("c", "")]
    with pytest.raises(BadRequest) as refused:
        fields("a=%FF", "utf-8", what="query parameter")
    assert refused.value.status == 400 and "query parameter" in str(refused.value)


def test_content_codings_are_undone_within_the_limit_and_others_are_415() -> None:
    import gzip
    import zlib

    text = b'{"a": "' + b"x" * 1000 + b'"}'
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    assert decode_content(gzip.compress(text), "gzip", 4096) == text
    assert decode_content(gzip.compress(text), "x-gzip", 4096) == text
    assert decode_content(zlib.compress(text), "deflate", 4096) == text  # RFC 9110: the zlib format
    assert decode_content(raw_deflate.compress(text) + raw_deflate.flush(), "Deflate", 4096) == text  # raw, as some send
    assert decode_content(gzip.compress(text[:500]) + gzip.compress(text[500:]), "gzip", 4096) == text  # two members
    assert decode_content(gzip.compress(zlib.compress(text)), "deflate, gzip", 4096) == text  # undone in reverse
    assert decode_content(text, "identity", 4096) == text
    assert decode_content(text, None, 4096) == text and decode_content(b"", "gzip", 4096) == b""
    exact = b"y" * 4096
    assert decode_content(gzip.compress(exact), "gzip", 4096) == exact
    for body, coding, code, status in (
        (gzip.compress(exact + b"y"), "gzip", "body_too_large", 413),
        (gzip.compress(b"\0" * (64 * 1024 * 1024)), "gzip", "body_too_large", 413),  # a 64 MiB bomb in 64 KiB
        (gzip.compress(text)[:-12], "gzip", "bad_encoding", 400),
        (gzip.compress(text) + b"junk", "gzip", "bad_encoding", 400),
        (b"not gzip at all", "gzip", "bad_encoding", 400),
        (text, "br", "unsupported_content_encoding", 415),
        (text, "gzip, zstd", "unsupported_content_encoding", 415),
    ):
        with pytest.raises(BadRequest) as refused:
            decode_content(body, coding, 4096)
        assert (refused.value.code, refused.value.status) == (code, status), coding
        if status == 415:
            assert refused.value.headers == {"Accept-Encoding": "gzip, deflate"}
