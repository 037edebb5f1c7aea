"""Issued credentials: who holds which, and revoking one
(provisioning.revocation). The caller sees their own; a workspace's
admins see and revoke the whole workspace's; the gateway's admins all."""

from __future__ import annotations

import uuid

from aiohttp import web

from provisioning import revocation
from provisioning.db import credentials as credential_rows
from provisioning.db import members as member_rows
from provisioning.errors import Forbidden, NotFound
from provisioning.models import User
from proxy import keys
from proxy.http.requests import uuid_from
from proxy.routes.common import ID_SEGMENT, client_ip, principal, query_uuid

routes = web.RouteTableDef()


async def _administers(request: web.Request, user: User, workspace_id: uuid.UUID) -> bool:
    """Whether `user` may see and revoke every credential of the workspace."""
    if user.is_admin:
        return True
    member = await member_rows.membership(request.app[keys.DATABASE], workspace_id, user.id)
    return member is not None and member.role == "admin"


@routes.get("/api/v1/credentials")
async def list_credentials(request: web.Request) -> web.Response:
    who = await principal(request)
    workspace_id, user_id = query_uuid(request, "workspace_id"), query_uuid(request, "user_id")
    if user_id is not None and user_id != who.user.id and not (
            who.user.is_admin or (workspace_id is not None and await _administers(request, who.user, workspace_id))):
        raise Forbidden("only the workspace's admins see other people's credentials", code="workspace_admin_required")
    if user_id is None and not (who.user.is_admin or (
            workspace_id is not None and await _administers(request, who.user, workspace_id))):
        user_id = who.user.id  # the caller's own
    found = await credential_rows.listed(request.app[keys.DATABASE], user_id=user_id, workspace_id=workspace_id)
    return web.json_response([credential.public() for credential in found])


@routes.delete(f"/api/v1/credentials/{ID_SEGMENT}")
async def revoke_credential(request: web.Request) -> web.Response:
    who = await principal(request)
    app = request.app
    credential = await credential_rows.get(app[keys.DATABASE], uuid_from(request.match_info["id"], "credential"))
    if credential is None or (credential.user_id != who.user.id
                              and not await _administers(request, who.user, credential.workspace_id)):
        raise NotFound("no such credential")
    await revocation.revoke(app[keys.DATABASE], app[keys.FLEET].named(credential.cluster).kube, credential, who.user, client_ip(request))
    return web.Response(status=204)
