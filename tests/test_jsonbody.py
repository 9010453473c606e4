"""JSON bodies: accepted media types, and a repeated key refused however it is written (pure)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recall_server import jsonbody
from recall_server.errors import BadRequest, UnsupportedMediaType

TEXT = st.text(alphabet=st.sampled_from(['a', 'b', ':', '"', '\\', ' ', 'é', '\u2028', '{', '}']), max_size=6)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)


@given(VALUES, st.sampled_from([None, (",", ":"), (", ", ": "), (",", " : ")]), st.booleans())
def test_any_json_without_repeated_keys_decodes_to_what_the_standard_library_reads(value, separators, ascii_) -> None:
    body = json.dumps(value, separators=separators, ensure_ascii=ascii_).encode()
    assert jsonbody.decode(body) == json.loads(body)


@given(st.dictionaries(TEXT, VALUES, min_size=1, max_size=4), st.data(), st.booleans())
def test_a_repeated_key_is_refused_wherever_it_is(value, data, ascii_) -> None:
    key = data.draw(st.sampled_from(sorted(value)))
    text = json.dumps(value, ensure_ascii=ascii_)
    repeated = text[:-1] + ", " + json.dumps(key, ensure_ascii=ascii_) + ": " + json.dumps(
        data.draw(VALUES), ensure_ascii=ascii_) + "}"
    nested = json.dumps({"outer": [1, {"x": 0}]})[:-3] + "," + repeated[1:] + "]}"
    for body in (repeated, nested):
        with pytest.raises(BadRequest, match="repeats the key"):
            jsonbody.decode(body.encode())


@pytest.mark.parametrize("body", [b"", b"{", b'{"a" 1}', b"[1,]", b"\xff"])
def test_what_is_not_json_is_400(body: bytes) -> None:
    if body == b"":
        assert jsonbody.decode(body) is None  # no body: the handler's validation says what is missing
        return
    with pytest.raises(BadRequest, match="not valid JSON"):
        jsonbody.decode(body)


@pytest.mark.parametrize("ctype", ["application/json", "application/json; charset=utf-8", "APPLICATION/JSON",
                                   "application/problem+json", "application/merge-patch+json ; x=y"])
def test_json_media_types_are_accepted(ctype: str) -> None:
    jsonbody.require_json(ctype)


@pytest.mark.parametrize("ctype", [None, "", "text/plain", "text/json", "application/jsonp", "application/x-json",
                                   "multipart/form-data", "json", "+json", "text/+json"])
def test_other_media_types_are_415(ctype: str | None) -> None:
    with pytest.raises(UnsupportedMediaType):
        jsonbody.require_json(ctype)


@given(VALUES)
def test_items_counts_the_commas_outside_strings_exactly_within_the_limit(value) -> None:
    body = json.dumps(value).encode()
    expected = sum(len(v) - 1 for v in _containers(value) if len(v) > 0)
    assert jsonbody.items(body, 10**6) == expected
    assert (jsonbody.items(body, 0) > 0) == (expected > 0)


def _containers(value):
    if isinstance(value, (list, dict)):
        yield value
        for inner in (value.values() if isinstance(value, dict) else value):
            yield from _containers(inner)


def test_a_body_over_the_item_limit_is_413_before_decoding() -> None:
    from recall_server.errors import PayloadTooLarge

    wide = json.dumps({f"k{i}": i for i in range(1002)}).encode()  # 1001 commas
    with pytest.raises(PayloadTooLarge, match="more than 1000 keys and array items"):
        jsonbody.decode(wide, max_items=1000)
    assert len(jsonbody.decode(wide, max_items=1001)) == 1002
    many_strings = json.dumps([""] * 1002).encode()  # refused by the count of its strings
    with pytest.raises(PayloadTooLarge):
        jsonbody.decode(many_strings, max_items=1000)
    strings = json.dumps(["a,b,c,d"] * 10).encode()  # 39 commas, 9 of them outside strings
    assert jsonbody.decode(strings, max_items=9) == ["a,b,c,d"] * 10
