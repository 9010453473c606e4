"""API key administration for the caller's own tenant (admin scope)."""

from __future__ import annotations

from typing import Any

from litestar import Response, delete, get, post
from litestar.params import FromPath, JSONBody

from recall_server.models import CreateKey, KeyList, KeyView, NewKey
from recall_server.routes import Key, Service, problems


@post("/admin/keys", status_code=201, responses=problems(400, 401, 403, 413, 503), operation_id="CreateKey")
async def create_key(data: JSONBody[CreateKey], recall: Service, cred: Key) -> Response[NewKey]:
    """Create a key in the caller's tenant. The response is the only time the secret is shown."""
    key = await recall.create_key(cred, data)
    return Response(key, status_code=201, headers={"Location": f"/admin/keys/{key.id}"})


@get("/admin/keys", responses=problems(401, 403, 503), operation_id="ListKeys")
async def list_keys(recall: Service, cred: Key) -> KeyList:
    return await recall.list_keys(cred)


@delete("/admin/keys/{key_id:str}", status_code=200, responses=problems(401, 403, 404, 503), operation_id="RevokeKey")
async def revoke_key(key_id: FromPath[str], recall: Service, cred: Key) -> KeyView:
    """Revoke a key; refused from the next request on, in every server process."""
    return await recall.revoke_key(cred, key_id)


ROUTES: list[Any] = [create_key, list_keys, revoke_key]
