"""Serving immutable content: strong ETags, conditional GET, single byte ranges, and a cache (pure)."""

from __future__ import annotations

import re

from cachetools import LRUCache

from recall_server.errors import RangeNotSatisfiable

CACHE_CONTROL = "private, max-age=31536000, immutable"
# Payloads and bodies are whatever a client stored, under the content type it chose (text/html,
# image/svg+xml, ...). Served from the API's origin they must never run or render there: no MIME
# sniffing, a sandbox without any source, and a download rather than a page, for every type.
INERT = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "Content-Disposition": "attachment",
}
_RANGE = re.compile(r"^bytes=([0-9]*)-([0-9]*)$")


class Served:
    """What to send: status, the slice of the content, and headers."""

    def __init__(self, status: int, data: bytes, headers: dict[str, str]) -> None:
        self.status = status
        self.data = data
        self.headers = headers


def etag(sha256: bytes) -> str:
    return f'"{sha256.hex()[:32]}"'


def _matches(header: str, tag: str) -> bool:
    candidates = [c.strip().removeprefix("W/") for c in header.split(",")]
    return "*" in candidates or tag in candidates


def _position(digits: str) -> int:
    """A byte position; absurdly long numbers saturate instead of tripping int()'s digit limit."""
    digits = digits.lstrip("0") or "0"  # RFC 9110 allows leading zeros
    return int(digits) if len(digits) <= 18 else 10**18


def _parse_range(header: str, size: int) -> tuple[int, int] | None:
    """The (first, last) byte positions of one range, None to ignore the header (serve 200)."""
    match = _RANGE.match(header.strip())
    if match is None:  # multiple ranges or another unit: RFC 9110 lets a server ignore Range
        return None
    first, last = match.groups()
    if not first and not last:
        return None
    if not first:  # suffix: the last N bytes
        n = _position(last)
        if n == 0 or size == 0:
            raise RangeNotSatisfiable(
                f"Range {header!r} selects no bytes of a {size}-byte body.", headers={"Content-Range": f"bytes */{size}"}
            )
        return max(0, size - n), size - 1
    start = _position(first)
    end = min(_position(last), size - 1) if last else size - 1
    if start >= size or (last and _position(last) < start):
        raise RangeNotSatisfiable(
            f"Range {header!r} starts beyond the {size}-byte body.", headers={"Content-Range": f"bytes */{size}"}
        )
    return start, end


def serve(data: bytes, sha256: bytes, *, if_none_match: str | None, range_: str | None,
          if_range: str | None) -> Served:
    """Apply If-None-Match (304), then Range (206/416) guarded by If-Range, else the whole body."""
    tag = etag(sha256)
    headers = {"ETag": tag, "Cache-Control": CACHE_CONTROL, "Accept-Ranges": "bytes", **INERT}
    if if_none_match is not None and _matches(if_none_match, tag):
        return Served(304, b"", headers)
    if range_ is not None and (if_range is None or if_range.strip() == tag):
        span = _parse_range(range_, len(data))
        if span is not None:
            first, last = span
            headers["Content-Range"] = f"bytes {first}-{last}/{len(data)}"
            return Served(206, data[first:last + 1], headers)
    return Served(200, data, headers)


class ContentCache:
    """Payloads and bodies this process served, by (tenant, object ID), up to `max_bytes` (least
    recently used out).

    Never trusted on its own: each read still asks the database, passing the cached SHA-256; the
    database leaves the bytes out when they match (content is immutable, erasure changes the hash)
    and always answers for existence, deletion, expiry and the key. So a hit saves reading,
    decompressing and sending the bytes, and a deleted object is 410 at once in every process.

    Keyed by tenant, not by ID alone: two tenants may both own trg_X, and were tenant A's cached
    SHA-256 sent with tenant B's read, B could time whether its trg_X holds A's bytes. The tenant is
    known only from the database's answer (the key check), so the cache learns each key's tenant
    there (a key never changes tenant) and a key it has not seen yet reads without a cached hash.
    """

    def __init__(self, max_bytes: int, max_keys: int = 10_000) -> None:
        self.max_item = max_bytes // 16  # one big payload must not flush everything else
        self.items: LRUCache[tuple[str, str], tuple[bytes, bytes]] = LRUCache(
            maxsize=max(1, max_bytes), getsizeof=lambda item: len(item[1]) + 100)
        self.tenants: LRUCache[str, str] = LRUCache(maxsize=max_keys)  # key ID -> its tenant

    def get(self, key_id: str, object_id: str) -> tuple[bytes, bytes] | None:
        """(sha256, data) cached for the key's tenant, if the tenant of this key is known."""
        tenant = self.tenants.get(key_id)
        return None if tenant is None else self.items.get((tenant, object_id))

    def put(self, tenant: str, key_id: str, object_id: str, sha256: bytes, data: bytes) -> None:
        """Keep (sha256, data) for `tenant`, the tenant the database said `key_id` belongs to."""
        self.tenants[key_id] = tenant
        if len(data) <= self.max_item:
            self.items[(tenant, object_id)] = (sha256, data)
