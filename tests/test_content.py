"""recall_server.content: immutable content served with strong ETags, conditional GET and single byte ranges."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recall_server import content
from recall_server.errors import RangeNotSatisfiable

DATA = bytes(range(100))
SHA = hashlib.sha256(DATA).digest()
TAG = content.etag(SHA)


def serve(data: bytes = DATA, *, if_none_match: str | None = None, range_: str | None = None,
          if_range: str | None = None) -> content.Served:
    return content.serve(data, hashlib.sha256(data).digest(), if_none_match=if_none_match, range_=range_,
                         if_range=if_range)


def assert_full(served: content.Served, data: bytes = DATA) -> None:
    assert served.status == 200
    assert served.data == data
    assert "Content-Range" not in served.headers


# ---- the whole body ---------------------------------------------------------------------


def test_a_plain_get_is_the_whole_body_with_caching_headers() -> None:
    served = serve()
    assert_full(served)
    assert served.headers == {
        "ETag": TAG,
        "Cache-Control": "private, max-age=31536000, immutable",
        "Accept-Ranges": "bytes",
        **content.INERT,
    }


def test_the_etag_is_a_strong_quoted_tag_derived_from_the_hash() -> None:
    assert TAG == f'"{SHA.hex()[:32]}"'
    assert not TAG.startswith("W/")


def test_an_empty_body_is_served_whole() -> None:
    assert_full(serve(b""), b"")


# ---- If-None-Match ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        pytest.param(TAG, id="exact"),
        pytest.param(f'"other", {TAG}', id="in-a-list"),
        pytest.param(f'"a",{TAG},"b"', id="in-a-list-without-spaces"),
        pytest.param(f"W/{TAG}", id="weak-prefix"),
        pytest.param(f'"other", W/{TAG}', id="weak-in-a-list"),
        pytest.param("*", id="star"),
        pytest.param(f"  {TAG}  ", id="padded"),
    ],
)
def test_a_matching_if_none_match_is_304_with_an_empty_body(header: str) -> None:
    served = serve(if_none_match=header)
    assert served.status == 304
    assert served.data == b""
    assert served.headers["ETag"] == TAG
    assert served.headers["Cache-Control"] == content.CACHE_CONTROL


@pytest.mark.parametrize("header", ['"other"', '"other", "another"', TAG.strip('"'), "", f'W/"{"0" * 32}"'])
def test_a_non_matching_if_none_match_is_the_whole_body(header: str) -> None:
    assert_full(serve(if_none_match=header))


def test_if_none_match_wins_over_range() -> None:
    served = serve(if_none_match=TAG, range_="bytes=0-9")
    assert served.status == 304
    assert served.data == b""


# ---- Range ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "first", "last"),
    [
        pytest.param("bytes=0-9", 0, 9, id="first-ten"),
        pytest.param("bytes=10-19", 10, 19, id="closed"),
        pytest.param("bytes=99-99", 99, 99, id="last-byte"),
        pytest.param("bytes=90-1000", 90, 99, id="end-clamped"),
        pytest.param("bytes=95-", 95, 99, id="open-ended"),
        pytest.param("bytes=0-", 0, 99, id="open-from-zero"),
        pytest.param("bytes=-5", 95, 99, id="suffix"),
        pytest.param("bytes=-1000", 0, 99, id="suffix-longer-than-body"),
        pytest.param(" bytes=0-9 ", 0, 9, id="padded"),
    ],
)
def test_a_single_range_is_206_with_its_slice_and_content_range(header: str, first: int, last: int) -> None:
    served = serve(range_=header)
    assert served.status == 206
    assert served.data == DATA[first:last + 1]
    assert served.headers["Content-Range"] == f"bytes {first}-{last}/{len(DATA)}"
    assert served.headers["ETag"] == TAG


@pytest.mark.parametrize(
    ("data", "header"),
    [
        pytest.param(DATA, "bytes=100-", id="start-at-size"),
        pytest.param(DATA, "bytes=100-200", id="closed-beyond-end"),
        pytest.param(DATA, "bytes=500-", id="start-far-beyond"),
        pytest.param(DATA, "bytes=-0", id="empty-suffix"),
        pytest.param(DATA, "bytes=20-10", id="last-before-first"),
        pytest.param(b"", "bytes=0-", id="empty-body-open"),
        pytest.param(b"", "bytes=-5", id="empty-body-suffix"),
    ],
)
def test_an_unsatisfiable_range_is_416_naming_the_size(data: bytes, header: str) -> None:
    with pytest.raises(RangeNotSatisfiable) as raised:
        serve(data, range_=header)
    assert raised.value.status == 416
    assert raised.value.headers["Content-Range"] == f"bytes */{len(data)}"


def test_a_range_ending_at_an_absurdly_large_position_is_clamped_to_the_body() -> None:
    # 5,000 digits fit in one HTTP header line but exceed Python's int() digit limit (4,300).
    served = serve(range_="bytes=10-" + "9" * 5000)
    assert served.status == 206
    assert served.data == DATA[10:]
    assert served.headers["Content-Range"] == f"bytes 10-99/{len(DATA)}"


@pytest.mark.parametrize("header", ["bytes=" + "9" * 5000 + "-", "bytes=-" + "9" * 5000])
def test_a_range_with_an_absurdly_large_number_is_never_a_crash(header: str) -> None:
    try:
        served = serve(range_=header)
    except RangeNotSatisfiable as exc:
        assert exc.headers["Content-Range"] == f"bytes */{len(DATA)}"
    else:
        assert served.status == 206
        assert served.data == DATA


ZEROS = "0" * 30  # leading zeros are valid DIGITs (RFC 9110) and must not change the number


@pytest.mark.parametrize(
    ("header", "first", "last"),
    [
        pytest.param(f"bytes={ZEROS}10-{ZEROS}19", 10, 19, id="closed"),
        pytest.param(f"bytes={ZEROS}95-", 95, 99, id="open-ended"),
        pytest.param(f"bytes=-{ZEROS}5", 95, 99, id="suffix"),
    ],
)
def test_positions_with_leading_zeros_mean_the_same_bytes(header: str, first: int, last: int) -> None:
    served = serve(range_=header)
    assert served.status == 206
    assert served.data == DATA[first:last + 1]
    assert served.headers["Content-Range"] == f"bytes {first}-{last}/{len(DATA)}"


def test_a_zero_length_suffix_with_leading_zeros_is_still_416() -> None:
    with pytest.raises(RangeNotSatisfiable):
        serve(range_=f"bytes=-{ZEROS}0")


@pytest.mark.parametrize(
    "header",
    [
        pytest.param("bytes=0-1,5-6", id="multi-range"),
        pytest.param("bytes=0-1, 5-6", id="multi-range-spaced"),
        pytest.param("items=0-1", id="other-unit"),
        pytest.param("Bytes=0-1", id="unit-is-case-sensitive-here"),
        pytest.param("bytes=-", id="no-positions"),
        pytest.param("bytes=a-b", id="not-numbers"),
        pytest.param("bytes 0-1", id="no-equals"),
        pytest.param("", id="empty"),
    ],
)
def test_a_range_the_server_does_not_serve_is_ignored_for_the_whole_body(header: str) -> None:
    assert_full(serve(range_=header))


# ---- If-Range ---------------------------------------------------------------------------


def test_if_range_with_the_current_etag_honours_the_range() -> None:
    served = serve(range_="bytes=0-9", if_range=TAG)
    assert served.status == 206
    assert served.data == DATA[:10]


@pytest.mark.parametrize("if_range", ['"stale"', f"W/{TAG}", "Wed, 21 Oct 2015 07:28:00 GMT"])
def test_if_range_that_does_not_match_is_the_whole_body(if_range: str) -> None:
    assert_full(serve(range_="bytes=0-9", if_range=if_range))


def test_a_failed_if_range_never_turns_an_unsatisfiable_range_into_416() -> None:
    assert_full(serve(range_="bytes=500-", if_range='"stale"'))


# ---- properties -------------------------------------------------------------------------


@st.composite
def data_and_span(draw: st.DrawFn) -> tuple[bytes, int, int]:
    data = draw(st.binary(min_size=1, max_size=2048))
    first = draw(st.integers(min_value=0, max_value=len(data) - 1))
    last = draw(st.integers(min_value=first, max_value=len(data) + 100))
    return data, first, last


@given(data_and_span())
def test_any_satisfiable_range_is_exactly_that_slice(case: tuple[bytes, int, int]) -> None:
    data, first, last = case
    served = serve(data, range_=f"bytes={first}-{last}")
    end = min(last, len(data) - 1)
    assert served.status == 206
    assert served.data == data[first:last + 1]
    assert served.headers["Content-Range"] == f"bytes {first}-{end}/{len(data)}"
    assert len(served.data) == end - first + 1


@given(st.binary(min_size=1, max_size=2048), st.integers(min_value=1, max_value=5000))
def test_any_suffix_range_is_the_tail(data: bytes, n: int) -> None:
    served = serve(data, range_=f"bytes=-{n}")
    assert served.status == 206
    assert served.data == data[-n:]
    assert served.headers["Content-Range"] == f"bytes {max(0, len(data) - n)}-{len(data) - 1}/{len(data)}"


@given(st.binary(max_size=512), st.integers(min_value=0, max_value=1000))
def test_a_range_starting_at_or_past_the_end_is_always_416(data: bytes, extra: int) -> None:
    with pytest.raises(RangeNotSatisfiable) as raised:
        serve(data, range_=f"bytes={len(data) + extra}-")
    assert raised.value.headers["Content-Range"] == f"bytes */{len(data)}"


@given(st.binary(max_size=256), st.one_of(st.none(), st.text(max_size=40)), st.one_of(st.none(), st.text(max_size=40)),
       st.one_of(st.none(), st.text(max_size=40)))
def test_any_headers_give_200_206_304_or_416_and_nothing_else(
    data: bytes, if_none_match: str | None, range_: str | None, if_range: str | None
) -> None:
    try:
        served = serve(data, if_none_match=if_none_match, range_=range_, if_range=if_range)
    except RangeNotSatisfiable as exc:
        assert exc.headers["Content-Range"] == f"bytes */{len(data)}"
        return
    assert served.status in {200, 206, 304}
    if served.status == 200:
        assert served.data == data


# ---- the cache of served content ---------------------------------------------------------------


def test_the_cache_holds_at_most_its_size_in_bytes_dropping_the_least_recently_used() -> None:
    cache = content.ContentCache(16 * 1024)
    for i in range(40):
        cache.put("t", "k", f"trg_{i}", bytes([i]) * 32, bytes(1000))
        if i >= 1:
            assert cache.get("k", "trg_0") is not None  # kept warm, so never the one to go
    kept = [i for i in range(40) if cache.get("k", f"trg_{i}") is not None]
    assert 0 in kept and 39 in kept and 1 not in kept
    assert sum(len(cache.get("k", f"trg_{i}")[1]) for i in kept) <= 16 * 1024


def test_an_item_over_a_sixteenth_of_the_cache_is_not_kept() -> None:
    cache = content.ContentCache(16 * 1024)
    cache.put("t", "k", "trg_big", SHA, bytes(1025))
    cache.put("t", "k", "trg_fits", SHA, bytes(900))
    assert cache.get("k", "trg_big") is None
    assert cache.get("k", "trg_fits") == (SHA, bytes(900))


def test_the_cache_is_per_tenant_and_learns_a_keys_tenant_from_the_database() -> None:
    cache = content.ContentCache(16 * 1024)
    assert cache.get("key_a", "trg_x") is None  # a key it has not seen: no cached hash is sent
    cache.put("acme", "key_a", "trg_x", SHA, b"bytes")
    assert cache.get("key_a", "trg_x") == (SHA, b"bytes")
    assert cache.get("key_b", "trg_x") is None, "another tenant's key never sees acme's entry"
    cache.put("globex", "key_b", "trg_y", SHA, b"other")
    assert cache.get("key_b", "trg_x") is None, "nor once its own tenant is known"
    cache.put("acme", "key_a2", "trg_z", SHA, b"z")
    assert cache.get("key_a2", "trg_x") == (SHA, b"bytes"), "keys of one tenant share its entries"
