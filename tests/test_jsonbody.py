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
