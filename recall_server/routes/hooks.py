"""Webhook endpoints: their administration (admin scope) and GitHub's deliveries (signed, no key)."""

from __future__ import annotations

from typing import Any

from litestar import Response, delete, get, post
from litestar.params import FromPath, JSONBody

from recall_server.models import CreateHook, Delivery, HookList, HookView, NewHook
from recall_server.routes import Caller, problems, sent
from recall_server.webhooks.deliver import deliver_github as deliver


@post("/admin/hooks", status_code=201, responses=problems(400, 401, 403, 413, 503), operation_id="CreateHook")
async def create_hook(data: JSONBody[CreateHook], request: Caller) -> Response[NewHook]:
    """Create a webhook endpoint in the caller's tenant. The response is the only time its secret is shown."""
    hook = await request.service.admin.create_hook(request.cred, data)
    return Response(hook, status_code=201, headers={"Location": f"/admin/hooks/{hook.id}"})


@get("/admin/hooks", responses=problems(401, 403, 503), operation_id="ListHooks")
async def list_hooks(request: Caller) -> HookList:
    return await request.service.admin.list_hooks(request.cred)


@delete("/admin/hooks/{hook_id:str}", status_code=200, responses=problems(401, 403, 404, 503),
        operation_id="RevokeHook")
async def revoke_hook(hook_id: FromPath[str], request: Caller) -> HookView:
    """Revoke a hook: its deliveries get 404 from the next one on, in every server process."""
    return await request.service.admin.revoke_hook(request.cred, hook_id)


@post("/github/{hook_id:str}", status_code=200, responses=problems(400, 401, 404, 410, 413, 503),
      operation_id="DeliverGitHub", security=[])
async def deliver_github(hook_id: FromPath[str], request: Caller) -> Response[Delivery]:
    """A GitHub webhook delivery. No API key: X-Hub-Signature-256, the HMAC-SHA256 of the raw body under
    the hook's secret, is the credential. 201 when a trigger was filed, 200 for ping and ignored events;
    a redelivery (same X-GitHub-Delivery) answers the first result again and writes nothing."""
    headers = request.headers
    return sent(await deliver(
        request.service.writes, hook_id, headers.get("x-hub-signature-256"), headers.get("x-github-event"),
        headers.get("x-github-delivery"), await request.body(),
    ))


ROUTES: list[Any] = [create_hook, list_hooks, revoke_hook]
DELIVERIES: list[Any] = [deliver_github]  # mounted under /hooks, outside RequireKey, with its own body limit
