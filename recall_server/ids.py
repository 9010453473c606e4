"""Every grammar the server reads or mints, built from one table: object IDs by kind, API key, hook and run IDs,
memory kinds; generate, parse and validate them, and name the state an object ID is in (pure)."""

from __future__ import annotations

import os
import re
import secrets
import time
from enum import Enum
from typing import Literal

# ---- object IDs: <prefix>_<1-64 of [A-Za-z0-9_-]> -------------------------------------------------------
# kind -> (its prefix, its collection: the path segment and the table). Every kind's IDs may be shown in a
# stored response (an Idempotency-Key's), so erasing an object scrubs every one of them (shown_in).
OBJECTS = {
    "trigger": ("trg", "triggers"),
    "thread": ("thr", "threads"),
    "worker": ("wkr", "workers"),
    "report": ("rpt", "reports"),
    "memory": ("mem", "memories"),
}
KINDS = {prefix: kind for kind, (prefix, _) in OBJECTS.items()}  # prefix -> kind
PREFIX = {kind: prefix for kind, (prefix, _) in OBJECTS.items()}
PLURAL = {kind: plural for kind, (_, plural) in OBJECTS.items()}

# Patterns end in \Z, not $: Python's $ also matches before a final newline ("thr_x\n" would pass).
# openapi.py publishes them with $, which means exactly \Z in JSON Schema (ECMA 262) regexes.
_BODY = r"[A-Za-z0-9_-]{1,64}"
_ANY_PREFIX = "|".join(PREFIX.values())
ANY_ID_PATTERN = rf"^({_ANY_PREFIX})_{_BODY}\Z"
ID_RE = re.compile(ANY_ID_PATTERN)
# A message of a thread, as search and a memory's sources name it: `<thread ID>/<seq>` (schema.sql,
# recall_message_ref). A source is any object's ID or a message's.
SOURCE_PATTERN = rf"^(({_ANY_PREFIX})_{_BODY}|{OBJECTS['thread'][0]}_{_BODY}/[1-9][0-9]{{0,17}})\Z"
# An ID a stored response shows, or a message's (whose thread it then shows): erasing either drops the response.
_SHOWN = re.compile(rf'"((?:{_ANY_PREFIX})_{_BODY})(?:/[0-9]+)?"'.encode())

_MENTIONED = re.compile(rf"(?<![A-Za-z0-9_-])((?:{_ANY_PREFIX})_{_BODY})(?![A-Za-z0-9_-])")
MENTIONED_MAX = 16


def mentioned(text: str) -> list[str]:
    """The object IDs a text names, in order, each once (at most MENTIONED_MAX)."""
    return list(dict.fromkeys(_MENTIONED.findall(text)))[:MENTIONED_MAX]


# ---- API keys: rk_<16 hex: the key's ID>.<43 base64url: the secret> --------------------------------------
_KEY_ID = r"[0-9a-f]{16}"
KEY_ID_PATTERN = rf"^{_KEY_ID}\Z"
KEY_RE = re.compile(rf"^rk_({_KEY_ID})\.([A-Za-z0-9_-]{{43}})\Z")

# ---- who a key speaks for: a subject (`user:u123`) and grants (namespace patterns; docs/tenancy.md#grants) ----
SUBJECT_PATTERN = r"^[a-z][a-z0-9_-]{0,15}:[A-Za-z0-9_-]{1,64}\Z"
SUBJECT_RE = re.compile(SUBJECT_PATTERN)
_GRANT_SEGMENT = rf"(?:{_BODY}|\{{subject_id\}}|\{{subject_kind\}})"
GRANT_PATTERN = rf"^(?:\*\*|{_GRANT_SEGMENT}(?:/{_GRANT_SEGMENT}){{0,7}}(?:/\*\*)?)\Z"


def grant_lines(grants: list[tuple[str, str]], subject: str | None) -> str:
    """(pattern, access) grants as the key check binds them after the key's scope (schema.sql's
    recall_grant_patterns): a line of the namespaces they let the key read, one of those it may write, each
    as space-separated LIKE patterns, placeholders replaced by the subject's kind and ID; '' for no grants.
    ValueError for a placeholder in the grants of a key without a subject."""
    kind, _, subject_id = (subject or "").partition(":")
    reads: list[str] = []
    writes: list[str] = []
    for pattern, access in grants:
        if "{" in pattern and not subject:
            raise ValueError(f"The grant {pattern!r} names the subject, and the key has none.")
        resolved = pattern.replace("{subject_id}", subject_id).replace("{subject_kind}", kind)
        if resolved == "**":
            like = ["%"]
        elif resolved.endswith("/**"):
            base = resolved[:-3].replace("_", "\\_")
            like = [base, base + "/%"]
        else:
            like = [resolved.replace("_", "\\_")]
        reads += like
        if access == "write":
            writes += like
    return f"\n{' '.join(reads)}\n{' '.join(writes)}" if grants else ""


# ---- webhook endpoints: hk_<32 URL-safe characters: 192 random bits> ------------------------------------
HOOK_ID_PATTERN = r"^hk_[A-Za-z0-9_-]{32}\Z"
_HOOK_ID = re.compile(HOOK_ID_PATTERN)

# ---- runs: the label a read carries in X-Recall-Run (and the run of GET /runs/{run_id}/reads, and MCP's) ----
RUN_PATTERN = r"^[A-Za-z0-9._:-]{1,128}\Z"
RUN_RE = re.compile(RUN_PATTERN)

# ---- memory kinds (schema.sql's memories.kind CHECK holds the same list: tests/test_ids.py) -------------
MemoryKind = Literal["profile", "preference", "fact", "procedure", "scratchpad", "state", "event"]

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


class State(Enum):
    """What an ID names in a tenant: nothing (404), a live object, or a deleted/expired one (410)."""

    MISSING = "missing"
    LIVE = "live"
    GONE = "gone"

    @classmethod
    def of(cls, gone: bool | None) -> State:
        """From a lookup's gone flag, None when no row was found."""
        return cls.MISSING if gone is None else cls.GONE if gone else cls.LIVE


def shown_in(body: bytes) -> list[str]:
    """Every object ID a JSON document shows as a string value or key (what erasing that ID must scrub)."""
    return sorted({m.decode() for m in _SHOWN.findall(body)})


def pattern(kind: str) -> str:
    """The JSON-schema pattern of one kind's IDs."""
    return rf"^{PREFIX[kind]}_{_BODY}\Z"


def kind_of(value: str) -> str | None:
    """The kind a well-formed ID names, or None when the string is not an ID at all."""
    if not isinstance(value, str) or not ID_RE.match(value):
        return None
    return KINDS[value[:3]]


def href(value: str) -> str:
    """The canonical path of a well-formed ID."""
    return f"/{PLURAL[KINDS[value[:3]]]}/{value}"


def new(kind: str) -> str:
    """A fresh ULID-style ID: 48-bit millisecond time then 80 random bits, Crockford base32.

    Time first makes generated IDs sort by creation; the random tail makes collisions
    across processes practically impossible without any coordination.
    """
    n = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        n, r = divmod(n, 32)
        chars.append(_CROCKFORD[r])
    return f"{PREFIX[kind]}_{''.join(reversed(chars))}"


def new_hook_id() -> str:
    """A new webhook endpoint's ID (its secret is auth.new_hook_secret's)."""
    return f"hk_{secrets.token_urlsafe(24)}"


def is_hook_id(value: str) -> bool:
    return bool(_HOOK_ID.match(value))
