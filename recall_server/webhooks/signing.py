"""Hook IDs, hook secrets and the X-Hub-Signature-256 format (pure).

A hook ID (`hk_` + 32 URL-safe characters, 192 random bits) names the endpoint; the secret
(256 random bits) is shown once and kept only as its HMAC padded keys (RFC 2104), from which
PostgreSQL computes HMAC-SHA256 with its built-in sha256() (recall_hook_verify in schema.sql).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

HOOK_ID_PATTERN = r"^hk_[A-Za-z0-9_-]{32}\Z"
_HOOK_ID = re.compile(HOOK_ID_PATTERN)
_SIGNATURE = re.compile(r"^sha256=([0-9a-fA-F]{64})\Z")
_BLOCK = 64  # SHA-256's block size: keys are padded (or first hashed) to it


def new_hook() -> tuple[str, str]:
    """A new hook: (its ID, its secret to show once)."""
    return f"hk_{secrets.token_urlsafe(24)}", secrets.token_urlsafe(32)


def is_hook_id(value: str) -> bool:
    return bool(_HOOK_ID.match(value))


def padded_keys(secret: str) -> tuple[bytes, bytes]:
    """The secret's inner and outer padded keys: HMAC(K, m) = sha256(opad || sha256(ipad || m))."""
    key = secret.encode()
    if len(key) > _BLOCK:
        key = hashlib.sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    return bytes(b ^ 0x36 for b in key), bytes(b ^ 0x5C for b in key)


def mac(ipad: bytes, opad: bytes, body: bytes) -> bytes:
    """HMAC-SHA256 from the padded keys: the computation recall_hook_verify runs in SQL."""
    return hashlib.sha256(opad + hashlib.sha256(ipad + body).digest()).digest()


def sign(secret: str, body: bytes) -> str:
    """The X-Hub-Signature-256 header GitHub sends for this body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def parse(header: str | None) -> bytes | None:
    """The MAC an X-Hub-Signature-256 header carries, or None when it is missing or malformed."""
    match = _SIGNATURE.match(header.strip()) if header else None
    return bytes.fromhex(match.group(1)) if match else None


def matches(expected: bytes, given: bytes) -> bool:
    """Constant time: how much of a forged signature is right must not show in the response time."""
    return hmac.compare_digest(expected, given)
