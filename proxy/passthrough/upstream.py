"""The pass-through clients to the API server: the only code that sends
tenant tokens upstream.

Deliberately separate from provisioning.kube.client, which holds the
gateway's own credential: these clients have the cluster's CA and nothing
else, so no code path can attach the gateway's identity to a tenant's
request.

- `pool` (proxy.passthrough.http1) carries every relayed HTTP request:
  kept-alive connections without limit (thousands of watches are normal),
  answers relayed byte for byte, gzip included, never decompressed, and
  redirects never followed, since the pool only ever sends what it is given.
- `websockets`, an aiohttp session, makes the exec/attach/port-forward
  upgrades: no total or read timeout (an exec session lasts as long as it
  lasts), never a decompressed frame, none of the library's own default
  headers, and, as `ws_connect` would chase a redirect, a trace hook that
  refuses any.
Neither adds a header of its own beyond framing and, for an upgrade, the
WebSocket handshake.
"""

from __future__ import annotations

import ssl
from typing import Any

import aiohttp
from yarl import URL

from proxy.passthrough.http1 import Pool

_CONNECT = 5.0
SHORT_SECONDS = 60.0
"""The whole exchange of an ordinary request, body included; watches, log
follows and exec have no such bound."""
LONG_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_read=None, sock_connect=_CONNECT)


class RedirectRefused(aiohttp.ClientError):
    """The API server answered with a redirect where one would be chased."""


async def _refuse_redirect(_session: aiohttp.ClientSession, _context: Any,
                           _params: aiohttp.TraceRequestRedirectParams) -> None:
    # Following it would carry the tenant's token to a path the tenant wall never saw.
    raise RedirectRefused("the Kubernetes API server answered with a redirect")


def _redirects_refused() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_request_redirect.append(_refuse_redirect)
    return trace


def ssl_context(ca_pem: bytes | None) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if ca_pem:
        context.load_verify_locations(cadata=ca_pem.decode())
    return context


class Upstream:
    def __init__(self, server: str, ca_pem: bytes | None) -> None:
        self.server = server.rstrip("/")
        context = ssl_context(ca_pem)
        self.pool = Pool(self.server, context, connect_timeout=_CONNECT)
        self.websockets = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ssl=context, enable_cleanup_closed=True),
            timeout=LONG_TIMEOUT, trace_configs=[_redirects_refused()], auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(), skip_auto_headers=("User-Agent", "Accept-Encoding"))

    def url(self, raw_path: str, raw_query: str) -> URL:
        """Already-encoded path and query, sent byte for byte (no re-quoting)."""
        return URL(f"{self.server}{raw_path}" + (f"?{raw_query}" if raw_query else ""), encoded=True)

    async def close(self) -> None:
        self.pool.close()
        await self.websockets.close()
