"""Header hygiene for the relay, both directions. Pure.

Upstream, the API server must see exactly one identity: the tenant
ServiceAccount token the gateway attaches. So the client's Authorization,
Cookie and CSRF token never travel, nor anything the API server (or an
authenticating proxy in front of it) could read as identity or as a claim
about the client: Impersonate-*, X-Remote-*, X-Forwarded-*, Forwarded,
X-Real-IP. Nor does the client's Audit-Id, which would name the request's
event in the cluster's audit log (the gateway sets its own on the writes
it relays). Origin and Referer stay behind too: they describe the gateway's
page, mean nothing to the API server, and the WebSocket relay sets the
Origin it needs itself.

Hop-by-hop headers, and every header a peer nominates in `Connection` (the
classic way to make a proxy drop, or keep, what it should not), are removed
in both directions. Framing is the relay's own: on the way up the upstream
client frames each request itself (http1.request_head), so the client's
Content-Length and Transfer-Encoding do not travel. On the way down
Content-Length and Content-Encoding stay, because bodies are relayed byte for
byte and never decompressed. Transfer-Encoding goes, because each path
re-chunks what it sends (aiohttp's response, or the express lane itself).
A header whose value is not UTF-8 text does not cross: aiohttp cannot write
its bytes as sent (it would drop them silently), so neither path does. Set-Cookie never reaches the browser: the API server has no
business setting cookies on the gateway's origin. Nor do its Access-Control-*
headers (which origins may read is the gateway's CORS setting alone) or
WWW-Authenticate (it describes the API server's authentication, and a Basic
challenge makes browsers prompt for a password the gateway never asks for).
"""

from __future__ import annotations

from typing import Iterable

from multidict import CIMultiDict, MultiMapping

AUDIT_ID = "Audit-Id"
"""Names a request's event in the cluster's audit log: the gateway's to set
on the writes it relays (proxy.passthrough.relay), never the tenant's."""
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade", "proxy-connection",
})
_REQUEST_DROPPED = HOP_BY_HOP | {
    "host", "content-length", "authorization", "cookie", "x-csrf-token", "forwarded", "x-real-ip",
    "origin", "referer",
    # The API server takes a request's Audit-Id as the id of its audit event:
    # the tenant must not choose (or collide) ids in the cluster's audit log.
    # The API server makes its own and answers with it; the gateway names the
    # events of the writes it relays itself (AUDIT_ID, proxy.passthrough.relay).
    "audit-id",
    # Met here (proxy.server.front.answer_expect) before the body is read, so no concern of the API server's.
    "expect",
}
# sec-websocket-*: the client library writes the whole handshake itself (Key,
# Version and the filtered subprotocols), and must not be handed Extensions it
# did not negotiate (compression it cannot undo).
_REQUEST_DROPPED_PREFIXES = ("impersonate-", "x-remote-", "x-forwarded-", "sec-websocket-")
_RESPONSE_DROPPED = HOP_BY_HOP | {"set-cookie", "set-cookie2", "www-authenticate"}
_RESPONSE_DROPPED_PREFIXES = ("access-control-",)


def _comma_list(headers: MultiMapping[str], name: str) -> Iterable[str]:
    """Every element of a (possibly repeated) comma-separated header."""
    for value in headers.getall(name, []):
        for element in value.split(","):
            element = element.strip()
            if element:
                yield element


def _nominated(headers: MultiMapping[str]) -> frozenset[str]:
    return frozenset(name.lower() for name in _comma_list(headers, "Connection"))


def _without(headers: MultiMapping[str], dropped: frozenset[str], prefixes: tuple[str, ...]) -> CIMultiDict[str]:
    """A copy less the `dropped` names (hop-by-hop ones among them), the
    headers a Connection header nominates, and any header starting with one
    of `prefixes`. Runs twice per proxied request, hence the shape."""
    if "Connection" in headers:
        dropped = dropped | _nominated(headers)
    return CIMultiDict([(name, value) for name, value in headers.items()
                        if (lowered := name.lower()) not in dropped and not lowered.startswith(prefixes)])


_REQUEST_DROPPED_BYTES = frozenset(name.encode() for name in _REQUEST_DROPPED)
_REQUEST_DROPPED_PREFIXES_BYTES = tuple(prefix.encode() for prefix in _REQUEST_DROPPED_PREFIXES)


def forwards_request_header(lowered_name: bytes) -> bool:
    """Whether a client header of this (lower-case) name may reach the API
    server, unless a Connection header nominates it: the rule
    `upstream_request_headers` applies, for relays that keep headers as bytes."""
    return lowered_name not in _REQUEST_DROPPED_BYTES and not lowered_name.startswith(_REQUEST_DROPPED_PREFIXES_BYTES)


_RESPONSE_DROPPED_BYTES = frozenset(name.encode() for name in _RESPONSE_DROPPED)
_RESPONSE_DROPPED_PREFIXES_BYTES = tuple(prefix.encode() for prefix in _RESPONSE_DROPPED_PREFIXES)


def downstream_response_lines(fields: list[tuple[bytes, bytes]],
                              replaced: frozenset[bytes]) -> tuple[list[bytes], set[bytes]]:
    """`downstream_response_headers` for fields kept as bytes: the header
    lines the client may see (`name: value`, less the `replaced` names,
    which the caller sets itself), and the lower-case names among them."""
    dropped: frozenset[bytes] | set[bytes] = _RESPONSE_DROPPED_BYTES | replaced
    for name, value in fields:
        if name.lower() == b"connection":
            dropped = set(dropped)
            dropped.update(element.strip().lower() for element in value.split(b",") if element.strip())
    lines, present = [], set()
    for name, value in fields:
        lowered = name.lower()
        if (lowered not in dropped and not lowered.startswith(_RESPONSE_DROPPED_PREFIXES_BYTES)
                and (value.isascii() or _is_utf8(value))):
            lines.append(b"%s: %s" % (name, value))
            present.add(lowered)
    return lines, present


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _is_text(value: str) -> bool:
    """No lone surrogate: the relay's upstream client decodes header bytes
    that are not UTF-8 to surrogates (proxy.passthrough.http1)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def upstream_request_headers(incoming: MultiMapping[str], bearer_token: str) -> CIMultiDict[str]:
    """The client's headers made safe for the API server, carrying the
    tenant's token and nothing else that could claim an identity. A WebSocket
    handshake is left out whole: the client library writes its own, offering
    `websocket_subprotocols`.
    """
    out = _without(incoming, _REQUEST_DROPPED, _REQUEST_DROPPED_PREFIXES)
    out["Authorization"] = f"Bearer {bearer_token}"
    return out


def downstream_response_headers(upstream: MultiMapping[str]) -> CIMultiDict[str]:
    """The API server's headers as the client should see them."""
    kept = _without(upstream, _RESPONSE_DROPPED, _RESPONSE_DROPPED_PREFIXES)
    if all(value.isascii() for value in kept.values()):
        return kept
    return CIMultiDict((name, value) for name, value in kept.items() if _is_text(value))


# Browsers cannot set Authorization on a WebSocket, so Kubernetes accepts a
# bearer token smuggled in as a subprotocol; the API server tries it when the
# Authorization header fails. Never forwarded: the tenant token is the only
# identity that reaches the API server.
_BEARER_SUBPROTOCOL = "base64url.bearer.authorization.k8s.io."


def offered_subprotocols(incoming: MultiMapping[str]) -> tuple[str, ...]:
    """Every subprotocol a client offered, in its order of preference."""
    return tuple(_comma_list(incoming, "Sec-WebSocket-Protocol"))


def websocket_subprotocols(incoming: MultiMapping[str]) -> list[str]:
    """The subprotocols a client offered, so the upstream handshake can
    offer the same ones, less any bearer token."""
    return [protocol for protocol in offered_subprotocols(incoming)
            if not protocol.lower().startswith(_BEARER_SUBPROTOCOL)]


def is_spdy_upgrade(headers: MultiMapping[str]) -> bool:
    """SPDY (kubectl's exec and port-forward before WebSockets) is not
    relayed: a product choice, since every supported kubectl speaks
    WebSockets. Callers refuse it with a message saying how to switch."""
    return any("spdy/" in value.lower() for value in headers.getall("Upgrade", []))
