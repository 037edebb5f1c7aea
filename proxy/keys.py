"""Every typed application and request key in one place: the app's dependency registry."""

from __future__ import annotations

from aiohttp import web

from provisioning.audit import AuditWriter
from provisioning.db.pool import Database
from provisioning.events import EventListener
from provisioning.kube.client import KubeApi
from proxy.auth.authenticating import Authenticator, Principal
from proxy.auth.oidc_registry import OIDCRegistry
from proxy.http.draining import Drain
from proxy.http.metrics import Metrics
from proxy.passthrough.express import ExpressLane
from proxy.passthrough.upstream import UpstreamApi
from proxy.settings import Settings

SETTINGS = web.AppKey("settings", Settings)
METRICS = web.AppKey("metrics", Metrics)
DATABASE = web.AppKey("database", Database)
KUBE: web.AppKey[KubeApi] = web.AppKey("kube")
"""The gateway's own Kubernetes client (provisioning.kube.client.KubeClient, or a test's FAKE)."""
EVENTS = web.AppKey("events", EventListener)
AUTHENTICATOR = web.AppKey("authenticator", Authenticator)
OIDC = web.AppKey("oidc", OIDCRegistry)
"""The configured identity providers (discovery, keys, code exchange)."""
AUDIT = web.AppKey("audit", AuditWriter)
"""Audit rows written in the background (the proxy's ProxyWrite and ProxyExec)."""
UPSTREAM: web.AppKey[UpstreamApi] = web.AppKey("upstream")
"""The pass-through's own client to the API server: it carries tenant tokens only."""
EXPRESS = web.AppKey("express", ExpressLane)
"""The express lane (proxy.passthrough.express), which proxy.server.front's connections use."""
DRAIN = web.AppKey("drain", Drain)
"""The graceful stop's state and deadline (proxy.http.draining)."""
METRICS_ADDRESS: web.AppKey[tuple[str, int]] = web.AppKey("metrics_address")
"""Where the metrics listener is bound (host, port), once the app has started."""
AUDIT_ADDRESS: web.AppKey[tuple[str, int]] = web.AppKey("audit_address")
"""Where the cluster audit listener is bound (host, port), once started; absent when it is off."""
PUBLIC_CA_BASE64 = web.AppKey("public_ca_base64", str)
"""The CA written into issued kubeconfigs: GATEWAY_PUBLIC_CA_FILE, else the credential's."""

# Per-request state set by the middleware and the first authentication.
CONTEXT: web.RequestKey[tuple[str, float]] = web.RequestKey("context")
"""The request's id (for logs and X-Request-Id) and its start (perf_counter), as one entry."""
PRINCIPAL = web.RequestKey("principal", Principal)
