"""The X-Hub-Signature-256 format: sign a body, read a signature, and the HMAC the database computes (pure).

A hook's ID is ids.py's grammar; its secret and the padded keys the database keeps are auth.py's.
"""

from __future__ import annotations

import hashlib
import hmac
import re

_SIGNATURE = re.compile(r"^sha256=([0-9a-fA-F]{64})\Z")


def mac(ipad: bytes, opad: bytes, body: bytes) -> bytes:
    """HMAC-SHA256 from the padded keys (auth.padded_keys): the computation recall_hook_verify runs in SQL."""
    return hashlib.sha256(opad + hashlib.sha256(ipad + body).digest()).digest()


def sign(secret: str, body: bytes) -> str:
    """The X-Hub-Signature-256 header GitHub sends for this body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def parse(header: str | None) -> bytes | None:
    """The MAC an X-Hub-Signature-256 header carries, or None when it is missing or malformed."""
    match = _SIGNATURE.match(header.strip()) if header else None
    return bytes.fromhex(match.group(1)) if match else None
