"""Opaque, signed keyset cursors bound to the list they page (pure).

A cursor is base64url(JSON position) "." base64url(HMAC-SHA256(secret, scope NUL position)[:16]).
The scope (tenant, route, ID, filters) is part of the MAC but not of the token, so a cursor
replayed on another list, or edited by a single bit, fails verification and becomes a 400.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Any

import msgspec

from recall_server.errors import BadRequest

_MAC_BYTES = 16
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

    @staticmethod
    def position(token: str, shape: type) -> Any | None:
        """The position a cursor claims, NOT verified (None if it does not parse): for a read that runs
        before the cursor's scope is known. `decode` it before showing anything the read found."""
        parts = _split(token)
        return _position(parts[0], shape) if parts else None


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
