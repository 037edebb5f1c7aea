"""The pass-through client to the API server: the only code that sends
tenant tokens upstream.

Deliberately separate from provisioning.kube.client, which holds the
gateway's own credential: this client has the cluster's CA and nothing
else, so no code path can attach the gateway's identity to a tenant's
request.

`pool` (proxy.passthrough.http1) carries every relayed request: kept-alive
connections without limit (thousands of watches are normal), answers
relayed byte for byte, gzip included, never decompressed, and redirects
never followed, since the pool only ever sends what it is given. A
WebSocket upgrade gets a connection of its own from it (`Pool.open`). It
adds no header of its own beyond framing and, for an upgrade, the
WebSocket handshake.
"""

from __future__ import annotations

import ssl
from typing import NoReturn

from provisioning.errors import BadRequest, ClusterUnavailable, UpstreamError
from proxy.passthrough.http1 import Pool, UpstreamProtocolError

SEND_FAILURES = (ValueError, OSError, TimeoutError, UpstreamProtocolError)
"""What an exchange with the API server (`Pool.request`, `Pool.upgrade`, an
answer's body) raises when it fails."""


def send_failed(error: Exception) -> NoReturn:
    """The one mapping of a failed exchange to what the client is told; raise
    it from the `except SEND_FAILURES` (a refused upgrade is
    proxy.passthrough.websockets.UpgradeRefused, the API server's own status)."""
    if isinstance(error, ValueError):  # request_head refused a header
        raise BadRequest("a request header holds a line break", code="invalid_header") from None
    if isinstance(error, UpstreamProtocolError):
        raise UpstreamError() from error
    raise ClusterUnavailable() from error


def ssl_context(ca_pem: bytes | None) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if ca_pem:
        context.load_verify_locations(cadata=ca_pem.decode())
    return context


class Upstream:
    """`timeout` bounds the whole exchange of an ordinary request, body
    included, or the wait for the answer to a WebSocket upgrade; watches,
    log follows and exec have no such bound once they run. The defaults are
    the settings' (proxy.settings: GATEWAY_UPSTREAM_*)."""

    def __init__(self, server: str, ca_pem: bytes | None, *, connect_timeout: float = 5.0, timeout: float = 60.0,
                 keepalive_seconds: float = 60.0, idle_connections: int = 512) -> None:
        self.server = server.rstrip("/")
        self.timeout = timeout
        self.pool = Pool(self.server, ssl_context(ca_pem), connect_timeout=connect_timeout,
                         keepalive_seconds=keepalive_seconds, max_idle=idle_connections)

    def close(self) -> None:
        self.pool.close()
