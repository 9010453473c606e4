"""Generate, parse and validate recall IDs, and name the state an ID is in (pure)."""

from __future__ import annotations

import os
import re
import time
from enum import Enum

KINDS = {"trg": "trigger", "thr": "thread", "wkr": "worker", "rpt": "report", "mem": "memory"}
PREFIX = {kind: prefix for prefix, kind in KINDS.items()}
PLURAL = {"trigger": "triggers", "thread": "threads", "worker": "workers", "report": "reports", "memory": "memories"}

# Patterns end in \Z, not $: Python's $ also matches before a final newline ("thr_x\n" would pass).
# openapi.py publishes them with $, which means exactly \Z in JSON Schema (ECMA 262) regexes.
ANY_ID_PATTERN = r"^(trg|thr|wkr|rpt|mem)_[A-Za-z0-9_-]{1,64}\Z"
ID_RE = re.compile(ANY_ID_PATTERN)

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


_SHOWN = re.compile(rb'"((?:trg|thr|wkr|rpt)_[A-Za-z0-9_-]{1,64})"')


def shown_in(body: bytes) -> list[str]:
    """Every ID a JSON document shows as a string value or key (what erasing that ID must scrub)."""
    return sorted({m.decode() for m in _SHOWN.findall(body)})


def pattern(kind: str) -> str:
    """The JSON-schema pattern of one kind's IDs."""
    return rf"^{PREFIX[kind]}_[A-Za-z0-9_-]{{1,64}}\Z"


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
