"""What a request says about itself: the client's address, the gateway's
public origin, and the ids in its path.

They take the trusted proxies explicitly, so every layer can ask (the
routes read them from the settings; the gate is handed them once).
"""

from __future__ import annotations

import functools
import uuid

from aiohttp import web

from provisioning.errors import BadRequest, NotFound
from proxy.http.addresses import client_address, is_host, public_scheme


def peer_host(request: web.BaseRequest) -> str | None:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return peer[0] if isinstance(peer, (tuple, list)) and peer else None


def client_ip(request: web.BaseRequest, trusted_proxies: frozenset[str]) -> str | None:
    return client_address(peer_host(request), request.headers.getall("X-Forwarded-For", []), trusted_proxies)


def public_origin(request: web.BaseRequest, trusted_proxies: frozenset[str]) -> str:
    """The gateway's origin as the browser sees it, also behind a trusted
    TLS-terminating proxy (which keeps the Host header)."""
    host = request.host
    if not is_host(host):
        # It would end up in a kubeconfig, a redirect URI or a sign-in link.
        raise BadRequest("the Host header is not a host name", code="invalid_host")
    scheme = public_scheme(request.scheme, peer_host(request), request.headers.get("X-Forwarded-Proto"),
                           trusted_proxies)
    return f"{scheme}://{host}"


# Every proxied request names its workspace: parsed once per distinct id
# (uuid.UUID parses in Python). Failures are not cached; the bound caps what
# a client sending ever new ids can make it hold.
_parse_uuid = functools.lru_cache(maxsize=1024)(uuid.UUID)


def uuid_from(text: str | None, what: str) -> uuid.UUID:
    """Parse the id of a resource from a path or query; a malformed id is simply not found."""
    try:
        return _parse_uuid(str(text))
    except ValueError:
        raise NotFound(f"no such {what}") from None
