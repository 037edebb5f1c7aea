"""The pass-through client to the API server: the only code that sends
tenant tokens upstream.

Deliberately separate from provisioning.kube.client, which holds the
gateway's own credential: this client has the cluster's CA and nothing
else, so no code path can attach the gateway's identity to a tenant's
request.

`pool` (proxy.passthrough.http1) carries every relayed request: kept-alive
connections, as many open at once as there are requests (thousands of
watches are normal; only idle ones are capped), answers relayed byte for
byte, gzip included, never decompressed, and redirects never followed,
since the pool only ever sends what it is given. A WebSocket upgrade gets a
connection of its own from it (`Pool.upgrade`). It adds no header of its
own beyond framing and, for an upgrade, the WebSocket handshake.

This module is also the one place where a failed exchange (`send_failed`)
and an upgrade the API server refused (`upgrade_refused`) become the
gateway's errors.
"""

from __future__ import annotations

import ssl
from typing import NoReturn, Protocol

from aiohttp import web
from multidict import CIMultiDict

from provisioning.errors import BadRequest, ClusterUnavailable, GatewayError, RequestTimeout, UpstreamError
from proxy.passthrough.headers import downstream_response_headers
from proxy.passthrough.http1 import Pool, RequestBodyStalled, UnsafeHead, Upgrade, UpstreamProtocolError

SEND_FAILURES = (UnsafeHead, OSError, TimeoutError, UpstreamProtocolError)
"""What an exchange with the API server (`Pool.request`, `Pool.upgrade`, an
answer's body) raises when it fails."""


def send_failed(error: Exception) -> NoReturn:
    """The one mapping of a failed exchange to what the client is told; raise
    it from the `except SEND_FAILURES`. Only a head refused before sending,
    or a body the client had not finished sending by the deadline (408), is
    the client's fault: a certificate the API server's CA did not sign
    (ssl.SSLCertVerificationError, a ValueError too) is a cluster that cannot
    be reached safely, so 503."""
    if isinstance(error, UnsafeHead):
        raise BadRequest("a request header holds a line break", code="invalid_header") from None
    if isinstance(error, RequestBodyStalled):
        raise RequestTimeout() from None
    if isinstance(error, UpstreamProtocolError):
        raise UpstreamError() from error
    raise ClusterUnavailable() from error


class UpgradeRefused(GatewayError):
    """The API server did not switch protocols; its status is passed on, and
    its answer too when it was read whole (`relayed`)."""

    code = "upgrade_refused"

    def __init__(self, status: int, headers: CIMultiDict[str] | None = None, body: bytes | None = None) -> None:
        self.status = status if 400 <= status < 600 else 502
        self._answer = (headers, body) if headers is not None and body and self.status == status else None
        super().__init__(f"the Kubernetes API server refused the upgrade with status {status}")

    def relayed(self) -> web.Response | None:
        """The API server's own answer, as a relayed request's would be: its
        Status names the reason (a container that does not exist, a denial),
        its Retry-After when to try again. None if there is none to give."""
        if self._answer is None:
            return None
        headers, body = self._answer
        return web.Response(status=self.status, body=body, headers=downstream_response_headers(headers))


def upgrade_refused(upgrade: Upgrade) -> NoReturn:
    """The mapping of an upgrade the API server answered with anything but
    101: its own error status and answer, passed on (a 401 is retried once with a fresh
    token by the caller); a success, which is a path that takes no WebSocket
    (a configmap read) answered as a plain request: the client's mistake, a
    400, not a 502 and a warning that any tenant could cause at will; or a
    redirect, never chased: it would carry the tenant's token where the
    tenant wall never looked."""
    status = upgrade.status
    if 200 <= status < 300:
        raise BadRequest("this resource does not take a WebSocket: the Kubernetes API server answered "
                         "the upgrade as a plain request", code="upgrade_not_supported")
    if 300 <= status < 400:
        raise UpstreamError("the Kubernetes API server answered the upgrade with a redirect")
    raise UpgradeRefused(status, upgrade.headers, upgrade.body)


def ssl_context(ca_pem: bytes | None) -> ssl.SSLContext:
    """The cluster's CA alone when it is configured: a certificate that a
    public CA issued for the API server's name must not receive tenant
    tokens. The system's roots only when no CA is given."""
    if ca_pem:
        return ssl.create_default_context(cadata=ca_pem.decode())
    return ssl.create_default_context()


class UpstreamApi(Protocol):
    """What the pass-through needs of its client to the API server: where
    the server is (the Origin of an upgrade), the exchange's bound, and the
    pool that carries every request. `Upstream` is the real one; the app's
    `upstream` seam (proxy.app.UpstreamSeam) takes any that fits, and the
    app closes only the one it made."""

    @property
    def server(self) -> str: ...

    @property
    def timeout(self) -> float: ...

    @property
    def pool(self) -> Pool: ...

    def close(self) -> None: ...


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
