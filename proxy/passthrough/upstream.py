"""The pass-through HTTP client to the API server: the only creator of
ClientSessions that carry tenant tokens.

Deliberately separate from provisioning.kube.client, which holds the
gateway's own credential: this client has the cluster's CA and nothing else,
so no code path can attach the gateway's identity to a tenant's request.

Two sessions over one pooled connector (no connection limit: thousands of
watches are normal):
- short: ordinary requests, a finite total timeout;
- long: watch, follow, exec; no total or read timeout (aiohttp's default
  300 s total would cut every watch), only a connect timeout.
Neither invents a Content-Type the client did not send (a made-up one turns
a body the API server would accept into a 415): callers pass
`skip_auto_headers=NO_CONTENT_TYPE` for the methods the library would give
one, while Accept-Encoding and User-Agent are always set by
proxy.passthrough.headers. Both never decompress (`auto_decompress=False`:
bodies are relayed byte for byte, gzip included) and never follow redirects (callers pass
`allow_redirects=False`; a redirect from upstream is relayed, not chased).
`ws_connect` has no such switch, so the long session, which makes the
upgrades, also refuses any redirect from a request trace hook.
"""

from __future__ import annotations

import ssl
from typing import Any

import aiohttp
from yarl import URL

_CONNECT = 5.0
SHORT_TIMEOUT = aiohttp.ClientTimeout(total=60, sock_connect=_CONNECT)
LONG_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_read=None, sock_connect=_CONNECT)


# The methods for which the client library would add "application/octet-stream".
METHODS_GIVEN_A_CONTENT_TYPE = frozenset({"POST", "PUT", "PATCH"})
NO_CONTENT_TYPE = ("Content-Type",)


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
        self._connector = aiohttp.TCPConnector(limit=0, ssl=ssl_context(ca_pem), keepalive_timeout=60,
                                               enable_cleanup_closed=True)
        common = {"connector": self._connector, "connector_owner": False, "auto_decompress": False,
                  "cookie_jar": aiohttp.DummyCookieJar()}
        self.short = aiohttp.ClientSession(timeout=SHORT_TIMEOUT, **common)  # type: ignore[arg-type]
        self.long = aiohttp.ClientSession(timeout=LONG_TIMEOUT, trace_configs=[_redirects_refused()],
                                          **common)  # type: ignore[arg-type]

    def url(self, raw_path: str, raw_query: str) -> URL:
        """Already-encoded path and query, sent byte for byte (no re-quoting)."""
        return URL(f"{self.server}{raw_path}" + (f"?{raw_query}" if raw_query else ""), encoded=True)

    async def close(self) -> None:
        await self.short.close()
        await self.long.close()
        await self._connector.close()
