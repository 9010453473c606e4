"""LangGraph's labels, namespaces and keys in recall's grammar, and LangGraph's filters on what recall returns.

Namespaces: recall's segments are 1-64 of [A-Za-z0-9_-], 1-8 of them. A label is encoded exactly and
reversibly: each character outside [A-Za-z0-9_-], and the "_" of a literal "_-", becomes "_-" + the
lowercase hex of its UTF-8 bytes + "-" (so "user 1" is stored as "user_-20-1"; "user_1" and "my-app" are
stored as they are). A namespace of more than 8 labels or a label longer than 64 once encoded is a ValueError.

Keys: recall's are 1-256 characters on one line. A LangGraph key that is not (empty, longer, spanning
lines, holding control characters), or that starts with "~sha256:", is stored under "~sha256:" + the hex
SHA-256 of its UTF-8, and the key itself is kept in the stored value under "~key" (with the value's own
"~key" member, if it has one, beside it): get, search and list answer the original key and value exactly.
Such items page by their stored key in search.

Filters: LangGraph's comparison (langgraph.store.memory), and the part of a filter recall can apply itself.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Any

from recall_server.models import OneLine

if TYPE_CHECKING:
    from langgraph.store.base import MatchCondition

MAX_SEGMENTS = 8
MAX_SEGMENT_CHARS = 64
_PLAIN = re.compile(r"[A-Za-z0-9_-]")
_ONE_LINE = re.compile(OneLine)
MAX_KEY_CHARS = 256
HASHED = "~sha256:"  # the prefix of a stored key that stands for a key recall cannot hold as it is
KEY_MEMBER = "~key"  # where such an item's value keeps its key
_ESCAPE = re.compile(r"_-([0-9a-f]+)-")


# ---- namespaces ----------------------------------------------------------------------------------


def encode_label(label: str) -> str:
    """One LangGraph namespace label as one recall segment (exact, reversible; see the module docstring)."""
    out: list[str] = []
    for i, ch in enumerate(label):
        literal_marker = ch == "_" and label[i + 1:i + 2] == "-"
        if _PLAIN.fullmatch(ch) and not literal_marker:
            out.append(ch)
        else:
            out.append(f"_-{ch.encode().hex()}-")
    return "".join(out)


def decode_label(segment: str) -> str:
    """The label a segment encodes. A segment not written by this store (an "_-" that is no escape) is kept as is."""
    def one(match: re.Match[str]) -> str:
        hexed = match.group(1)
        try:
            char = bytes.fromhex(hexed).decode()
        except ValueError:
            return match.group(0)
        return char if len(char) == 1 else match.group(0)

    return _ESCAPE.sub(one, segment)


def encode_namespace(namespace: tuple[str, ...]) -> list[str]:
    """A LangGraph namespace as recall segments; ValueError when recall cannot hold it."""
    if not 1 <= len(namespace) <= MAX_SEGMENTS:
        raise ValueError(f"recall namespaces have 1-{MAX_SEGMENTS} labels, got {len(namespace)}: {namespace!r}")
    segments = [encode_label(label) for label in namespace]
    for label, segment in zip(namespace, segments):
        if not 1 <= len(segment) <= MAX_SEGMENT_CHARS:
            raise ValueError(f"namespace label {label!r} is {len(segment)} characters once encoded for recall "
                             f"({segment!r}); recall holds 1-{MAX_SEGMENT_CHARS}")
    return segments


def decode_namespace(segments: list[str]) -> tuple[str, ...]:
    return tuple(decode_label(s) for s in segments)


# ---- keys ----------------------------------------------------------------------------------------


def stored_key(key: str) -> str:
    """The memory key a LangGraph key is stored under: itself, or its hash when recall cannot hold it."""
    if 1 <= len(key) <= MAX_KEY_CHARS and _ONE_LINE.match(key) and not key.startswith(HASHED):
        return key
    return HASHED + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def stored_value(key: str, value: dict[str, Any]) -> dict[str, Any]:
    """The value as stored: with the key inside when it is stored under its hash (see the module docstring)."""
    if stored_key(key) == key:
        return value
    kept = {"key": key, **({"value": value[KEY_MEMBER]} if KEY_MEMBER in value else {})}
    return {**value, KEY_MEMBER: kept}


def original(key: str, value: Any) -> tuple[str, Any]:
    """The LangGraph key and value of a stored pair (the inverse of stored_key and stored_value)."""
    if not key.startswith(HASHED) or not isinstance(value, dict) or not isinstance(value.get(KEY_MEMBER), dict):
        return key, value
    value = dict(value)
    kept = value.pop(KEY_MEMBER)
    if "value" in kept:
        value[KEY_MEMBER] = kept["value"]
    return kept.get("key", key), value


# ---- filters (LangGraph's semantics, applied to what recall returns) -----------------------------


def _compare(value: Any, wanted: Any) -> bool:
    """LangGraph's filter comparison (langgraph.store.memory): nested dicts match key by key, lists exactly,
    operator dicts ($eq $ne $gt $gte $lt $lte) by operator."""
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_operator(value, op, operand) for op, operand in wanted.items())
        return isinstance(value, dict) and all(_compare(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, (list, tuple)):
        return (isinstance(value, (list, tuple)) and len(value) == len(wanted)
                and all(_compare(a, b) for a, b in zip(value, wanted)))
    return bool(value == wanted)


def _operator(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        if value is None:
            return False
        a, b = float(value), float(operand)
        return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]
    raise ValueError(f"Unsupported filter operator: {op}")


def filter_matches(value: dict[str, Any], filter: dict[str, Any] | None) -> bool:
    """Whether a value matches a LangGraph filter: each member by LangGraph's comparison."""
    return not filter or all(_compare(_member(value, k), v) for k, v in filter.items())


def _member(value: dict[str, Any], key: str) -> Any:
    """What a filter key names: the member of that name (as InMemoryStore reads any key, `a.b`, `access-level`
    and `123abc` included), or if there is none and the key is dotted, the path into nested objects (as
    SqliteStore reads `user.access-level`)."""
    if key in value or "." not in key:
        return value.get(key)
    node: Any = value
    for part in key.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _pushable(wanted: Any) -> bool:
    """Whether `{key: wanted}` means exactly what JSON containment (@>) means: strings, and objects of them.
    Numbers are not (True == 1 here, not in JSON), nor None (a missing key matches it here), nor lists (exact
    here, containment in @>): those are checked here only."""
    if isinstance(wanted, dict):
        return bool(wanted) and all(not k.startswith("$") and _pushable(v) for k, v in wanted.items())
    return isinstance(wanted, str)


def value_contains(filter: dict[str, Any] | None) -> dict[str, Any] | None:
    """The part of a filter recall can apply itself (a superset of the matches; the rest is checked here).
    Never the member that keeps a hashed item's key: such an item stores that member's own value elsewhere;
    nor a dotted key, which may name a nested member."""
    pushed = {k: v for k, v in (filter or {}).items() if k != KEY_MEMBER and "." not in k and _pushable(v)}
    return pushed or None


def namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """Whether a namespace meets a LangGraph match condition (a prefix or a suffix; "*" is any label)."""
    path = condition.path
    if len(namespace) < len(path):
        return False
    pairs = zip(namespace, path) if condition.match_type == "prefix" else zip(reversed(namespace), reversed(path))
    return all(p == "*" or n == p for n, p in pairs)


def literal_part(condition: MatchCondition) -> tuple[str, ...]:
    """The labels before the first "*" (a prefix) or after the last one (a suffix): what recall can match."""
    path = tuple(condition.path)
    if condition.match_type == "prefix":
        return path[:path.index("*")] if "*" in path else path
    cut = len(path) - path[::-1].index("*") if "*" in path else 0
    return path[cut:]

