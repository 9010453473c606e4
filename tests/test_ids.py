"""recall_server.ids: which strings are IDs, how new IDs are minted, and where each kind lives."""

from __future__ import annotations

import json
import re
import time
import typing
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recall_server import ids

# The grammar, written independently of the module: fullmatch has no "$ before a final newline" trap.
ID_GRAMMAR = r"(trg|thr|wkr|rpt|mem)_[A-Za-z0-9_-]{1,64}"
KIND_BY_PREFIX = {"trg": "trigger", "thr": "thread", "wkr": "worker", "rpt": "report", "mem": "memory"}
PATH_BY_KIND = {"trigger": "/triggers", "thread": "/threads", "worker": "/workers", "report": "/reports",
                "memory": "/memories"}
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ROOT = Path(__file__).resolve().parent.parent

valid_ids = st.from_regex(ID_GRAMMAR, fullmatch=True)


def _millis(generated: str) -> int:
    """The creation time a ULID-style body carries in its first ten characters."""
    n = 0
    for char in generated.split("_", 1)[1][:10]:
        n = n * 32 + CROCKFORD.index(char)
    return n


# ---- kind_of: exactly the grammar, never an exception ------------------------------------


@given(valid_ids)
def test_every_well_formed_id_names_its_kind(value: str) -> None:
    assert ids.kind_of(value) == KIND_BY_PREFIX[value[:3]]


@pytest.mark.parametrize(
    "value",
    [
        "thr_" + "a" * 64,
        "trg_a",
        "wkr_-",
        "rpt__",
        "thr_pr_412",
        "trg_AZaz09_-",
    ],
)
def test_boundary_ids_are_accepted(value: str) -> None:
    assert ids.kind_of(value) == KIND_BY_PREFIX[value[:3]]


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("thr_abc\n", id="trailing-newline"),
        pytest.param("thr_abc\r\n", id="trailing-crlf"),
        pytest.param("\nthr_abc", id="leading-newline"),
        pytest.param(" thr_abc", id="leading-space"),
        pytest.param("thr_abc ", id="trailing-space"),
        pytest.param("thr_" + "a" * 65, id="65-char-body"),
        pytest.param("thr_", id="empty-body"),
        pytest.param("thr", id="prefix-only"),
        pytest.param("", id="empty"),
        pytest.param("thr_١٢٣", id="arabic-indic-digits"),
        pytest.param("thr_１２３", id="fullwidth-digits"),
        pytest.param("thr_é", id="non-ascii-letter"),
        pytest.param("thr_a.b", id="dot-in-body"),
        pytest.param("thr_a/b", id="slash-in-body"),
        pytest.param("THR_abc", id="uppercase-prefix"),
        pytest.param("thx_abc", id="unknown-prefix"),
        pytest.param("thr-abc", id="dash-separator"),
        pytest.param("thr_abc\x00", id="nul"),
    ],
)
def test_near_misses_are_not_ids(value: str) -> None:
    assert ids.kind_of(value) is None


@given(
    st.one_of(
        st.text(),
        # Near misses: a valid ID with anything glued on either side, or its body stretched.
        st.tuples(st.text(max_size=3), valid_ids, st.text(max_size=3)).map("".join),
        st.tuples(valid_ids, st.sampled_from(["\n", "\r\n", "١", "٣", "é", " ", "a" * 64])).map("".join),
    )
)
def test_kind_of_accepts_exactly_the_grammar_and_never_raises(value: str) -> None:
    expected = KIND_BY_PREFIX[value[:3]] if re.fullmatch(ID_GRAMMAR, value) else None
    assert ids.kind_of(value) == expected


@pytest.mark.parametrize("kind", sorted(PATH_BY_KIND))
def test_kind_pattern_accepts_only_that_kind(kind: str) -> None:
    own = ids.new(kind)
    others = [ids.new(k) for k in PATH_BY_KIND if k != kind]
    assert re.search(ids.pattern(kind), own)
    assert not any(re.search(ids.pattern(kind), other) for other in others)


# ---- new: valid, unique, time-ordered ---------------------------------------------------


@pytest.mark.parametrize("kind", sorted(PATH_BY_KIND))
def test_new_ids_are_valid_ids_of_the_requested_kind(kind: str) -> None:
    for _ in range(100):
        generated = ids.new(kind)
        assert ids.kind_of(generated) == kind
        assert len(generated) == 4 + 26


def test_new_ids_are_unique_across_many_calls() -> None:
    generated = [ids.new("thread") for _ in range(20_000)]
    assert len(set(generated)) == len(generated)


def test_new_ids_carry_the_millisecond_they_were_made() -> None:
    before = time.time_ns() // 1_000_000
    generated = ids.new("report")
    after = time.time_ns() // 1_000_000
    assert before <= _millis(generated) <= after


def test_ids_made_in_later_milliseconds_sort_after_earlier_ones() -> None:
    generated = []
    for _ in range(25):
        generated.append(ids.new("trigger"))
        time.sleep(0.002)  # the random tail only orders IDs within one millisecond
    assert sorted(generated) == generated
    assert len({_millis(g) for g in generated}) == len(generated)


# ---- href: every kind has one canonical collection ---------------------------------------


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ("trg_a", "/triggers/trg_a"),
        ("thr_pr_412", "/threads/thr_pr_412"),
        ("wkr_ci-bot", "/workers/wkr_ci-bot"),
        ("rpt_Z9", "/reports/rpt_Z9"),
    ],
)
def test_href_maps_each_kind_to_its_collection(value: str, path: str) -> None:
    assert ids.href(value) == path


@given(valid_ids)
def test_href_is_the_collection_of_the_ids_kind(value: str) -> None:
    assert ids.href(value) == f"{PATH_BY_KIND[KIND_BY_PREFIX[value[:3]]]}/{value}"


# ---- shown_in: what erasing an ID scrubs from stored responses ---------------------------


@pytest.mark.parametrize("kind", sorted(PATH_BY_KIND))
def test_every_object_kind_is_in_the_shown_set(kind: str) -> None:
    """An Idempotency-Key's stored response that shows an ID of any kind is found when that ID is erased."""
    made = ids.new(kind)
    body = json.dumps({"id": made, "data": [{"ref": made}], made: 1}).encode()
    assert ids.shown_in(body) == [made]


def test_only_object_ids_are_shown() -> None:
    body = json.dumps({"key": "rk_0123456789abcdef", "hook": "hk_" + "a" * 32, "run": "run-1", "thr": "thr_"}).encode()
    assert ids.shown_in(body) == []


# ---- the other grammars --------------------------------------------------------------------


def test_hook_ids_are_minted_in_their_grammar() -> None:
    made = {ids.new_hook_id() for _ in range(100)}
    assert len(made) == 100 and all(ids.is_hook_id(h) for h in made)
    assert not ids.is_hook_id("hk_short") and not ids.is_hook_id("hk_" + "a" * 32 + "\n")


@pytest.mark.parametrize("run,ok", [("r", True), ("a" * 128, True), ("run-2026.a:b_c", True), ("a" * 129, False),
                                    ("", False), ("run 1", False), ("run\n", False)])
def test_run_ids_are_1_to_128_label_characters(run: str, ok: bool) -> None:
    assert bool(ids.RUN_RE.match(run)) is ok


def test_memory_kinds_are_the_ones_the_schema_allows() -> None:
    """ids.MemoryKind (what the wire shapes and the routes accept) is the list schema.sql's CHECK allows."""
    check = re.search(r"kind +text NOT NULL CHECK \(kind IN \(([^)]*)\)\)", (ROOT / "schema.sql").read_text())
    assert check is not None
    assert tuple(re.findall(r"'(\w+)'", check.group(1))) == typing.get_args(ids.MemoryKind)
