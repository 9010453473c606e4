"""What a create request's fields become: stored content bytes, timestamps, expiry, labels, its hash, its Outcome."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from recall_server import spill
from recall_server.errors import BadRequest, Unprocessable
from recall_server.models import BEYOND_UTC_YEARS, CreateMemory, CreateReport, CreateThread, CreateTrigger, CreateWorker, Request
from recall_server.rows import Labels, Outcome

Creatable = CreateThread | CreateWorker | CreateTrigger | CreateReport | CreateMemory
json = msgspec.json.encode
_BEYOND_UTC_YEARS = re.compile(BEYOND_UTC_YEARS)


def labels(req: Creatable) -> Labels:
    return Labels(app_id=req.app_id, agent_id=req.agent_id, run_id=req.run_id, namespace="/".join(req.namespace or ()))


def request_hash(req: Request) -> bytes:
    """What tells a retry of a create (same hash) from a clash on its ID."""
    return hashlib.sha256(json(req)).digest()


def encode_content(field: str, value: object, content_type: str | None) -> tuple[str, bytes]:
    """The exact bytes to store and serve: JSON text for JSON types, the string's UTF-8 otherwise."""
    if content_type is None:
        content_type = "text/plain" if isinstance(value, str) else "application/json"
    content_type = content_type.lower()
    if spill.is_json(content_type):
        return content_type, json(value)
    if not isinstance(value, str):
        raise Unprocessable(
            f"{field} must be a JSON string when content_type is {content_type} (only JSON types take other values).",
            field=field,
        )
    return content_type, value.encode()


def _aware(field: str, value: str) -> datetime:
    """An RFC 3339 date-time with its UTC offset, as written; 400 for anything else."""
    try:
        parsed = msgspec.convert(value, datetime)
    except msgspec.ValidationError:
        raise BadRequest(f"{field} must be an RFC 3339 date-time, got {value!r}.", field=field) from None
    if parsed.tzinfo is None:
        raise BadRequest(f"{field} must carry a UTC offset (e.g. 2026-11-30T12:00:00Z).", field=field)
    return parsed


def timestamp(field: str, value: str | None) -> datetime | None:
    """A time to store, in UTC; 400 beyond the years 1-9999 there (Python's datetime holds no other)."""
    if value is None:
        return None
    parsed = _aware(field, value)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise BadRequest(f"{field} is out of range: {value!r}.", field=field) from None


def stored_time(field: str, value: str | None) -> datetime | None:
    """A time to store (a DateTimeText field), in UTC; 400 on the first day of the year 1 with an offset ahead
    of UTC, or on the last of 9999 with one behind it, as openapi.yaml states (models.BEYOND_UTC_YEARS)."""
    if value is not None and _BEYOND_UTC_YEARS.match(value):
        raise BadRequest(f"{field} must lie within the years 1-9999 in UTC: on 0001-01-01 an offset ahead of UTC, "
                         f"on 9999-12-31 one behind it, may not: {value!r}.", field=field)
    return timestamp(field, value)


def bound(field: str, value: str | None) -> datetime | None:
    """A `since` or `until` bound. One beyond the years 1-9999 in UTC (0001-01-01T00:00:00+01:00,
    9999-12-31T23:30:00-01:00: RFC 3339 date-times all the same) is that end of the range: every stored
    time lies within it, so the bound selects what it would have."""
    if value is None:
        return None
    parsed = _aware(field, value)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        return (datetime.min if parsed.year == 1 else datetime.max).replace(tzinfo=UTC)


def expiry(req: Creatable) -> datetime | None:
    """expires_at from `ttl` (seconds from now) or `expires_at`; at most one of them."""
    if req.ttl is not None and req.expires_at is not None:
        raise Unprocessable("Give either ttl or expires_at, not both.")
    if req.ttl is not None:
        return datetime.now(UTC) + timedelta(seconds=req.ttl)
    expires_at = stored_time("expires_at", req.expires_at)
    if expires_at is not None and expires_at <= datetime.now(UTC):
        raise Unprocessable(f"expires_at {req.expires_at} is in the past.", field="expires_at")
    return expires_at


def created(status_new: bool, view: Any, location: str) -> Outcome:
    """A create's outcome: 201 when it made the object, 200 when it was already there (a retry)."""
    return Outcome(status=201 if status_new else 200, body=json(view), object_id=view.id, location=location)
