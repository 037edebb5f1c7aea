"""A workspace's members: who they are, their roles, invitations and
group bindings (provisioning.members does the work; provisioning.access
decides who may ask)."""

from __future__ import annotations

import uuid

from aiohttp import web

from provisioning import access, members, roles
from provisioning.db import members as member_rows
from provisioning.db import repositories as repo
from provisioning.errors import BadRequest
from provisioning.models import Workspace
from proxy import keys
from proxy.auth.authenticating import Principal
from proxy.http.requests import uuid_from
from proxy.routes.common import ID_SEGMENT, bounded_string, client_ip, principal, read_json

routes = web.RouteTableDef()
_MEMBERS = f"/api/v1/workspaces/{ID_SEGMENT}/members"
_USER_SEGMENT = "{user_id:[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}}"
_MAX_EMAIL = 254
_MAX_GROUP = 255
_MAX_PROVIDER = 63


async def _workspace(request: web.Request, *, manage: bool) -> tuple[Principal, Workspace]:
    """The caller and the workspace of the path, if they may see it
    (`manage`: manage its members); 404 or 403 otherwise."""
    who = await principal(request)
    db = request.app[keys.DATABASE]
    workspace_id = uuid_from(request.match_info["id"], "workspace")
    workspace = await repo.get_workspace(db, workspace_id)
    member = await member_rows.membership(db, workspace_id, who.user.id)
    if manage:
        return who, access.manageable(who.user, workspace, member)
    return who, access.visible(who.user, workspace, member)


def _provider(request: web.Request, value: object, *, required: bool) -> str | None:
    if value is None and not required:
        return None
    name = bounded_string(value, "provider", _MAX_PROVIDER, code="unknown_provider")
    if name not in {p.name for p in request.app[keys.SETTINGS].oidc_providers}:
        raise BadRequest(f"no identity provider is named {name!r}", code="unknown_provider")
    return name


def _email(value: object) -> str:
    email = bounded_string(value, "email", _MAX_EMAIL, code="invalid_email").strip()
    local, at, domain = email.rpartition("@")
    if not (at and local and domain) or any(c.isspace() for c in email):
        raise BadRequest("email must be an email address", code="invalid_email")
    return email


@routes.get("/api/v1/roles")
async def list_roles(request: web.Request) -> web.Response:
    """Every member role and what it may do, in words."""
    await principal(request)
    return web.json_response(roles.describe(request.app[keys.SETTINGS].cluster_roles))


@routes.get(_MEMBERS)
async def list_members(request: web.Request) -> web.Response:
    _who, workspace = await _workspace(request, manage=False)
    found, invited, groups = await member_rows.roster(request.app[keys.DATABASE], workspace.id)
    return web.json_response({"members": [m.public() for m in found] + [i.public() for i in invited],
                              "groups": [g.public() for g in groups]})


@routes.post(_MEMBERS)
async def add_member(request: web.Request) -> web.Response:
    who, workspace = await _workspace(request, manage=True)
    body = await read_json(request)
    role = roles.parse_role(body.get("role"))
    db, ip = request.app[keys.DATABASE], client_ip(request)
    if "group" in body:
        if "email" in body:
            raise BadRequest("name either an email or a group, not both", code="invalid_member")
        group = bounded_string(body["group"], "group", _MAX_GROUP, code="invalid_member")
        if not group:
            raise BadRequest("group must not be empty", code="invalid_member")
        provider = _provider(request, body.get("provider"), required=True)
        assert provider is not None
        bound = await members.bind_group(db, workspace, who.user, provider, group, role, ip)
        return web.json_response(bound.public(), status=201)
    if "email" not in body:
        raise BadRequest("name an email or a group (with its provider)", code="invalid_member")
    invitation = await members.invite(db, workspace, who.user, _email(body["email"]), role,
                                      _provider(request, body.get("provider"), required=False), ip,
                                      allowed=members.allowed_members(request.app[keys.SETTINGS].tiers, workspace))
    # The same shape whether or not the email has an account: nobody learns which.
    return web.json_response({"email": invitation.email, "role": invitation.role, "provider": invitation.provider,
                              "status": "invited"}, status=201)


def _user_id(request: web.Request) -> uuid.UUID:
    return uuid_from(request.match_info["user_id"], "member")


@routes.patch(f"{_MEMBERS}/{_USER_SEGMENT}")
async def change_role(request: web.Request) -> web.Response:
    who, workspace = await _workspace(request, manage=True)
    body = await read_json(request)
    app = request.app
    member = await members.change_role(app[keys.DATABASE], app[keys.FLEET].kube_of(workspace), app[keys.SETTINGS].cluster_roles,
                                       workspace, who.user, _user_id(request), roles.parse_role(body.get("role")),
                                       client_ip(request))
    return web.json_response(member.public())


@routes.delete(f"{_MEMBERS}/{_USER_SEGMENT}")
async def remove_member(request: web.Request) -> web.Response:
    """A workspace admin removes a member; any member may leave."""
    user_id = _user_id(request)
    who = await principal(request)
    who, workspace = await _workspace(request, manage=user_id != who.user.id)
    await members.remove(request.app[keys.DATABASE], request.app[keys.FLEET].kube_of(workspace), workspace, who.user, user_id,
                         client_ip(request), why="left" if user_id == who.user.id else "removed")
    return web.Response(status=204)


@routes.delete(f"/api/v1/workspaces/{ID_SEGMENT}/invitations/{{email}}")
async def cancel_invitation(request: web.Request) -> web.Response:
    who, workspace = await _workspace(request, manage=True)
    await members.uninvite(request.app[keys.DATABASE], workspace, who.user, _email(request.match_info["email"]),
                           client_ip(request))
    return web.Response(status=204)


@routes.delete(f"/api/v1/workspaces/{ID_SEGMENT}/groups/{{provider}}/{{group}}")
async def unbind_group(request: web.Request) -> web.Response:
    who, workspace = await _workspace(request, manage=True)
    group = bounded_string(request.match_info["group"], "group", _MAX_GROUP, code="invalid_member")
    provider = bounded_string(request.match_info["provider"], "provider", _MAX_PROVIDER, code="unknown_provider")
    await members.unbind_group(request.app[keys.DATABASE], request.app[keys.FLEET].kube_of(workspace), workspace, who.user, provider,
                               group, client_ip(request))
    return web.Response(status=204)
