"""The application factory: wiring only.

`create_app` builds the app from its parts and nothing else: the front
middleware and response hook (proxy.server.front), the routes, the pass-through
gate (proxy.passthrough.gate), and one cleanup context per long-lived
resource, listed in the order they start (they stop in reverse): identity
providers, database, the rate-limit counters' sweeper, event listener and
sessions, the gateway's Kubernetes clients (the fleet: one per cluster,
provisioning.fleet), the audit writer, the pass-through's upstreams (one
per cluster), tenant tokens, open streams, the gate's workspace
directory, the heap trimmer, the metrics listener, the cluster audit
listener (proxy.server.audit_listener). Tests build the very same app. Each stop is bounded by what is
left of the stop's deadline (proxy.http.draining), so a database or API server
that is gone cannot hold the process past GATEWAY_SHUTDOWN_TIMEOUT_SECONDS.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, AsyncIterator, Callable, Mapping, Protocol, TypeVar

from aiohttp import web

from provisioning import members as team
from provisioning.audit import AuditWriter
from provisioning.db.migrate import migrate
from provisioning.db.pool import Database
from provisioning.events import EventListener
from provisioning.fleet import Fleet
from provisioning.kube.client import KubeApi
from provisioning.models import IssuedToken, User
from provisioning.revocation import Sweeper
from provisioning.spares import SparePool
from proxy import keys
from proxy.auth.authenticating import Authenticator
from proxy.auth.oidc_registry import OIDCRegistry
from proxy.auth.oidc_tokens import Identity
from proxy.http.draining import Drain
from proxy.http.metrics import Metrics
from proxy.passthrough import token_minting
from proxy.passthrough.express import MAX_HEAD_BYTES, ExpressLane
from proxy.passthrough.gate import Gate
from proxy.passthrough.relay import Relay
from proxy.passthrough.stream_buffers import StreamBuffers
from proxy.passthrough.stream_slots import StreamSlots
from proxy.passthrough.streams import StreamRegistry
from proxy.passthrough.tenants import WorkspaceDirectory
from proxy.passthrough.token_cache import TenantTokenCache, TokenKey
from proxy.passthrough.upstream import Upstream, UpstreamApi
from proxy.routes import (
    accounts,
    activity,
    clusters,
    console,
    credentials,
    device,
    health,
    members,
    openapi,
    sso,
    workspaces,
)
from proxy.routes.ratelimit import CounterSweeper
from proxy.server.audit_listener import audit_listener
from proxy.server.front import answer_expect, front_middleware, response_hook
from proxy.server.heap import HeapTrimmer, glibc_malloc_trim
from proxy.server.metrics_listener import metrics_listener
from proxy.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")


class KubeSeam(KubeApi, Protocol):
    """What create_app needs of `kube`: all the app asks of its own
    Kubernetes client of a cluster (tenant tokens, onboarding, suspension,
    /readyz's reachability, the endpoint the pass-through's upstream is
    built from). provisioning.kube.client.KubeClient is the real one; a
    test passes a FAKE (tests/fakes/kube.py), which mypy checks against this."""


class UpstreamSeam(UpstreamApi, Protocol):
    """What create_app needs of `upstream`: the pass-through's client to the
    API server (proxy.passthrough.upstream.Upstream is the real one). Tests
    pass a real Upstream pointed at a FAKE API server (tests/fakes/apiserver.py)."""


def by_cluster(settings: Settings, given: T | Mapping[str, T] | None, what: str) -> dict[str, T]:
    """A test seam by cluster name: a mapping as given, or one object for
    a gateway of one cluster."""
    if given is None:
        return {}
    if isinstance(given, Mapping):
        return dict(given)
    if len(settings.clusters) != 1:
        raise ValueError(f"{what}: give one per cluster (a mapping by name) when several are configured")
    return {settings.clusters[0].name: given}


def create_app(settings: Settings, *, database_dsn: str, apply_migrations: bool = True,
               kube: KubeSeam | Mapping[str, KubeSeam] | None = None,
               upstream: UpstreamSeam | Mapping[str, UpstreamSeam] | None = None,
               clock: Callable[[], float] = time.monotonic, express: bool = True) -> web.Application:
    """The test seams, for what a real component cannot be made to do on
    cue: `kube` replaces the gateway's own client and `upstream` the
    pass-through's client to the API server, one each or a mapping by
    cluster name (the caller closes what it passes); `clock` is the monotonic clock of every cache (sessions,
    workspaces, tenant tokens), so tests move time instead of waiting.
    `express=False` serves every request on aiohttp's full path, so tests
    can check that the express lane answers exactly as that path does."""
    drain = Drain(settings.shutdown_drain_seconds, settings.shutdown_timeout_seconds)
    app = web.Application(middlewares=[front_middleware(drain)], client_max_size=settings.max_body_bytes)
    app[keys.SETTINGS] = settings
    app[keys.DRAIN] = drain
    app[keys.METRICS] = metrics = Metrics()
    app.on_response_prepare.append(response_hook(settings, metrics))
    streams = StreamRegistry(metrics, StreamSlots(settings.max_streams_per_workspace, metrics),
                             StreamBuffers(settings.stream_buffer_bytes))
    app[keys.STREAMS] = streams
    metrics.stream_buffered_bytes.set_function(lambda: streams.buffers.total)
    metrics.streams_waiting.set_function(lambda: streams.buffers.waiting)
    metrics.stream_ceiling_waits.set_function(lambda: streams.buffers.ceiling_waits)

    given_kube = by_cluster(settings, kube, "kube")
    given_upstreams = by_cluster(settings, upstream, "upstream")

    async def fetch_token(key: TokenKey) -> IssuedToken:
        try:
            issued = await token_minting.mint(
                app[keys.FLEET].named(key.cluster).kube, key, settings.proxy_token_ttl_seconds,
                app[keys.DATABASE] if settings.audit_listen is not None else None)
        except Exception:
            metrics.cluster_token_request(key.cluster, "error")
            raise
        metrics.cluster_token_request(key.cluster, "success")
        return issued

    tokens = TenantTokenCache(fetch_token, refresh_margin_seconds=settings.proxy_token_refresh_margin_seconds,
                              clock=clock, on_hit=metrics.token_cache_hit,
                              on_fetch=lambda result: metrics.token_requests.labels(result=result).inc())
    gate = Gate(settings.cors_origins, settings.trusted_proxies)
    if express:
        app[keys.EXPRESS] = ExpressLane(gate, drain, metrics)

    async def identity_providers(app: web.Application) -> AsyncIterator[None]:
        app[keys.OIDC] = registry = OIDCRegistry(settings.oidc_providers,
                                                 discovery_seconds=settings.oidc_discovery_seconds,
                                                 timeout_seconds=settings.oidc_timeout_seconds)
        yield
        await registry.close()

    async def database(app: web.Application) -> AsyncIterator[None]:
        db = await Database.connect(database_dsn, max_size=settings.database_pool_size,
                                    timeout=settings.database_timeout_seconds,
                                    on_checkout=metrics.database_checkouts.inc)
        if apply_migrations:
            async with db.connection() as connection:
                await migrate(connection)
        app[keys.DATABASE] = db
        yield
        # Last to stop: everything before may still write (queued audit rows).
        await db.close(timeout=max(0.2, drain.remaining() - 0.5))

    async def rate_limit_counters(app: web.Application) -> AsyncIterator[None]:
        sweeper = CounterSweeper(app[keys.DATABASE])
        await sweeper.start()
        yield
        await sweeper.stop(timeout=min(1.0, max(0.2, drain.remaining() / 4)))

    async def events_and_sessions(app: web.Application) -> AsyncIterator[None]:
        app[keys.EVENTS] = events = EventListener(database_dsn, connect_timeout=settings.database_timeout_seconds)
        app[keys.AUTHENTICATOR] = Authenticator(app[keys.DATABASE], settings.session_secret_value, events,
                                                oidc=app[keys.OIDC], cache_seconds=settings.session_cache_seconds,
                                                clock=clock)
        await events.start()
        # Before the first request: until it is connected, streams are refused. The replica
        # starts anyway, and stays ready (proxy.routes.health): short requests read the database.
        if not await events.wait_connected(settings.database_timeout_seconds):
            log.warning("the event listener is not connected yet: streams are refused until it is; "
                        "/readyz reports it in checks.events and stays ready (short requests go on)")
        yield
        await events.stop(timeout=min(2.0, drain.remaining() / 2))

    async def kubernetes(app: web.Application) -> AsyncIterator[None]:
        app[keys.FLEET] = fleet = await Fleet.connect(settings.clusters, given_kube)

        async def joined(user: User, identity: Identity) -> None:
            await team.signed_in(app[keys.DATABASE], fleet, settings.cluster_roles, settings.tiers, user,
                                 identity.provider, identity.email, identity.groups)

        app[keys.OIDC].on_admitted = joined
        yield
        await fleet.close()  # only the clients it made

    async def audit(app: web.Application) -> AsyncIterator[None]:
        app[keys.AUDIT] = writer = AuditWriter(app[keys.DATABASE], capacity=settings.audit_queue_rows,
                                               wait_seconds=settings.audit_wait_seconds)
        await writer.start()
        yield
        # Most of what is left of the stop: a database that is restarting still gets the rows.
        await writer.stop(timeout=max(0.5, drain.remaining() - 2.0))

    async def credential_sweep(app: web.Application) -> AsyncIterator[None]:
        sweeper = Sweeper(app[keys.DATABASE], app[keys.FLEET])
        app[keys.SPARES] = spares = SparePool(app[keys.DATABASE], settings.credential_spares)
        await sweeper.start()
        yield
        await spares.stop(timeout=min(1.0, max(0.2, drain.remaining() / 4)))
        await sweeper.stop(timeout=min(1.0, max(0.2, drain.remaining() / 4)))

    async def pass_through_upstreams(app: web.Application) -> AsyncIterator[None]:
        made: list[Upstream] = []
        upstreams: dict[str, UpstreamApi] = {}
        for name, cluster in app[keys.FLEET].items():
            if name in given_upstreams:
                upstreams[name] = given_upstreams[name]
                continue
            endpoint = cluster.endpoint
            made.append(Upstream(
                endpoint.server, endpoint.ca_pem, connect_timeout=settings.upstream_connect_timeout_seconds,
                timeout=settings.upstream_timeout_seconds, keepalive_seconds=settings.upstream_keepalive_seconds,
                idle_connections=settings.upstream_idle_connections))
            upstreams[name] = made[-1]
        app[keys.UPSTREAMS] = upstreams
        yield
        for client in made:  # only those it made
            client.close()

    async def tenant_tokens(app: web.Application) -> AsyncIterator[None]:
        yield
        await tokens.aclose()  # fills still running

    async def open_streams(app: web.Application) -> AsyncIterator[None]:
        await streams.slots.start(app[keys.DATABASE])
        drain.on_begin.append(streams.end_all)
        yield
        streams.abort_all()  # anything still open after the drain
        # Briefly: the rows lapse anyway, and queued audit rows come after.
        await streams.slots.stop(timeout=min(1.0, max(0.2, drain.remaining() / 4)))

    async def end_streams(app: web.Application) -> None:
        """Shutdown: ordinary requests get the drain timeout to finish, but a
        watch or exec never finishes by itself: it is ended cleanly (a whole
        last event, then the end of the body; a WebSocket close 1001) and its
        client reconnects elsewhere. `serve` has done this already, at SIGTERM."""
        streams.end_all()

    async def pass_through_gate(app: web.Application) -> AsyncIterator[None]:
        events = app[keys.EVENTS]

        def on_workspace_change(workspace_id: uuid.UUID, namespace: str) -> None:
            # Any change (suspend, resume, new ServiceAccount): forget and cut.
            streams.cut(workspace_id)
            tokens.evict_namespace(namespace)

        def on_identity_event(message: dict[str, Any]) -> None:
            # Logout or a session's revocation, a user's suspension: their streams end.
            if message.get("kind") == "session_revoked":
                streams.cut_session(uuid.UUID(message["id"]))
            elif message.get("kind") == "user_changed":
                streams.cut_user(uuid.UUID(message["id"]))

        events.subscribe(on_identity_event)
        directory = WorkspaceDirectory(app[keys.DATABASE], events, on_change=on_workspace_change,
                                       on_member_change=streams.cut_member, on_reset=streams.cut_all, cache_seconds=settings.workspace_cache_seconds,
                                       clock=clock)
        gate.open(app[keys.AUTHENTICATOR], directory,
                  Relay(app[keys.UPSTREAMS], tokens, streams, app[keys.AUDIT], metrics), events,
                  lambda seat: team.seat(app[keys.DATABASE], app[keys.FLEET].of(seat.workspace).kube,
                                         settings.cluster_roles, seat))
        yield

    async def heap(app: web.Application) -> AsyncIterator[None]:
        trimmer = HeapTrimmer(glibc_malloc_trim(), streams=streams.take_high_water)
        await trimmer.start()
        yield
        await trimmer.stop()

    app.cleanup_ctx.extend([identity_providers, database, rate_limit_counters, events_and_sessions, kubernetes,
                            audit, credential_sweep, pass_through_upstreams, tenant_tokens, open_streams,
                            pass_through_gate, heap,
                            metrics_listener(settings), audit_listener(settings)])
    app.on_shutdown.append(end_streams)
    # Every route answers Expect in the contract's shape (aiohttp asks the route, not the middleware).
    for table in (health.routes, accounts.routes, sso.routes, device.routes, workspaces.routes, members.routes,
                  credentials.routes, activity.routes, clusters.routes, openapi.routes, console.routes):
        for route in table:
            assert isinstance(route, web.RouteDef)
            app.router.add_route(route.method, route.path, route.handler, expect_handler=answer_expect, **route.kwargs)
    gate.add_routes(app.router, expect_handler=answer_expect)
    return app


def handler_args(settings: Settings) -> dict[str, Any]:
    """Server knobs for `serve`: no per-request access log (metrics count
    requests; errors are logged with their request id), header limits large
    enough for kubectl's long Accept headers and big session cookies, idle
    connections closed (GATEWAY_CLIENT_IDLE_SECONDS), and request bodies
    left as sent: aiohttp would inflate a `Content-Encoding: gzip` body, and
    the pass-through would relay the inflated bytes under the client's
    Content-Length, the rest of them read upstream as a request of the
    tenant's making on a connection other tenants share."""
    return {"access_log": None, "max_field_size": MAX_HEAD_BYTES, "max_line_size": MAX_HEAD_BYTES,
            "keepalive_timeout": settings.client_idle_seconds, "auto_decompress": False}
