"""Opaque, signed keyset cursors bound to the list they page, and the one protocol that uses them (pure).

A cursor is base64url(JSON position) "." base64url(HMAC-SHA256(secret, scope NUL position)[:16]).
The scope (tenant, list, ID, filters) is part of the MAC but not of the token, so a cursor
replayed on another list, or edited by a single bit, fails verification and becomes a 400.

Every list pages through a `Pager`: the page is read from the position the cursor claims, in the
same statement that checks the key and tells its tenant (one round trip); only then is the scope
known, and `Pager.page` (the one call every list makes) verifies that the cursor was signed for this
list of that tenant before anything the read found is shown, cuts the page and signs the next cursor.

A page is cut at `limit` items, and a list whose items can be large (checkpoints, a thread's messages,
memories) also at PAGE_BYTES of their JSON: the page ends, with has_more and a next cursor, before the item
that would take it past the budget; a first item larger than the budget is served alone. Without it, eight
3 MB checkpoints made one 33 MB response and fifty 6 MB ones 400 MB, the worker's event loop stalled for
seconds encoding it (bench/page_bytes.py).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from recall_server.errors import BadRequest

T = TypeVar("T")
PAGE_BYTES = 4 * 1024 * 1024  # a page's items, as JSON, take at most this (but one larger item comes alone)
_MAC_BYTES = 16
_json = msgspec.json.Encoder()
_MAX_TOKEN = 512


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class CursorCodec:
    def __init__(self, secret: bytes) -> None:
        if len(secret) < 32:
            raise ValueError("cursor secret must be at least 32 bytes")
        self._secret = secret

    def _mac(self, scope: str, body: bytes) -> bytes:
        return hmac.new(self._secret, scope.encode() + b"\0" + body, hashlib.sha256).digest()[:_MAC_BYTES]

    def encode(self, scope: str, position: list[Any]) -> str:
        """Sign a keyset position for one list."""
        body = msgspec.json.encode(position)
        return f"{_b64(body)}.{_b64(self._mac(scope, body))}"

    def decode(self, scope: str, token: str, shape: type) -> Any:
        """Verify a cursor for this list and return its position, converted to `shape`."""
        parts = _split(token)
        position = _position(parts[0], shape) if parts else None
        if position is None or not hmac.compare_digest(parts[1], self._mac(scope, parts[0])):
            raise BadRequest(
                "Invalid cursor: it is forged, corrupted, truncated, or was issued for a different list. "
                "Start again without a cursor.",
                cursor=token[:_MAX_TOKEN],
            )
        return position

    def pager(self, token: str | None, shape: type, *list_key: object) -> Pager:
        """The cursor protocol for one request of the list named by `list_key` (its name and filters)."""
        return Pager(self, token, shape, list_key)


class Pager:
    """One list request: `after` is the position the cursor claims, NOT yet verified (None without a
    cursor, or if it does not parse); `page` checks it against the key's tenant."""

    def __init__(self, codec: CursorCodec, token: str | None, shape: type, list_key: tuple[object, ...]) -> None:
        self.codec, self.token, self.shape, self.list_key = codec, token, shape, list_key
        parts = _split(token) if token else None
        self.after: Any | None = _position(parts[0], shape) if parts else None

    def _scope(self, tenant: str) -> str:
        return "\0".join([tenant, *map(str, self.list_key)])

    def page(self, tenant: str, rows: list[T], limit: int, position: Callable[[T], list[Any]],
             tail: list[Any] | None = None, size: Callable[[T], int] | None = None,
             ) -> tuple[list[T], str | None, bool]:
        """The page of `rows` (read from `after` with `limit + 1`) for the key's tenant: (rows shown, the next
        page's cursor, has_more). 400 first, unless the cursor (if any) was signed for this list of this
        tenant. The next cursor is signed at `position(last row shown)`, when there is more; `tail`: a
        log a caller follows (events, trace reads) gets one on its last page too, at `tail` when empty.
        `size`: a row's bytes as the page shows it; then the page also ends within PAGE_BYTES (a read may
        stop early there too, but must then hold the row after the last one that fits: within_budget)."""
        self._verify(tenant)
        shown = rows[:limit] if size is None else within_budget(rows[:limit], size)
        has_more = len(rows) > len(shown)
        if shown and (has_more or tail is not None):
            return shown, self._next(tenant, position(shown[-1])), has_more
        return shown, None if tail is None else self._next(tenant, tail), has_more

    def _verify(self, tenant: str) -> None:
        """400 unless the cursor (if any) was signed for this list of this tenant."""
        if self.token:
            self.codec.decode(self._scope(tenant), self.token, self.shape)

    def _next(self, tenant: str, position: list[Any]) -> str:
        """The signed cursor of the page after `position`."""
        return self.codec.encode(self._scope(tenant), position)


def json_size(item: Any) -> int:
    """An item's size in a page: its bytes as JSON."""
    return len(_json.encode(item))


def within_budget(rows: list[T], size: Callable[[T], int], budget: int = PAGE_BYTES) -> list[T]:
    """The first rows whose sizes add up to at most `budget`; the first row alone when it is larger."""
    total = 0
    for n, row in enumerate(rows):
        total += size(row)
        if total > budget:
            return rows[:max(n, 1)]
    return rows


def _split(token: str) -> tuple[bytes, bytes] | None:
    """(body, mac) of a well-formed token; None if malformed (non-canonical base64 is tampering too)."""
    if len(token) > _MAX_TOKEN or token.count(".") != 1:
        return None
    body_text, mac_text = token.split(".")
    try:
        body, mac = _unb64(body_text), _unb64(mac_text)
    except (binascii.Error, ValueError):
        return None
    if _b64(body) != body_text or _b64(mac) != mac_text:
        return None
    return body, mac


def _position(body: bytes, shape: type) -> Any | None:
    try:
        return msgspec.json.decode(body, type=shape)
    except msgspec.MsgspecError:
        return None
