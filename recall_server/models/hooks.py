"""Webhooks: registrations and deliveries."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Struct

from recall_server import ids
from recall_server.models.common import DisplayLabel, Request, ThreadId, Timestamp, TriggerId


HookId = Annotated[str, Meta(pattern=ids.HOOK_ID_PATTERN, examples=["hk_3q2Zr0lYc9tWq1xVvQ8nB7mKp4sHd6eF"])]


class CreateHook(Request, kw_only=True):
    source: Literal["github"]
    label: DisplayLabel = ""


class HookView(Struct):
    """A webhook endpoint as listed: never its secret."""

    id: HookId
    tenant: str
    source: str
    label: str
    url: str  # the path deliveries are POSTed to
    created_at: Timestamp
    revoked_at: Timestamp | None


class NewHook(Struct):
    """A hook just created: the only time its secret is ever shown (GitHub's webhook "Secret")."""

    id: HookId
    tenant: str
    source: str
    label: str
    url: str
    created_at: Timestamp
    secret: str


class HookList(Struct):
    data: list[HookView]


class Delivery(Struct, omit_defaults=True):
    """What a webhook delivery did: a trigger filed (and the thread it is on), or nothing to store."""

    delivery: str
    event: str
    outcome: Literal["filed", "ignored", "pong"]
    action: str | None = None
    thread_id: ThreadId | None = None
    trigger_id: TriggerId | None = None
    # a PR's or issue's state: newer than the thread's (applied), or older (stale: the trigger is still filed)
    thread_state: Literal["applied", "stale"] | None = None
