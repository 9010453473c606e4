"""JSON request bodies: the media types accepted, and decoding that refuses duplicate keys (pure)."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from recall_server.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType

_ENCODER = msgspec.json.Encoder()

# The most keys and array items one JSON text may hold (RECALL_MAX_JSON_ITEMS). Decoding costs time and
# memory per item, not per byte: a 6.6 MB object of 420k keys held a worker's event loop ~350 ms and grew
# its RSS by 200 MB that it never gave back (bench/flood.py). Nesting is bounded by msgspec itself
# (depth < 1000: a RecursionError, a 400 here).
MAX_ITEMS = 100_000


def require_json(content_type: str | None) -> None:
    """application/json or application/<anything>+json (any parameters), else 415."""
    media = (content_type or "").partition(";")[0].strip().lower()
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        raise UnsupportedMediaType(
            f"A JSON body needs Content-Type: application/json (or a +json type), not {media or 'none'}.")


def decode(body: bytes, max_items: int = MAX_ITEMS) -> Any:
    """The JSON value of body; 400 when it is not JSON, nests too deeply, or repeats a key in an object;
    413 when it holds more than `max_items` keys and array items (counted before anything is decoded).

    msgspec keeps the last of repeated keys silently, and which one "wins" differs between parsers,
    so a repeated key is refused (RFC 8259 4: names SHOULD be unique). Fast path, all in C: a ':'
    in a JSON text follows a key or sits inside a string. msgspec's re-encoding of what it kept has
    one per kept key and the same ones inside kept strings; so without \\u escapes (which could
    spell a ':'), equal counts mean no key was dropped. Otherwise the standard library parses the
    body again, exactly, to name the repeated key. Costs ~7 us on a 4 KB body, ~60 us on 40 KB
    (best of 7 runs here; msgspec alone: 5 and 7-65 us).
    """
    if items(body, max_items) > max_items:
        raise PayloadTooLarge(f"The request body holds more than {max_items} keys and array items.")
    try:
        value = msgspec.json.decode(body or b"null")
        if body.find(b"\\u") < 0 and body.count(b":") == _ENCODER.encode(value).count(b":"):
            return value
        json.loads(body, object_pairs_hook=_unique)
    except msgspec.DecodeError as exc:
        raise BadRequest(f"The request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadRequest("The request body is not valid JSON: nested too deeply") from None
    return value


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise BadRequest(f"The request body repeats the key {key!r} in one object.")
        seen[key] = value
    return seen


def items(body: bytes, limit: int) -> int:
    """A lower bound of the keys and array items of a JSON text, above `limit` only when they are: its
    commas outside strings (a container of n members has n - 1), in C, decoding nothing.

    A text with few commas in all is counted at once. Otherwise strings are set aside: with escaped
    backslashes and quotes removed, every `"` opens or closes one. Each string is a key or a value, so
    a member has at most two: more than 2 * `limit` + 1 strings are more than `limit` members (and
    at least half as many); fewer are cheap to split off.
    """
    found = body.count(b",")
    if found <= limit:
        return found
    # (searching for the escapes costs ~6 ms each in 8 MB, finding none: only a text with a backslash has them)
    plain = body.replace(b"\\\\", b"").replace(b'\\"', b"") if b"\\" in body else body
    strings = plain.count(b'"') // 2
    if strings > 2 * limit + 1:
        return strings // 2
    return b"".join(plain.split(b'"')[::2]).count(b",")
