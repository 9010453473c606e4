"""A GitHub delivery run: headers checked, the hook's tenant bound, the body planned (github.py), and the plan
written with the public write steps POST /triggers and PATCH /threads use (service/writes.py)."""

from __future__ import annotations

import hashlib

import msgspec

from recall_server import errors, ids
from recall_server.db import queries as q
from recall_server.db import tenancy
from recall_server.errors import BadRequest, require_live
from recall_server.models import CreateTrigger, Delivery
from recall_server.rows import Outcome
from recall_server.service.inputs import json, request_hash
from recall_server.service.writes import Writes
from recall_server.webhooks import github, signing


async def deliver_github(writes: Writes, hook_id: str, signature: str | None, event: str | None,
                         delivery: str | None, body: bytes) -> Outcome:
    """A GitHub delivery, in one transaction bound to the hook's tenant once its signature checks out.

    Headers are checked before anything is read (404 malformed hook ID, 401 no signature, 400 no
    event or delivery ID); then the hook (404) and the HMAC (401); then the body is mapped
    (webhooks/github.py; a body it cannot read is filed raw). The same GUID from the same hook with the
    same bytes answers its first result and writes nothing; with other bytes it is 409.
    """
    if not ids.is_hook_id(hook_id):
        raise errors.unknown_hook(hook_id)
    mac = signing.parse(signature)
    if mac is None:
        raise errors.bad_signature()
    if event is None or not github.is_event(event):
        raise BadRequest("X-GitHub-Event must name the GitHub event (e.g. pull_request).")
    if delivery is None or not github.is_delivery(delivery):
        raise BadRequest("X-GitHub-Delivery must be the delivery's GUID (1-64 of [A-Za-z0-9-]).")
    async with tenancy.hook_session(writes.db, hook_id, "github", body, mac) as (conn, tenant):
        plan = github.plan(event, body)
        result = Delivery(delivery=delivery, event=event, outcome=plan.outcome, action=plan.action)
        if plan.outcome != "filed":
            return Outcome(status=200, body=json(result), object_id="")
        sha = hashlib.sha256(body).digest()
        if not await q.claim_delivery(conn, tenant, hook_id, delivery, sha):
            first, first_sha = await q.delivery_outcome(conn, tenant, hook_id, delivery)
            if first_sha is not None and first_sha != sha:
                raise errors.reused_delivery(delivery)
            return msgspec.structs.replace(first, replayed=True)
        outcome = await _file(writes, conn, tenant, f"{hook_id}/{delivery}", plan, body, sha, result)
        await q.finish_delivery(conn, tenant, hook_id, delivery, outcome)
        return outcome


async def _file(writes: Writes, conn: q.Conn, tenant: str, external_id: str, plan: github.Plan, body: bytes,
                sha: bytes, result: Delivery) -> Outcome:
    """The delivery as a trigger on its thread (made if missing; 410 if gone; none for a raw delivery
    naming no repository), and the thread moved to the PR's or issue's state when that state is newer
    than the last one applied. `external_id` (hook/GUID) already filed, with these bytes, is a
    redelivery whose record was purged: answered with that trigger; with other bytes, 409."""
    thread_id, state = plan.thread_id, plan.state
    made, thread = False, None
    if thread_id is not None:
        made, thread = await q.ensure_thread(conn, tenant, thread_id, plan.thread_title, plan.thread_summary,
                                             state.status if state else "open",
                                             hashlib.sha256(b"github thread\0" + thread_id.encode()).digest())
        require_live(thread, thread_id, "thread")
    req = CreateTrigger(source=plan.source, thread_id=thread_id, summary=plan.summary,
                        content_type=plan.content_type, external_id=external_id)
    created, trigger_id = await writes.file_trigger(conn, tenant, ids.new("trigger"), req, plan.content_type,
                                                    body, None, None, request_hash(req), thread)
    result.thread_id, result.trigger_id = thread_id, trigger_id
    location = f"/triggers/{trigger_id}"
    if not created:
        if await q.payload_sha(conn, tenant, trigger_id) != sha:
            raise errors.reused_delivery(external_id.partition("/")[2])
        return Outcome(status=201, body=json(result), object_id=trigger_id, location=location, replayed=True)
    if state is not None:
        if await q.advance_github_thread(conn, tenant, thread_id, state.updated_at, state.status):
            if not made:
                await writes.change_thread(conn, tenant, thread_id, state.title, state.summary, state.status)
            result.thread_state = "applied"
        else:
            result.thread_state = "stale"
    return Outcome(status=201, body=json(result), object_id=trigger_id, location=location)
