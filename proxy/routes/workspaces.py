"""Workspaces: onboarding, listing, kubeconfigs, suspension, the audit log."""

from __future__ import annotations

import datetime
import uuid

from aiohttp import web

from provisioning import access, credentials, onboarding, suspension
from provisioning.db import members as member_rows
from provisioning.db import repositories as repo
from provisioning.errors import BadRequest, Forbidden
from provisioning.kubeconfig import render_exec_kubeconfig
from provisioning.models import Member, Workspace
from proxy import keys
from proxy.http.requests import uuid_from
from proxy.routes import ratelimit
from proxy.routes.common import (
    ID_SEGMENT,
    admin,
    bounded_string,
    client_ip,
    principal,
    public_origin,
    query_flag,
    query_uuid,
    rate_address,
    read_json,
)

routes = web.RouteTableDef()
_MAX_TIER_NAME = 63  # a DNS label, as provisioning.tiers requires
_MAX_AUDIT_ACTION = 64
_MAX_AUDIT_CURSOR = 128
_MAX_EMAIL = 254


def _with_quota(request: web.Request, workspace: Workspace, member: Member | None = None) -> dict[str, object]:
    """The workspace's answer, with its quota and, for a member, their role."""
    tier = request.app[keys.SETTINGS].tiers.get(workspace.tier)
    body = workspace.public(tier.summary() if tier else None)
    if member is not None:
        body["role"] = member.role
    return body


@routes.post("/api/v1/workspaces/init")
async def init_workspace(request: web.Request) -> web.Response:
    who = await principal(request)
    app, ip = request.app, client_ip(request)
    settings, db = app[keys.SETTINGS], app[keys.DATABASE]
    body = await read_json(request, allow_empty=True)
    tier = bounded_string(body.get("tier", "basic"), "tier", _MAX_TIER_NAME, code="unknown_tier")
    if tier not in settings.tiers:
        raise BadRequest(f"unknown tier {tier!r}; known: {', '.join(sorted(settings.tiers))}", code="unknown_tier")
    result = await onboarding.onboarded_already(db, who.user, tier, tiers=settings.tiers)
    if result is None:  # only calls that may make something count against the limit
        await ratelimit.enforce(db, app[keys.METRICS], settings.rate_init,
                                {"init": str(who.user.id), "init-address": rate_address(request)})
        result = await onboarding.onboard(db, app[keys.KUBE], who.user, tier, tiers=settings.tiers,
                                          cluster_role=settings.tenant_clusterrole, ip_address=ip)
    return web.json_response(result.workspace.public(result.tier.summary()),
                             status=201 if result.provisioned_now else 200)


@routes.get("/api/v1/workspaces")
async def list_workspaces(request: web.Request) -> web.Response:
    who = await principal(request)
    db = request.app[keys.DATABASE]
    everything = query_flag(request, "all")
    if everything and not who.user.is_admin:
        raise Forbidden("only administrators may list every workspace", code="admin_required")
    if everything:
        return web.json_response([_with_quota(request, w) for w in await repo.all_workspaces(db)])
    return web.json_response([_with_quota(request, w, m) for w, m in await member_rows.memberships_of(db, who.user.id)])


def _workspace_query(request: web.Request) -> uuid.UUID | None:
    raw_id = request.query.get("workspace_id")
    return uuid_from(raw_id, "workspace") if raw_id else None


async def issuance_allowed(request: web.Request, user_id: uuid.UUID) -> None:
    """Each issuance is a TokenRequest and a durable audit row: bounded per
    user (GATEWAY_RATE_KUBECONFIG), whichever route mints it."""
    app = request.app
    await ratelimit.enforce(app[keys.DATABASE], app[keys.METRICS], app[keys.SETTINGS].rate_kubeconfig,
                            {"kubeconfig": str(user_id)})


@routes.get("/api/v1/workspaces/credentials/kubeconfig")
async def kubeconfig(request: web.Request) -> web.Response:
    who = await principal(request)
    app = request.app
    settings, kube, db = app[keys.SETTINGS], app[keys.KUBE], app[keys.DATABASE]
    form = request.query.get("format", "token")
    if form not in ("token", "exec"):
        raise BadRequest("format must be token or exec", code="invalid_query")
    public_server = settings.public_server or kube.endpoint.server
    if form == "exec":
        # No token in it, so nothing to mint or audit: each token the plugin
        # fetches later is issued (and audited) by the token route.
        seat = await credentials.usable_seat(db, who.user, _workspace_query(request))
        text = render_exec_kubeconfig(server=public_server, ca_base64=app[keys.PUBLIC_CA_BASE64],
                                      namespace=seat.workspace.namespace,
                                      gateway=settings.gateway_url or public_origin(request),
                                      workspace_id=str(seat.workspace.id), user=seat.service_account)
    else:
        await issuance_allowed(request, who.user.id)
        text = await credentials.issue_kubeconfig(
            db, kube, settings.cluster_roles, settings.tiers, who.user, _workspace_query(request),
            ip_address=client_ip(request),
            user_agent=request.headers.get("User-Agent"),
            ttl_seconds=settings.token_ttl_seconds, public_server=public_server,
            public_ca_base64=app[keys.PUBLIC_CA_BASE64],
        )
    return web.Response(text=text, content_type="application/x-yaml", headers={
        "Cache-Control": "no-store",
        "Content-Disposition": 'attachment; filename="kubeconfig.yaml"',
    })


@routes.get("/api/v1/workspaces/credentials/token")
async def token(request: web.Request) -> web.Response:
    """What `tenant-gateway credential` fetches: the kubeconfig's token, audited the same way."""
    who = await principal(request)
    app = request.app
    settings, kube = app[keys.SETTINGS], app[keys.KUBE]
    await issuance_allowed(request, who.user.id)
    seat, issued = await credentials.issue_token(
        app[keys.DATABASE], kube, settings.cluster_roles, settings.tiers, who.user, _workspace_query(request),
        ip_address=client_ip(request), ttl_seconds=settings.token_ttl_seconds, kind="token",
        user_agent=request.headers.get("User-Agent"))
    return web.json_response({
        "token": issued.token, "expires_at": issued.expires_at.isoformat(), "namespace": seat.workspace.namespace,
        "service_account": seat.service_account, "role": seat.role, "credential": issued.issuance_id,
        "server": settings.public_server or kube.endpoint.server,
        "certificate_authority_data": app[keys.PUBLIC_CA_BASE64],
    }, headers={"Cache-Control": "no-store"})


@routes.get(f"/api/v1/workspaces/{ID_SEGMENT}")
async def get_workspace(request: web.Request) -> web.Response:
    who = await principal(request)
    db = request.app[keys.DATABASE]
    workspace_id = uuid_from(request.match_info["id"], "workspace")
    workspace = await repo.get_workspace(db, workspace_id)
    member = await member_rows.membership(db, workspace_id, who.user.id)
    return web.json_response(_with_quota(request, access.visible(who.user, workspace, member), member))


@routes.post(f"/api/v1/workspaces/{ID_SEGMENT}/suspend")
async def suspend_workspace(request: web.Request) -> web.Response:
    who = await admin(request)
    app = request.app
    workspace = await suspension.suspend(app[keys.DATABASE], app[keys.KUBE], uuid_from(request.match_info["id"], "workspace"),
                                         who.user, client_ip(request))
    app[keys.METRICS].suspensions.inc()
    return web.json_response({"id": str(workspace.id), "status": workspace.status})


@routes.post(f"/api/v1/workspaces/{ID_SEGMENT}/resume")
async def resume_workspace(request: web.Request) -> web.Response:
    who = await admin(request)
    app = request.app
    workspace = await suspension.resume(app[keys.DATABASE], app[keys.KUBE], uuid_from(request.match_info["id"], "workspace"),
                                        who.user, client_ip(request), tiers=app[keys.SETTINGS].tiers,
                                        cluster_role=app[keys.SETTINGS].tenant_clusterrole)
    return web.json_response({"id": str(workspace.id), "status": workspace.status})


@routes.get("/api/v1/audit")
async def audit(request: web.Request) -> web.Response:
    await admin(request)
    query = request.query
    try:
        limit = min(max(int(query.get("limit", "200")), 1), 1000)
    except ValueError:
        raise BadRequest("limit must be a number", code="invalid_limit") from None
    rows = await repo.query_audit(
        request.app[keys.DATABASE],
        workspace_id=query_uuid(request, "workspace_id"),
        user_id=query_uuid(request, "user_id"),
        action=bounded_string(query.get("action", ""), "action", _MAX_AUDIT_ACTION, code="invalid_query") or None,
        email=bounded_string(query.get("email", "").strip(), "email", _MAX_EMAIL, code="invalid_query") or None,
        before=audit_before(query.get("before", "")),
        limit=limit,
    )
    return web.json_response(rows)


def audit_before(text: str) -> tuple[datetime.datetime, uuid.UUID] | None:
    """The audit route's `before` cursor: the last row's `created_at` and
    `id`, joined by a comma, as the page before gave them. Empty is none;
    anything else malformed is 400 invalid_cursor."""
    if not text:
        return None
    moment, _, row_id = text.partition(",")
    try:
        if len(text) > _MAX_AUDIT_CURSOR:
            raise ValueError
        when = datetime.datetime.fromisoformat(moment.replace("Z", "+00:00"))
        return (when if when.tzinfo is not None else when.replace(tzinfo=datetime.timezone.utc)), uuid.UUID(row_id)
    except ValueError:
        raise BadRequest("before must be a row's created_at and id joined by a comma, as the audit route gave them",
                         code="invalid_cursor") from None
