"""The `/k8s/{workspace_id}/...` route: the gate in front of the relays.

Order of checks, cheapest and most fundamental first: authenticate the
caller (cookie + CSRF for writes, exact Origin for cookie upgrades, or a
bearer token); the workspace must be the caller's and usable; the path must
pass the tenant wall (proxy.passthrough.routing). Only then is a tenant
token attached and the request relayed. A refused request never reaches the
API server.
"""

from __future__ import annotations

import uuid
from typing import Any, AsyncIterator

from aiohttp import web

from provisioning import access
from provisioning.audit import AuditWriter
from provisioning.errors import BadRequest, Forbidden
from provisioning.kube.tokens import request_token
from provisioning.models import IssuedToken
from proxy import keys
from proxy.errors import KUBERNETES_PREFIX
from proxy.passthrough.headers import is_spdy_upgrade
from proxy.passthrough.relaying import relay_http, relay_namespace_list
from proxy.passthrough.routing import classify
from proxy.passthrough.streams import StreamRegistry
from proxy.passthrough.tenants import WorkspaceDirectory
from proxy.passthrough.ticket import Passthrough, Ticket
from proxy.passthrough.upstream import Upstream
from proxy.passthrough.websockets import relay_websocket
from proxy.routes.common import client_ip, public_origin, uuid_from
from proxy.token_cache import TenantTokenCache, TokenKey

PASSTHROUGH = web.AppKey("passthrough", Passthrough)
# What kubectl prints for a SPDY exec, attach, cp or port-forward. kubectl
# also falls back to SPDY when its WebSocket upgrade is refused (by the API
# server: the first refusal, seen only at -v=4); so the message says both.
SPDY_REFUSED = (
    "the gateway relays exec, attach, cp and port-forward over WebSocket only, not SPDY. "
    "kubectl uses WebSockets by default from 1.30 (exec, attach, cp) and 1.31 (port-forward); "
    "otherwise set KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true (exec, attach, cp) and "
    "KUBECTL_PORT_FORWARD_WEBSOCKETS=true (port-forward). If they are set, kubectl fell back to SPDY "
    "because its WebSocket upgrade failed: run it with -v=4 to see why"
)
PREFIX = KUBERNETES_PREFIX


def _raw_tail(request: web.Request, workspace_segment: str) -> tuple[str, str]:
    """The path after /k8s/{id} and the query, exactly as sent (still percent-encoded)."""
    raw_path, _, raw_query = request.raw_path.partition("?")
    return raw_path[len(PREFIX) + len(workspace_segment):], raw_query


def _check_upgrade_origin(request: web.Request, via_cookie: bool) -> None:
    """Browsers do not apply CORS to WebSocket handshakes: a cookie-borne
    upgrade must come from our own origin or a configured one."""
    if not via_cookie:
        return
    origin = request.headers.get("Origin")
    own = public_origin(request)
    allowed = request.app[keys.SETTINGS].cors_origins
    if origin is None or (origin != own and origin not in allowed):
        raise Forbidden("WebSocket upgrades with a session cookie need an allowed Origin", code="origin_refused")


class _Gate:
    """The route's handler, holding the app's Passthrough once it is built
    (not looked up through the request and the app for every request)."""

    passthrough: Passthrough

    async def handle(self, request: web.Request) -> web.StreamResponse:
        passthrough = self.passthrough
        workspace_segment = request.match_info["workspace_id"]
        who = await passthrough.authenticator.authenticate(request)
        workspace_id = uuid_from(workspace_segment, "workspace")
        workspace = access.usable(who.user, passthrough.directory.cached(workspace_id)
                                  or await passthrough.directory.get(workspace_id))
        decision = classify(request.method, *_raw_tail(request, workspace_segment), workspace.namespace)
        if decision.action == "deny":
            raise Forbidden(decision.reason, code="outside_tenant")
        ticket = Ticket(passthrough, who, workspace, decision, request.method, decision.upstream_path,
                        lambda: client_ip(request))
        headers = request.headers
        upgrade = "Upgrade" in headers
        if upgrade and is_spdy_upgrade(headers):
            # kubectl falls back to SPDY when its WebSocket is refused, and prints
            # only the fallback's answer: a full workspace must say so here too.
            passthrough.streams.require_room(workspace.id)
            raise BadRequest(SPDY_REFUSED, code="spdy_not_supported")
        if decision.action == "own_namespace_list":  # answered here, never an upgrade
            return await relay_namespace_list(request, ticket)
        if upgrade and headers.get("Upgrade", "").lower() == "websocket":
            _check_upgrade_origin(request, who.via_cookie)
            return await relay_websocket(request, ticket)
        return await relay_http(request, ticket)


def setup_passthrough(app: web.Application) -> None:
    gate = _Gate()

    async def passthrough(app: web.Application) -> AsyncIterator[None]:
        settings, kube, metrics = app[keys.SETTINGS], app[keys.KUBE], app[keys.METRICS]

        async def fetch(key: TokenKey) -> IssuedToken:
            return await request_token(kube, key.namespace, key.service_account, settings.proxy_token_ttl_seconds)

        tokens = TenantTokenCache(
            fetch, refresh_margin_seconds=settings.proxy_token_refresh_margin_seconds,
            on_hit=metrics.token_cache_hit,
            on_fetch=lambda result: metrics.token_requests.labels(result=result).inc(),
        )
        streams = StreamRegistry(metrics, settings.max_streams_per_workspace)

        def on_change(workspace_id: uuid.UUID, namespace: str) -> None:
            # Any change (suspend, resume, new ServiceAccount): forget and cut.
            streams.cut(workspace_id)
            tokens.evict_namespace(namespace)

        def on_identity_event(message: dict[str, Any]) -> None:
            # Logout or a session's revocation, a user's suspension: their streams end.
            if message.get("kind") == "session_revoked":
                streams.cut_session(uuid.UUID(message["id"]))
            elif message.get("kind") == "user_changed":
                streams.cut_user(uuid.UUID(message["id"]))

        app[keys.EVENTS].subscribe(on_identity_event)
        directory = WorkspaceDirectory(app[keys.DATABASE], app[keys.EVENTS], on_change=on_change,
                                       on_reset=streams.cut_all)
        upstream = Upstream(kube.endpoint.server, kube.endpoint.ca_pem)
        audit = AuditWriter(app[keys.DATABASE])
        await audit.start()
        app[PASSTHROUGH] = gate.passthrough = Passthrough(upstream, tokens, streams, directory, audit, metrics,
                                                          app[keys.AUTHENTICATOR])
        app[keys.DRAIN].on_begin.append(streams.end_all)
        yield
        streams.cut_all()  # anything still open after the drain
        await tokens.aclose()
        # Most of what is left of the stop: a database that is restarting still gets the rows.
        await audit.stop(timeout=max(0.5, app[keys.DRAIN].remaining() - 2.0))
        upstream.close()

    async def end_streams(app: web.Application) -> None:
        """Shutdown: ordinary requests get the drain timeout to finish, but a
        watch or exec never finishes by itself: it is ended cleanly (a whole
        last event, then the end of the body; a WebSocket close 1001) and its
        client reconnects elsewhere. `serve` has done this already, at SIGTERM."""
        if PASSTHROUGH in app:
            app[PASSTHROUGH].streams.end_all()

    app.cleanup_ctx.append(passthrough)
    app.on_shutdown.append(end_streams)
    app.router.add_route("*", PREFIX + "{workspace_id}/{tail:.*}", gate.handle)
    app.router.add_route("*", PREFIX + "{workspace_id}", gate.handle)
