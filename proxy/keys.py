"""Every typed application and request key in one place: the app's dependency registry."""

from __future__ import annotations

from typing import Mapping

from aiohttp import web

from provisioning.audit import AuditWriter
from provisioning.db.pool import Database
from provisioning.events import EventListener
from provisioning.fleet import Fleet
from provisioning.spares import SparePool
from proxy.auth.authenticating import Authenticator, Principal
from proxy.auth.oidc_registry import OIDCRegistry
from proxy.http.draining import Drain
from proxy.http.metrics import Metrics
from proxy.passthrough.express import ExpressLane
from proxy.passthrough.streams import StreamRegistry
from proxy.passthrough.upstream import UpstreamApi
from proxy.settings import Settings

SETTINGS = web.AppKey("settings", Settings)
METRICS = web.AppKey("metrics", Metrics)
DATABASE = web.AppKey("database", Database)
FLEET = web.AppKey("fleet", Fleet)
"""The clusters served: each one's own Kubernetes client (provisioning.kube.client.KubeClient, or a
test's FAKE), public endpoint, labels and kind (provisioning.fleet)."""
EVENTS = web.AppKey("events", EventListener)
AUTHENTICATOR = web.AppKey("authenticator", Authenticator)
OIDC = web.AppKey("oidc", OIDCRegistry)
"""The configured identity providers (discovery, keys, code exchange)."""
AUDIT = web.AppKey("audit", AuditWriter)
"""Audit rows written in the background (the proxy's ProxyWrite and ProxyExec)."""
UPSTREAMS: web.AppKey[Mapping[str, UpstreamApi]] = web.AppKey("upstreams")
"""The pass-through's own clients to the API servers, by cluster: they carry tenant tokens only."""
EXPRESS = web.AppKey("express", ExpressLane)
"""The express lane (proxy.passthrough.express), which proxy.server.front's connections use."""
STREAMS = web.AppKey("streams", StreamRegistry)
"""The replica's open watches, log follows and WebSockets (proxy.passthrough.streams)."""
SPARES = web.AppKey("spares", SparePool)
"""This replica's top-ups of spare binding Secrets (provisioning.spares)."""
DRAIN = web.AppKey("drain", Drain)
"""The graceful stop's state and deadline (proxy.http.draining)."""
METRICS_ADDRESS: web.AppKey[tuple[str, int]] = web.AppKey("metrics_address")
"""Where the metrics listener is bound (host, port), once the app has started."""
AUDIT_ADDRESS: web.AppKey[tuple[str, int]] = web.AppKey("audit_address")
"""Where the cluster audit listener is bound (host, port), once started; absent when it is off."""

# Per-request state set by the middleware and the first authentication.
CONTEXT: web.RequestKey[tuple[str, float]] = web.RequestKey("context")
"""The request's id (for logs and X-Request-Id) and its start (perf_counter), as one entry."""
PRINCIPAL = web.RequestKey("principal", Principal)
