"""Credentials: API keys (generate, parse, hash) and webhook secrets (generate, padded keys) (pure), and the
key checks a process may rely on for a moment. The database decides what a key may do.

A key is `rk_<16 hex id>.<43 base64url chars>` (ids.KEY_RE): the id names the row, the secret (256
random bits) is shown once and stored only as its SHA-256. A fast hash is right here: the secret is
random and long, so there is nothing to brute-force. A webhook's secret (256 random bits) is shown
once too and kept only as its HMAC padded keys (RFC 2104), from which PostgreSQL computes
HMAC-SHA256 with its built-in sha256() (recall_hook_verify in schema.sql).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable

from recall_server import ids
from recall_server.errors import Unauthorized

SCOPES = {"read": 1, "write": 2, "admin": 3}  # each scope includes the ones below it
_BLOCK = 64  # SHA-256's block size: a hook secret is padded (or first hashed) to it

# How long a process relies on a key check it made (KeyCache), and so how long a revocation waits
# before it returns (db/tenancy.after_revoking).
REVOCATION_WINDOW = 0.1


class KeyCache:
    """The keys this process's database checks accepted in the last REVOCATION_WINDOW seconds, each with
    its tenant and scope: a request with one of them binds that tenant without looking the key up again.

    The lookup is a second relation in every request's statement: 26 us of the ~135 us of PostgreSQL
    time a GET /threads/{id} took (get_thread, alternating pairs with the check removed). Revocation stays exact as the
    API and the CLI show it. An entry is used only within the window after the check that made it was
    sent, so that check's snapshot predates any revocation it missed; and a revoke returns only once the
    window has passed since it committed. So no request that starts after a revoke returned is served
    with the key, in any process. A request that races the revoke may be, as it always could. Only a
    revocation written straight into api_keys, bypassing both, takes up to the window to be seen.
    """

    def __init__(self, window: float = REVOCATION_WINDOW, size: int = 4096,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window, self.size, self.clock = window, size, clock
        self.checked: dict[Credential, tuple[float, str, str]] = {}  # -> (check sent at, tenant, access)
        self.used: dict[str, float] = {}  # key ID -> when (time.time()) a check accepted it: for last_used_at

    def get(self, cred: Credential) -> tuple[str, str] | None:
        """(tenant, scope) of a key checked within the window, else None."""
        found = self.checked.get(cred)
        return None if found is None or self.clock() - found[0] >= self.window else found[1:]

    def put(self, cred: Credential, sent: float, tenant: str, scope: str) -> None:
        """Remember a check that accepted `cred`, sent at `sent` (this cache's clock, read before sending)."""
        self.checked.pop(cred, None)  # to the end: the oldest entry goes first when the cache is full
        self.checked[cred] = (sent, tenant, scope)
        if len(self.checked) > self.size:
            del self.checked[next(iter(self.checked))]
        if len(self.used) < self.size or cred.key_id in self.used:
            self.used[cred.key_id] = time.time()

    def take_used(self) -> dict[str, float]:
        """The keys accepted since the last call, each with when it was last (service/admin.py records them)."""
        used, self.used = self.used, {}
        return used

    def keep_used(self, used: dict[str, float]) -> None:
        """Put back uses that could not be recorded (a newer use of a key wins)."""
        for key_id, at in used.items():
            if len(self.used) < self.size and self.used.get(key_id, 0.0) < at:
                self.used[key_id] = at


class Credential:
    """A syntactically valid key from the Authorization header; not yet checked against the database.
    `keys`: the process's KeyCache, when the checks made for this request may be remembered there."""

    __slots__ = ("key_id", "secret_sha256", "keys", "access")

    def __init__(self, key_id: str, secret_sha256: bytes, keys: KeyCache | None = None) -> None:
        self.key_id = key_id
        self.secret_sha256 = secret_sha256
        self.keys = keys
        self.access = ""  # once a check accepted it: its scope, then its grants (db/tenancy.py)

    @property
    def has_grants(self) -> bool:
        return "\n" in self.access

    def __eq__(self, other: object) -> bool:  # equal keys present the same ID and the same secret
        return isinstance(other, Credential) and (self.key_id, self.secret_sha256) == (other.key_id, other.secret_sha256)

    def __hash__(self) -> int:
        return hash((self.key_id, self.secret_sha256))


def generate() -> tuple[str, str, bytes]:
    """A new key: (id, the full key to show once, the hash to store)."""
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    return key_id, f"rk_{key_id}.{secret}", hashlib.sha256(secret.encode()).digest()


def from_headers(headers: list[tuple[bytes, bytes]], keys: KeyCache | None = None) -> Credential:
    """The credential in a request's (ASGI, lower-cased) headers, or 401."""
    return parse(next((v.decode("latin-1") for k, v in headers if k == b"authorization"), None), keys)


def parse(authorization: str | None, keys: KeyCache | None = None) -> Credential:
    """The credential in an `Authorization: Bearer <key>` header, or 401."""
    if not authorization:
        raise Unauthorized("This endpoint needs an API key: send `Authorization: Bearer <key>`.")
    scheme, _, token = authorization.strip().partition(" ")
    match = ids.KEY_RE.match(token.strip()) if scheme.lower() == "bearer" else None
    if match is None:
        raise Unauthorized("The Authorization header does not carry a well-formed recall API key.")
    return Credential(match.group(1), hashlib.sha256(match.group(2).encode()).digest(), keys)


def new_hook_secret() -> str:
    """A webhook's secret, to show once (its ID is ids.new_hook_id's)."""
    return secrets.token_urlsafe(32)


def padded_keys(secret: str) -> tuple[bytes, bytes]:
    """The secret's inner and outer padded keys: HMAC(K, m) = sha256(opad || sha256(ipad || m))."""
    key = secret.encode()
    if len(key) > _BLOCK:
        key = hashlib.sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    return bytes(b ^ 0x36 for b in key), bytes(b ^ 0x5C for b in key)
