"""API keys: the caller's own key (any scope), and administration of its tenant's keys (admin scope)."""

from __future__ import annotations

from typing import Any

from litestar import Response, delete, get, patch, post
from litestar.params import FromPath, JSONBody

from recall_server.models import CreateKey, KeyList, KeyView, NewKey, UpdateKey
from recall_server.routes import Caller, problems
from recall_server.service.trace import UNTRACED


@get("/key", responses=problems(401, 503), operation_id="GetOwnKey")
async def own_key(request: Caller) -> KeyView:
    """The key this request carries: its ID, tenant, scope, label, subject and grants (never the secret). Lets
    a client learn what it may do before it tries (the MCP server offers a read key no write tools)."""
    return await request.service.admin.own_key(request.cred)


@post("/admin/keys", status_code=201, responses=problems(400, 401, 403, 413, 422, 503), operation_id="CreateKey")
async def create_key(data: JSONBody[CreateKey], request: Caller) -> Response[NewKey]:
    """Create a key in the caller's tenant. The response is the only time the secret is shown."""
    key = await request.service.admin.create_key(request.cred, data)
    return Response(key, status_code=201, headers={"Location": f"/admin/keys/{key.id}"})


@get("/admin/keys", responses=problems(401, 403, 503), operation_id="ListKeys", opt=UNTRACED)
async def list_keys(request: Caller) -> KeyList:
    return await request.service.admin.list_keys(request.cred)


@patch("/admin/keys/{key_id:str}", responses=problems(400, 401, 403, 404, 413, 422, 503), operation_id="UpdateKey")
async def update_key(key_id: FromPath[str], data: JSONBody[UpdateKey], request: Caller) -> KeyView:
    """Replace a key's grants: they hold from the next request on, in every server process."""
    return await request.service.admin.update_key(request.cred, key_id, data)


@delete("/admin/keys/{key_id:str}", status_code=200, responses=problems(401, 403, 404, 503), operation_id="RevokeKey")
async def revoke_key(key_id: FromPath[str], request: Caller) -> KeyView:
    """Revoke a key; refused from the next request on, in every server process."""
    return await request.service.admin.revoke_key(request.cred, key_id)


ROUTES: list[Any] = [own_key, create_key, list_keys, update_key, revoke_key]
