"""The `/k8s/{workspace_id}/...` route: the gate in front of the relays.

The gate decides; the relays (relaying for HTTP, websockets for upgrades)
carry out. Order of checks, cheapest and most fundamental first:
authenticate the caller (cookie + CSRF for writes, exact Origin for cookie
upgrades, or a bearer token), whose session must be one that may proxy (not
a device sign-in's: proxy.auth.scopes); the workspace must be usable by the caller
(provisioning.access); the path must pass the tenant wall
(proxy.passthrough.routing); a stream (a watch, a log follow, any WebSocket:
what the stream registry tracks) opens only while the event listener is
connected, since only its events can cut the stream when a right ends (503
`events_unavailable` otherwise; short requests read the database meanwhile
and stay safe). What passed becomes one immutable Ticket,
handed with the relay service (proxy.passthrough.relay) to the relay that
fits the request. A refused request never reaches the API server.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from aiohttp import web

from provisioning import access
from provisioning.access import Seat
from provisioning.errors import BadRequest, EventsUnavailable, Forbidden, GatewayError, ServiceUnavailable
from provisioning.events import EventListener
from provisioning.models import Member, Workspace
from proxy.auth import scopes
from proxy.auth.authenticating import Authenticator, Principal
from proxy.http.error_answers import KUBERNETES_PREFIX
from proxy.http.requests import client_ip, public_origin, uuid_from
from proxy.passthrough.headers import is_spdy_upgrade
from proxy.passthrough.relay import Relay
from proxy.passthrough.relaying import relay_http, relay_namespace_list
from proxy.passthrough.routing import classify
from proxy.passthrough.tenants import NOT_CACHED, WorkspaceDirectory
from proxy.passthrough.ticket import Ticket
from proxy.passthrough.token_cache import TokenKey
from proxy.passthrough.websockets import relay_websocket

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


ROUTE = PREFIX + "{workspace_id}/{tail:.*}"


def split_target(raw_target: str) -> tuple[str, str, str]:
    """The workspace segment, the path after it and the query of a
    `/k8s/{id}/...` target, exactly as sent (still percent-encoded). Cut at
    the raw slashes: the router matched the route's two segments with their
    escapes decoded (`%30` for `0`) but never a slash's (`%2F`), so they are
    the first two raw segments, whatever their length as sent. Pure."""
    raw_path, _, raw_query = raw_target.partition("?")
    segments = raw_path.split("/", 3)  # "", "k8s", the workspace segment, the rest
    segment = segments[2] if len(segments) > 2 else ""
    return segment, ("/" + segments[3] if len(segments) == 4 else ""), raw_query


class AccountNotMade(ServiceUnavailable):
    """The caller's account in the workspace is not made yet (their first
    request, or the first after a suspension): the full path makes it
    (`Gate.seats`) and decides again; the express lane leaves it to it."""

    code = "account_not_made"

    def __init__(self, seat: Seat) -> None:
        super().__init__("your account in this workspace is being made; retry")
        self.seat = seat


def _read_needs_no_address() -> str | None:
    """A Ticket's client address for a read, which is counted, never audited
    (proxy.passthrough.relay): the express lane has no aiohttp request to
    read an address from."""
    return None


class Gate:
    """The route's handler. Its parts are handed over by the app once they
    exist (`open`), and held here rather than looked up through the request
    and the app for every request."""

    def __init__(self, cors_origins: tuple[str, ...], trusted_proxies: frozenset[str]) -> None:
        self.cors_origins = cors_origins
        self.trusted_proxies = trusted_proxies
        self.authenticator: Authenticator
        self.directory: WorkspaceDirectory
        self.relay: Relay
        self.events: EventListener
        self.seats: Callable[[Seat], Awaitable[Seat]]
        """Makes a member's account (provisioning.members.seat)."""

    is_open = False
    """Whether `open` has handed the parts over (the app is serving)."""

    def open(self, authenticator: Authenticator, directory: WorkspaceDirectory, relay: Relay,
             events: EventListener, seats: Callable[[Seat], Awaitable[Seat]]) -> None:
        self.authenticator, self.directory, self.relay, self.events = authenticator, directory, relay, events
        self.seats = seats
        self.is_open = True

    def add_routes(self, router: web.UrlDispatcher, **options: Any) -> None:
        route = router.add_route("*", ROUTE, self.handle, **options)
        router.add_route("*", PREFIX + "{workspace_id}", self.handle, **options)
        assert route.resource is not None
        self.route_label = route.resource.canonical
        """The metrics label of the route, as aiohttp names it (the express lane counts under it too)."""

    def decide(self, who: Principal, workspace: Workspace | None, member: Member | None, method: str, tail: str,
               query: str, client_address: Callable[[], str | None], cuts_seen: int) -> Ticket:
        """The gate's one decision, for both request paths: may `who` (whose
        membership of `workspace` is `member`) send `method` to
        `tail?query` in `workspace`, and as which account? The Ticket if so;
        the refusal (a GatewayError) if not. Synchronous and from what the
        caller read: the full path reads the caches or the database first,
        the express lane its caches alone. A rule for every request belongs
        here, so neither path can skip it. What the member's role allows is
        the API server's to say: the Ticket carries the member's own account."""
        if not scopes.allows_proxy(who.scope):  # a device sign-in's session holds credentials of its own
            raise Forbidden(scopes.REFUSAL, code=scopes.REFUSAL_CODE)
        seat = access.usable(who.user, workspace, member)
        if seat.service_account_uid is None:
            raise AccountNotMade(seat)
        namespace = seat.workspace.namespace
        decision = classify(method, tail, query, namespace)
        if decision.action == "deny":
            raise Forbidden(decision.reason, code="outside_tenant")
        token_key = TokenKey(namespace, seat.service_account, seat.service_account_uid, who.user.id.int,
                             seat.workspace.cluster)
        return Ticket(who, seat.workspace, decision, method, token_key, client_address, cuts_seen)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """The full path: fill what is not cached, `decide`, then what only
        this path serves (upgrades, streams, the namespace list), each with
        the checks of its own."""
        relay = self.relay
        cuts_seen = relay.streams.cuts  # before the reads that authorise: a cut meanwhile still reaches a stream
        who = await self.authenticator.authenticate(request)
        workspace_id = uuid_from(request.match_info["workspace_id"], "workspace")
        directory = self.directory
        workspace = directory.cached(workspace_id) or await directory.get(workspace_id)
        member = directory.cached_member(workspace_id, who.user.id)
        if member is NOT_CACHED:
            member = await directory.member(workspace_id, who.user.id)
        _, tail, query = split_target(request.raw_path)
        address = lambda: client_ip(request, self.trusted_proxies)  # noqa: E731
        try:
            ticket = self.decide(who, workspace, member, request.method, tail, query, address, cuts_seen)
        except AccountNotMade as missing:
            made = await self.seats(missing.seat)
            ticket = self.decide(who, made.workspace, made.member, request.method, tail, query, address, cuts_seen)
        decision = ticket.decision
        headers = request.headers
        upgrade = "Upgrade" in headers
        if upgrade and is_spdy_upgrade(headers):
            # kubectl falls back to SPDY when its WebSocket is refused, and prints
            # only the fallback's answer: a full workspace must say so here too.
            await relay.streams.require_room(ticket.workspace.id)
            raise BadRequest(SPDY_REFUSED, code="spdy_not_supported")
        if decision.action == "own_namespace_list":  # answered here, never an upgrade
            return await relay_namespace_list(request, ticket, relay)
        websocket = upgrade and headers.get("Upgrade", "").lower() == "websocket"
        if websocket:
            self._check_upgrade_origin(request, who.via_cookie)
        if (websocket or decision.long_running) and not self.events.connected:
            # No event would reach it: a suspension or logout could not cut it.
            raise EventsUnavailable()
        if websocket:
            return await relay_websocket(request, ticket, relay)
        return await relay_http(request, ticket, relay)

    def express_ticket(self, target: str, token: str) -> Ticket | None:
        """`decide` for the express lane: the Ticket of `GET target` with a
        bearer `token` when the caches hold every part of the decision, it
        says yes, and the lane answers such a request: a plain forward
        (streams and the gateway's own answers take the full path). None
        otherwise: the full path then decides again and answers, refusals
        included. No coroutine."""
        principal = self.authenticator.cached_principal(token)
        if principal is None:
            return None
        cuts_seen = self.relay.streams.cuts
        segment, tail, query = split_target(target)
        if not tail or "{" in segment or "}" in segment:
            return None  # the route's {workspace_id} takes no braces (aiohttp: 404), uuid.UUID would
        try:
            workspace_id = uuid_from(segment, "workspace")
            workspace = self.directory.cached(workspace_id)
            if workspace is None:
                return None
            member = self.directory.cached_member(workspace_id, principal.user.id)
            if member is NOT_CACHED:
                return None
            ticket = self.decide(principal, workspace, member, "GET", tail, query, _read_needs_no_address,
                                 cuts_seen)
        except GatewayError:
            return None
        decision = ticket.decision
        return ticket if decision.action == "forward" and not decision.long_running else None

    def _check_upgrade_origin(self, request: web.Request, via_cookie: bool) -> None:
        """Browsers do not apply CORS to WebSocket handshakes: a cookie-borne
        upgrade must come from our own origin or a configured one."""
        if not via_cookie:
            return
        origin = request.headers.get("Origin")
        if origin is None or (origin != public_origin(request, self.trusted_proxies) and origin not in self.cors_origins):
            raise Forbidden("WebSocket upgrades with a session cookie need an allowed Origin", code="origin_refused")
