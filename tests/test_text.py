"""text.py: the one-line rule the API checks and webhook text is cleaned to; free text as stored; memory keys
in one spelling."""

from __future__ import annotations

import re

import msgspec
import pytest

from recall_server import text
from recall_server.models import CreateKey, CreateThread, OneLine
from recall_server.models.hooks import CreateHook


def test_the_api_checks_one_line_fields_with_the_pattern_text_cleans_to() -> None:
    assert OneLine == text.ONE_LINE == r"^[^\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]*\Z"


@pytest.mark.parametrize("raw, clean", [
    ("Fix \u202etxt.exe\u202c \u2066a\u2069 \u200eb\u200f \u061cc\nd\te", "Fix txt.exe a b c d e"),
    ("line\u2028sep\u2029para\x85next\x00nul\x7fdel", "line sep para next nul del"),
    ("  spaced   out  ", "spaced out"),
    ("refu\u200bnds\u00ad \ufeffcafe\u0301\U000e0041", "refunds caf\u00e9"),
    (None, ""),
])
def test_one_line_drops_bidi_controls_and_flattens_breaks(raw: str | None, clean: str) -> None:
    assert text.one_line(raw, 200) == clean
    assert re.match(OneLine, text.one_line(raw, 200))


def test_one_line_cuts_at_the_limit_with_an_ellipsis() -> None:
    assert text.one_line("x" * 300, 200) == "x" * 199 + "…"
    every = "".join(chr(c) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF)
    assert re.match(OneLine, text.one_line(every, 100_000))  # nothing the pattern refuses survives


def test_memory_keys_are_nfc() -> None:
    assert text.memory_key("cafe\u0301") == text.memory_key("caf\u00e9") == "caf\u00e9"
    assert text.memory_key("tone") == "tone"


@pytest.mark.parametrize("char", ["\u200b", "\u00ad", "\ufeff", "\u2060", "\u034f", "\ufe0f", "\u202e",
                                  "\U000e0041", "\x00", "\n", "\u2028"])
def test_memory_keys_refuse_characters_drawn_as_nothing(char: str) -> None:
    with pytest.raises(ValueError, match=f"U\\+{ord(char):04X}"):
        text.memory_key(f"to{char}ne")


def test_a_key_too_long_once_composed_or_empty_is_refused() -> None:
    with pytest.raises(ValueError, match="1-256"):
        text.memory_key("")


@pytest.mark.parametrize("char", ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u034f", "\u180e",
                                  "\ufe0f", "\u3164", "\U000e0041", "\U000e0100", "\U0001d173", "\u202e"])
def test_free_text_drops_characters_drawn_as_nothing(char: str) -> None:
    assert text.free_text(f"{char}refu{char}nds{char}") == "refunds"


def test_free_text_is_nfc_after_dropping() -> None:
    assert text.free_text("cafe\u0301") == text.free_text("caf\u00e9") == "caf\u00e9"
    assert text.free_text("cafe\u200b\u0301") == "caf\u00e9"  # the mark reaches its letter, then composes
    assert text.free_text("plain ascii") == "plain ascii"


def test_every_free_text_field_of_a_request_is_cleaned_as_decoded() -> None:
    thread = msgspec.convert({"title": "refu\u200bnds", "summary": "cafe\u0301"}, CreateThread)
    assert (thread.title, thread.summary) == ("refunds", "caf\u00e9")
    assert msgspec.convert({"scope": "read", "label": "ci\u2060 reader"}, CreateKey).label == "ci reader"
    assert msgspec.convert({"source": "github", "label": "\ufeffrepo"}, CreateHook).label == "repo"
    with pytest.raises(msgspec.ValidationError, match="title must be 1-120 characters"):
        msgspec.convert({"title": "\u00ad"}, CreateThread)
