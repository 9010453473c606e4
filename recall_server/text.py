"""Text rules: one-line text (what the API accepts, and how text the server writes itself is cleaned to
it), free text as stored (NFC, nothing drawn as nothing) and memory keys (one spelling per key), and the text of a message (pure).

One rule for characters drawn as nothing (Unicode's default-ignorable code points) and for spellings that
look alike (NFC): free text (titles, summaries, names, labels) is cleaned, dropping them and composing to
NFC (free_text), because what a reader sees is all it says; a memory key is composed to NFC and refused if it
holds one (memory_key), because dropping it would merge two keys a client holds apart."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

import msgspec

# What a one-line field refuses: C0, DEL and C1 controls (U+0085 is a line break), U+2028/U+2029, and the
# bidi controls (U+061C, U+200E/F, U+202A-U+202E, U+2066-U+2069) that reorder what a reader sees.
_REFUSED = r"\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
# The pattern of every one-line field of the API (models.OneLine), published in openapi.yaml as written here.
# It ends in \Z, not $: Python's $ also matches before a final newline.
ONE_LINE = rf"^[^{_REFUSED}]*\Z"
_REFUSED_RUN = re.compile(f"[{_REFUSED}]+")

# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt): drawn as nothing (zero-width space
# and joiners, soft hyphen, word joiner, byte order mark, variation selectors, Hangul fillers, tags),
# and surrogates, which are no characters at all.
_IGNORABLE = (  # the Basic Multilingual Plane's part, which a published pattern can name
    r"\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164"
    r"\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
)
# ... and beyond it (shorthand format controls, musical symbol formatting, tags), written as the characters
# themselves: a \u escape names no character past U+FFFF. Python's patterns and ECMA 262's with the u flag
# (JSON Schema's) read each as one code point; openapi.yaml's YAML escapes them (\U000E0000).
_ASTRAL_IGNORABLE = "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
_NOTHING = rf"{_IGNORABLE}{_ASTRAL_IGNORABLE}\ud800-\udfff"
_NOTHING_RUN = re.compile(f"[{_NOTHING}]+")
_INVISIBLE = re.compile(f"[{_NOTHING}{_REFUSED}]")
# The pattern of a memory key (models.MemoryKey), published in openapi.yaml: a schema-valid key is one
# memory_key keeps (surrogates aside, which no JSON text decodes to).
KEY = rf"^[^{_IGNORABLE}{_ASTRAL_IGNORABLE}{_REFUSED}]*\Z"
KEY_MAX = 256


def free_text(text: str) -> str:
    """Free text as stored: every character drawn as nothing dropped (zero-width space and joiners, soft
    hyphen, word joiner, byte order mark, bidi controls, variation selectors, tags, ...), then Unicode NFC,
    so `café` composed and decomposed are one spelling. Dropped first: a combining mark a zero-width space
    held apart from its letter composes with it. Joiners and selectors go too (an emoji sequence shows its
    parts, a ligature its letters): tags and selectors can carry text no reader sees."""
    if text.isascii():
        return text
    return unicodedata.normalize("NFC", _NOTHING_RUN.sub("", text))


def one_line(text: str | None, limit: int) -> str:
    """`text` as the API would accept and store it in a one-line field of `limit` characters: free_text,
    line breaks and other controls as spaces, runs of spaces as one, cut with an ellipsis."""
    flat = " ".join(_REFUSED_RUN.sub(" ", free_text(text or "")).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def memory_key(key: str) -> str:
    """A memory key in its one stored spelling: Unicode NFC, so composed and decomposed `café` are one key.
    ValueError, saying which character and where, for a key that holds a character drawn as nothing (or a
    control): it would look like another key without being it."""
    key = unicodedata.normalize("NFC", key)
    found = _INVISIBLE.search(key)
    if found:
        char = found.group()
        name = unicodedata.name(char, "a control or unassigned character")
        raise ValueError(f"key must not hold invisible or control characters: U+{ord(char):04X} {name} "
                         f"at position {found.start()}.")
    if not 1 <= len(key) <= KEY_MAX:
        raise ValueError(f"key must be 1-{KEY_MAX} characters in Unicode NFC, got {len(key)}.")
    return key


def message_text(content: Any) -> str:
    """The text of a message's content: itself, for text; for JSON, the text of its parts (or of the fields
    a tool call or result keeps it in), else its JSON's start. What a message's preview shows and what
    extraction reads."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        for field in ("content", "text", "output", "arguments"):
            if field in content and content[field] not in (None, "", []):
                return message_text(content[field])
        return msgspec.json.encode(content)[:400].decode(errors="replace")
    if not isinstance(content, list):
        return msgspec.json.encode(content)[:400].decode(errors="replace")
    texts = [p if isinstance(p, str) else p.get("text") for p in content if isinstance(p, str | dict)]
    shown = " ".join(t for t in texts if isinstance(t, str))
    return shown or msgspec.json.encode(content)[:400].decode(errors="replace")
