"""Workspaces: onboarding, listing, kubeconfigs, suspension, the audit log."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from aiohttp import web

from provisioning import access, credentials, onboarding, suspension
from provisioning.access import Seat
from provisioning.clusters import ClusterConfigError, is_cluster_name, parse_labels
from provisioning.db import members as member_rows
from provisioning.db import repositories as repo
from provisioning.errors import BadRequest, ClusterUnavailable, Forbidden, GatewayError, NotFound
from provisioning.kube.client import KubeApi
from provisioning.kubeconfig import (
    FleetContext,
    exec_credential,
    render_exec_kubeconfig,
    render_fleet_kubeconfig,
    render_kubeconfig,
    token_credential,
)
from provisioning.models import IssuedToken, Member, Workspace
from proxy import keys
from proxy.auth.authenticating import Principal
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
from proxy.routes.workspace_pages import decode_page_cursor, encode_page_cursor, page_limit

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
    cluster, labels = _placement_request(body)
    result = await onboarding.onboarded_already(db, who.user, tier, tiers=settings.tiers)
    if result is None:  # only calls that may make something count against the limit
        await ratelimit.enforce(db, app[keys.METRICS], settings.rate_init,
                                {"init": str(who.user.id), "init-address": rate_address(request)})
        result = await onboarding.onboard(db, app[keys.FLEET], who.user, tier, tiers=settings.tiers,
                                          cluster_role=settings.tenant_clusterrole, ip_address=ip,
                                          cluster=cluster, labels=labels)
    return web.json_response(result.workspace.public(result.tier.summary()),
                             status=201 if result.provisioned_now else 200)


def _placement_request(body: dict[str, Any]) -> tuple[str | None, dict[str, str] | None]:
    """`cluster` (a configured name) and `labels` (`{label: value}`) of an
    init body; placement (provisioning.placement) judges them against the tier."""
    cluster = body.get("cluster")
    if cluster is not None:
        cluster = bounded_string(cluster, "cluster", _MAX_TIER_NAME, code="unknown_cluster")
        if not is_cluster_name(cluster):
            raise BadRequest("cluster must be a cluster's name (a lowercase DNS label)", code="unknown_cluster")
    try:
        labels = parse_labels("labels", body.get("labels"))
    except ClusterConfigError as error:
        raise BadRequest(str(error), code="invalid_labels") from None
    return cluster, labels or None


@routes.get("/api/v1/workspaces")
async def list_workspaces(request: web.Request) -> web.Response:
    who = await principal(request)
    db = request.app[keys.DATABASE]
    everything = query_flag(request, "all")
    if everything and not who.user.is_admin:
        raise Forbidden("only administrators may list every workspace", code="admin_required")
    paged = "limit" in request.query or "cursor" in request.query
    if paged and not everything:
        raise BadRequest("limit and cursor page all=true (a caller's own workspaces are one answer)",
                         code="invalid_query")
    if paged:
        cursor = request.query.get("cursor")
        limit = page_limit(request.query.get("limit"))
        page = await repo.workspaces_page(db, decode_page_cursor(cursor) if cursor else None, limit)
        following = encode_page_cursor(page[-1]) if len(page) == limit else None
        return web.json_response({"items": [_with_quota(request, w) for w in page], "next": following})
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


async def _issue(request: web.Request, who: Principal, seat: Seat,
                 kind: str = "kubeconfig") -> tuple[Seat, IssuedToken]:
    """A token of the caller's account in the seat's workspace, minted by
    the workspace's own cluster (provisioning.credentials: audited, bound,
    counted against GATEWAY_RATE_KUBECONFIG)."""
    app = request.app
    settings = app[keys.SETTINGS]
    await issuance_allowed(request, who.user.id)
    return await credentials.issue_token(
        app[keys.DATABASE], app[keys.FLEET].of(seat.workspace).kube, settings.cluster_roles, settings.tiers,
        who.user, seat, ip_address=client_ip(request), ttl_seconds=settings.token_ttl_seconds,
        kind=kind, user_agent=request.headers.get("User-Agent"), spares=app[keys.SPARES])


@routes.get("/api/v1/workspaces/credentials/kubeconfig")
async def kubeconfig(request: web.Request) -> web.Response:
    who = await principal(request)
    app = request.app
    settings, db = app[keys.SETTINGS], app[keys.DATABASE]
    form = request.query.get("format", "token")
    if form not in ("token", "exec"):
        raise BadRequest("format must be token or exec", code="invalid_query")
    if query_flag(request, "all"):
        if request.query.get("workspace_id"):
            raise BadRequest("all=true is every workspace of yours: leave workspace_id out", code="invalid_query")
        text = await _fleet_kubeconfig(request, who, form)
    else:
        seat = await credentials.usable_seat(db, who.user, _workspace_query(request))
        cluster = app[keys.FLEET].of(seat.workspace)
        tls_server_name = cluster.settings.tls_server_name
        if form == "exec":
            # No token in it, so nothing to mint or audit: each token the plugin
            # fetches later is issued (and audited) by the token route.
            text = render_exec_kubeconfig(server=cluster.public_server, ca_base64=cluster.public_ca_base64,
                                          namespace=seat.workspace.namespace,
                                          gateway=settings.gateway_url or public_origin(request),
                                          workspace_id=str(seat.workspace.id), user=seat.service_account,
                                          tls_server_name=tls_server_name)
        else:
            seat, issued = await _issue(request, who, seat)
            text = render_kubeconfig(server=cluster.public_server, ca_base64=cluster.public_ca_base64,
                                     namespace=seat.workspace.namespace, token=issued.token,
                                     user=seat.service_account,
                                     tls_server_name=tls_server_name)
    return web.Response(text=text, content_type="application/x-yaml", headers={
        "Cache-Control": "no-store",
        "Content-Disposition": 'attachment; filename="kubeconfig.yaml"',
    })


async def _fleet_kubeconfig(request: web.Request, who: Principal, form: str) -> str:
    """`?all=true`: one context per workspace the caller may use now
    (provisioned, not suspended), named `<cluster>/<namespace>`, each with
    its cluster's public endpoint and its own credential: a token issued
    through the same path as a single kubeconfig's (each audited, each a
    credential), or the exec plugin. A workspace whose cluster is down is
    left out, and named in a comment at the top: the others are served."""
    app = request.app
    fleet, gateway = app[keys.FLEET], app[keys.SETTINGS].gateway_url or public_origin(request)
    contexts: list[FleetContext] = []
    left_out: list[str] = []
    for workspace, member in await member_rows.memberships_of(app[keys.DATABASE], who.user.id):
        try:
            seat = access.usable(who.user, workspace, member)
        except GatewayError:
            continue  # suspended, or not provisioned yet: nothing to use there
        try:
            cluster = fleet.of(workspace)
            if form == "exec":
                credential = exec_credential(gateway, str(workspace.id))
            else:
                credential = token_credential((await _issue(request, who, seat))[1].token)
        except ClusterUnavailable as down:
            why = " ".join(down.message.split())  # one comment line, whatever the message
            left_out.append(f"# left out: {workspace.cluster}/{workspace.namespace}: {why}\n")
            continue
        contexts.append(FleetContext(cluster.name, workspace.namespace, cluster.public_server,
                                     cluster.public_ca_base64, credential, cluster.settings.tls_server_name))
    return "".join(left_out) + render_fleet_kubeconfig(contexts)


@routes.get("/api/v1/workspaces/credentials/token")
async def token(request: web.Request) -> web.Response:
    """What `tenant-gateway credential` fetches: the kubeconfig's token, audited the same way."""
    who = await principal(request)
    app = request.app
    seat = await credentials.usable_seat(app[keys.DATABASE], who.user, _workspace_query(request))
    cluster = app[keys.FLEET].of(seat.workspace)
    seat, issued = await _issue(request, who, seat, kind="token")
    return web.json_response({
        "token": issued.token, "expires_at": issued.expires_at.isoformat(), "namespace": seat.workspace.namespace,
        "service_account": seat.service_account, "role": seat.role, "credential": issued.issuance_id,
        "cluster": cluster.name, "server": cluster.public_server,
        "certificate_authority_data": cluster.public_ca_base64,
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
    workspace_id = uuid_from(request.match_info["id"], "workspace")
    workspace = await suspension.suspend(app[keys.DATABASE], await _kube_of(request, workspace_id), workspace_id,
                                         who.user, client_ip(request))
    app[keys.METRICS].suspensions.inc()
    return web.json_response({"id": str(workspace.id), "status": workspace.status})


@routes.post(f"/api/v1/workspaces/{ID_SEGMENT}/resume")
async def resume_workspace(request: web.Request) -> web.Response:
    who = await admin(request)
    app = request.app
    workspace_id = uuid_from(request.match_info["id"], "workspace")
    workspace = await suspension.resume(app[keys.DATABASE], await _kube_of(request, workspace_id), workspace_id,
                                        who.user, client_ip(request), tiers=app[keys.SETTINGS].tiers,
                                        cluster_role=app[keys.SETTINGS].tenant_clusterrole)
    return web.json_response({"id": str(workspace.id), "status": workspace.status})


async def _kube_of(request: web.Request, workspace_id: uuid.UUID) -> KubeApi:
    """The client of the workspace's cluster; 404 if there is no such workspace."""
    workspace = await repo.get_workspace(request.app[keys.DATABASE], workspace_id)
    if workspace is None:
        raise NotFound("no such workspace")
    return request.app[keys.FLEET].of(workspace).kube


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
