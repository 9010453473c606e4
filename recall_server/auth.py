"""API key format: generate, parse, hash (pure). The database decides what a key may do.

A key is `rk_<16 hex id>.<43 base64url chars>`: the id names the row, the secret (256 random
bits) is shown once and stored only as its SHA-256. A fast hash is right here: the secret is
random and long, so there is nothing to brute-force.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from recall_server.errors import Unauthorized

SCOPES = {"read": 1, "write": 2, "admin": 3}  # each scope includes the ones below it
_KEY = re.compile(r"^rk_([0-9a-f]{16})\.([A-Za-z0-9_-]{43})$")


class Credential:
    """A syntactically valid key from the Authorization header; not yet checked against the database."""

    __slots__ = ("key_id", "secret_sha256")

    def __init__(self, key_id: str, secret_sha256: bytes) -> None:
        self.key_id = key_id
        self.secret_sha256 = secret_sha256

    def __eq__(self, other: object) -> bool:  # equal keys present the same ID and the same secret
        return isinstance(other, Credential) and (self.key_id, self.secret_sha256) == (other.key_id, other.secret_sha256)

    def __hash__(self) -> int:
        return hash((self.key_id, self.secret_sha256))


def generate() -> tuple[str, str, bytes]:
    """A new key: (id, the full key to show once, the hash to store)."""
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    return key_id, f"rk_{key_id}.{secret}", hashlib.sha256(secret.encode()).digest()


def from_headers(headers: list[tuple[bytes, bytes]]) -> Credential:
    """The credential in a request's (ASGI, lower-cased) headers, or 401."""
    return parse(next((v.decode("latin-1") for k, v in headers if k == b"authorization"), None))


def parse(authorization: str | None) -> Credential:
    """The credential in an `Authorization: Bearer <key>` header, or 401."""
    if not authorization:
        raise Unauthorized("This endpoint needs an API key: send `Authorization: Bearer <key>`.")
    scheme, _, token = authorization.strip().partition(" ")
    match = _KEY.match(token.strip()) if scheme.lower() == "bearer" else None
    if match is None:
        raise Unauthorized("The Authorization header does not carry a well-formed recall API key.")
    return Credential(match.group(1), hashlib.sha256(match.group(2).encode()).digest())
