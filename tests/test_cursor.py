"""recall_server.cursor: a cursor returns its position on the list it was issued for, and is a 400 anywhere else."""

from __future__ import annotations

import string
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recall_server.cursor import PAGE_BYTES, CursorCodec, json_size, within_budget
from recall_server.errors import BadRequest

SECRET = b"k" * 32
EVENTS = "tenant-a\0events\0thr_x"
THREADS = "tenant-a\0threads\0status=open"
TOKEN_ALPHABET = string.ascii_letters + string.digits + "-_.="


def codec() -> CursorCodec:
    return CursorCodec(SECRET)


def token_for(position: list, scope: str = EVENTS) -> str:
    return codec().encode(scope, position)


def assert_rejected(token: str, scope: str = EVENTS, shape: type = tuple[int]) -> None:
    """Rejection is always a BadRequest: never a position, never another exception type."""
    with pytest.raises(BadRequest) as raised:
        codec().decode(scope, token, shape)
    assert raised.value.status == 400


# ---- round trip -------------------------------------------------------------------------


def test_an_integer_position_round_trips() -> None:
    assert codec().decode(EVENTS, token_for([5]), tuple[int]) == (5,)


def test_a_timestamp_and_id_position_round_trips_as_typed_values() -> None:
    token = codec().encode(THREADS, ["2026-01-01T00:00:00Z", "thr_x"])
    decoded = codec().decode(THREADS, token, tuple[datetime, str])
    assert decoded == (datetime(2026, 1, 1, tzinfo=UTC), "thr_x")


def test_a_datetime_position_round_trips() -> None:
    at = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
    token = codec().encode(THREADS, [at, "thr_y"])
    assert codec().decode(THREADS, token, tuple[datetime, str]) == (at, "thr_y")


@given(st.integers(min_value=0, max_value=2**63 - 1), st.text(max_size=80))
def test_any_position_round_trips_on_its_own_list(seq: int, scope: str) -> None:
    c = codec()
    assert c.decode(scope, c.encode(scope, [seq]), tuple[int]) == (seq,)


def test_tokens_are_url_safe() -> None:
    token = codec().encode(THREADS, ["2026-01-01T00:00:00Z", "thr_" + "~" * 40])
    assert set(token) <= set(string.ascii_letters + string.digits + "-_.")


def test_a_codec_with_the_same_secret_accepts_the_token() -> None:
    """Cursors survive a restart: nothing but the secret is needed to verify them."""
    token = CursorCodec(SECRET).encode(EVENTS, [7])
    assert CursorCodec(bytes(SECRET)).decode(EVENTS, token, tuple[int]) == (7,)


# ---- scope binding ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "other_scope",
    [
        "tenant-b\0events\0thr_x",  # another tenant
        "tenant-a\0events\0thr_y",  # another thread
        "tenant-a\0reports\0thr_x",  # another route
        "tenant-a\0events\0thr_x\0",  # a trailing byte
        "",
    ],
)
def test_a_cursor_replayed_on_another_list_is_a_bad_request(other_scope: str) -> None:
    assert_rejected(token_for([5], EVENTS), other_scope)


def test_a_cursor_signed_with_another_secret_is_a_bad_request() -> None:
    token = CursorCodec(b"z" * 32).encode(EVENTS, [5])
    assert_rejected(token)


def test_a_verified_position_of_the_wrong_shape_is_a_bad_request() -> None:
    assert_rejected(token_for(["not-a-number"]), shape=tuple[int])
    assert_rejected(token_for([1, 2]), shape=tuple[int])
    assert_rejected(token_for([5]), shape=tuple[datetime, str])


def test_the_rejection_names_the_cursor_and_says_what_to_do() -> None:
    token = token_for([5]) + "x"
    with pytest.raises(BadRequest) as raised:
        codec().decode(EVENTS, token, tuple[int])
    assert raised.value.extra["cursor"] == token
    assert "without a cursor" in raised.value.detail


# ---- tampering: every edit is a 400 -------------------------------------------------------


@st.composite
def mutated_tokens(draw: st.DrawFn) -> str:
    """A valid token with one edit: flip, replace, insert or delete a character, or truncate."""
    seq = draw(st.integers(min_value=0, max_value=10**12))
    token = token_for([seq])
    i = draw(st.integers(min_value=0, max_value=len(token) - 1))
    edit = draw(st.sampled_from(["flip", "replace", "insert", "delete", "truncate"]))
    if edit == "flip":
        bit = draw(st.integers(min_value=0, max_value=6))
        mutated = token[:i] + chr(ord(token[i]) ^ (1 << bit)) + token[i + 1:]
    elif edit == "replace":
        char = draw(st.one_of(st.sampled_from(TOKEN_ALPHABET), st.characters()))
        mutated = token[:i] + char + token[i + 1:]
    elif edit == "insert":
        char = draw(st.one_of(st.sampled_from(TOKEN_ALPHABET), st.characters()))
        mutated = token[:i] + char + token[i:]
    elif edit == "delete":
        mutated = token[:i] + token[i + 1:]
    else:
        mutated = token[:i]
    if mutated == token:  # a replace that drew the same character is no edit at all
        mutated = token + "A"
    return mutated


@given(mutated_tokens())
def test_any_single_edit_of_a_valid_token_is_a_bad_request(token: str) -> None:
    assert_rejected(token)


@pytest.mark.parametrize("cut", [1, 2, 5, 10, 22])
def test_a_truncated_token_is_a_bad_request(cut: int) -> None:
    assert_rejected(token_for([5])[:-cut])


def test_padding_or_extra_separators_are_tampering() -> None:
    token = token_for([5])
    body, mac = token.split(".")
    for edited in (f"{body}=.{mac}", f"{body}.{mac}=", f"{body}..{mac}", f"{body}.{mac}.", f".{token}", mac, body):
        assert_rejected(edited)


@given(st.text())
def test_arbitrary_text_is_only_ever_a_bad_request(text: str) -> None:
    assert_rejected(text)


@given(st.text(alphabet=TOKEN_ALPHABET, min_size=1, max_size=120))
def test_token_shaped_garbage_is_only_ever_a_bad_request(text: str) -> None:
    assert_rejected(text)


def test_a_token_over_512_characters_is_rejected_even_if_signed() -> None:
    long_token = token_for(["x" * 600])
    assert len(long_token) > 512
    assert_rejected(long_token, shape=tuple[str])


def test_the_longest_signed_token_within_512_characters_is_still_read() -> None:
    # A 22-character MAC and unpadded base64 make 511 the longest token a position can produce.
    tokens = {len(token_for(["x" * n])): n for n in range(300, 400)}
    n = tokens[max(length for length in tokens if length <= 512)]
    assert len(token_for(["x" * n])) >= 511
    assert codec().decode(EVENTS, token_for(["x" * n]), tuple[str]) == ("x" * n,)


def test_the_rejection_of_a_huge_token_does_not_echo_all_of_it() -> None:
    with pytest.raises(BadRequest) as raised:
        codec().decode(EVENTS, "A" * 100_000, tuple[int])
    assert len(raised.value.extra["cursor"]) <= 512


# ---- secret -----------------------------------------------------------------------------


@pytest.mark.parametrize("length", [0, 1, 16, 31])
def test_a_secret_shorter_than_32_bytes_is_refused(length: int) -> None:
    with pytest.raises(ValueError):
        CursorCodec(b"s" * length)


def test_a_32_byte_secret_is_accepted() -> None:
    CursorCodec(b"s" * 32)


# ---- the pager: the claimed position first, verified once the tenant is known ----------------------


def pager(token: str | None) -> object:
    return codec().pager(token, tuple[int], "events", "thr_x")  # the list EVENTS names, for tenant-a


def seq(n: int) -> list[int]:
    return [n]


def test_a_pager_reads_what_a_cursor_claims_without_trusting_it() -> None:
    """For a read that runs before the scope is known; page() must still verify it before anything is shown."""
    forged = "WzJd." + token_for([1]).split(".")[1]  # [2] under the signature of [1]
    assert pager(token_for([7])).after == (7,)
    assert pager(forged).after == (2,)
    with pytest.raises(BadRequest):
        pager(forged).page("tenant-a", [3, 4], 5, seq)


def test_a_pager_accepts_its_own_tenants_cursor_and_refuses_another_tenants() -> None:
    token = token_for([7])
    assert pager(token).page("tenant-a", [8], 5, seq) == ([8], None, False)
    with pytest.raises(BadRequest):
        pager(token).page("tenant-b", [8], 5, seq)
    with pytest.raises(BadRequest):  # an empty page too: the cursor is verified whatever the read found
        pager(token).page("tenant-b", [], 5, seq)


def test_the_next_cursor_of_a_pager_verifies_on_the_same_list_only() -> None:
    _, token, has_more = pager(None).page("tenant-a", [8, 9, 10], 2, seq)
    assert has_more and token is not None
    assert codec().decode(EVENTS, token, tuple[int]) == (9,)
    assert_rejected(token, scope=THREADS)


def test_a_page_signs_the_last_entry_shown_and_says_whether_there_is_more() -> None:
    at = datetime(2026, 11, 30, tzinfo=UTC)
    rows = [(f"thr_{i}", at) for i in range(3)]
    keyset = codec().pager(None, tuple[datetime, str], "threads")
    entries, next_cursor, has_more = keyset.page("tenant-a", rows, 2, lambda r: [r[1], r[0]])
    assert [e for e, _ in entries] == ["thr_0", "thr_1"] and has_more
    assert codec().decode("tenant-a\0threads", next_cursor, tuple[datetime, str]) == (at, "thr_1")
    assert keyset.page("tenant-a", rows[:2], 2, lambda r: [r[1], r[0]])[1:] == (None, False)


def test_a_followed_log_gets_a_cursor_on_its_last_page_too() -> None:
    """Events and trace reads: a caller polls with the last page's cursor for what arrives later."""
    _, token, has_more = pager(None).page("tenant-a", [4, 5], 5, seq, tail=[0])
    assert not has_more and codec().decode(EVENTS, token, tuple[int]) == (5,)
    _, token, _ = pager(token_for([5])).page("tenant-a", [], 5, seq, tail=[5])
    assert codec().decode(EVENTS, token, tuple[int]) == (5,)


# ---- the page byte budget ----------------------------------------------------------------------------------

MiB = 1024 * 1024


def test_a_page_ends_before_the_item_that_would_pass_the_byte_budget() -> None:
    sizes = {1: 3 * MiB, 2: MiB, 3: 1, 4: 1}  # the first two fill the 4 MiB exactly; the third would pass it
    shown, token, has_more = pager(None).page("tenant-a", [1, 2, 3, 4], 10, seq, size=sizes.__getitem__)
    assert shown == [1, 2] and has_more and codec().decode(EVENTS, token, tuple[int]) == (2,)


def test_an_item_larger_than_the_budget_is_served_alone() -> None:
    big = {1: 9 * MiB, 2: 1}
    shown, token, has_more = pager(None).page("tenant-a", [1, 2], 10, seq, size=big.__getitem__)
    assert shown == [1] and has_more and codec().decode(EVENTS, token, tuple[int]) == (1,)
    assert pager(None).page("tenant-a", [1], 10, seq, size=big.__getitem__) == ([1], None, False)


def test_the_limit_still_cuts_first_and_a_page_within_budget_is_whole() -> None:
    one = lambda n: 1  # noqa: E731
    shown, _, has_more = pager(None).page("tenant-a", [1, 2, 3], 2, seq, size=one)
    assert shown == [1, 2] and has_more
    assert pager(None).page("tenant-a", [1, 2], 2, seq, size=one) == ([1, 2], None, False)


def test_a_followed_log_cut_by_the_budget_says_there_is_more() -> None:
    shown, token, has_more = pager(None).page("tenant-a", [4, 5], 5, seq, tail=[0],
                                              size=lambda n: PAGE_BYTES)
    assert shown == [4] and has_more and codec().decode(EVENTS, token, tuple[int]) == (4,)


@given(st.lists(st.integers(min_value=0, max_value=2 * PAGE_BYTES), max_size=40))
def test_within_budget_is_the_longest_prefix_that_fits_and_never_empty(sizes: list[int]) -> None:
    rows = list(range(len(sizes)))
    kept = within_budget(rows, sizes.__getitem__)
    assert kept == rows[:len(kept)]
    if rows:
        assert kept and (len(kept) == 1 or sum(sizes[:len(kept)]) <= PAGE_BYTES)
        assert len(kept) == len(rows) or sum(sizes[:len(kept) + 1]) > PAGE_BYTES


def test_an_items_size_is_its_json() -> None:
    assert json_size({"data": b"\x00" * 3}) == len(b'{"data":"AAAA"}')


@given(st.text(alphabet=TOKEN_ALPHABET, max_size=80))
def test_the_claimed_position_of_anything_malformed_is_none_never_an_error(token: str) -> None:
    claimed = pager(token).after
    assert claimed is None or (isinstance(claimed, tuple) and isinstance(claimed[0], int))
