"""Header hygiene for the relay, both directions. Pure.

Upstream, the API server must see exactly one identity: the tenant
ServiceAccount token the gateway attaches. So the client's Authorization and
Cookie never travel, nor anything the API server (or an authenticating proxy
in front of it) could read as identity: Impersonate-*, X-Remote-*, forwarding
headers. Hop-by-hop headers, and any header a client nominates in
`Connection` (the classic way to make a proxy drop, or keep, what it should
not), are removed in both directions.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from multidict import CIMultiDict

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade", "proxy-connection",
})
_REQUEST_DROPPED = frozenset({
    "host", "content-length", "authorization", "cookie", "x-csrf-token", "forwarded", "x-real-ip",
    "origin", "referer",
})
_REQUEST_DROPPED_PREFIXES = ("impersonate-", "x-remote-", "x-forwarded-", "sec-websocket-")
_RESPONSE_DROPPED = frozenset({"set-cookie"})


def _nominated(headers: Mapping[str, str]) -> frozenset[str]:
    getall = getattr(headers, "getall", None)
    values: Iterable[str] = getall("Connection", []) if getall else [headers.get("Connection", "")]
    return frozenset(token.strip().lower() for value in values for token in value.split(",") if token.strip())


def _items(headers: Mapping[str, str]) -> Iterable[tuple[str, str]]:
    items = getattr(headers, "items")
    return list(items())


def upstream_request_headers(incoming: Mapping[str, str], bearer_token: str, *,
                             websocket: bool = False) -> CIMultiDict[str]:
    """The client's headers made safe to send to the API server, with the
    tenant's token attached. For WebSocket handshakes the client library
    writes its own Upgrade/Key/Version; the subprotocols are passed separately."""
    dropped = HOP_BY_HOP | _nominated(incoming) | _REQUEST_DROPPED
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in _items(incoming):
        lowered = name.lower()
        if lowered in dropped or lowered.startswith(_REQUEST_DROPPED_PREFIXES):
            continue
        out.add(name, value)
    out["Authorization"] = f"Bearer {bearer_token}"
    return out


def downstream_response_headers(upstream: Mapping[str, str]) -> CIMultiDict[str]:
    """The API server's headers as the client should see them. Content-Encoding
    and Content-Length stay: bodies are relayed byte for byte, gzip included."""
    dropped = HOP_BY_HOP | _nominated(upstream) | _RESPONSE_DROPPED
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in _items(upstream):
        if name.lower() not in dropped:
            out.add(name, value)
    return out


def websocket_subprotocols(incoming: Mapping[str, str]) -> list[str]:
    getall = getattr(incoming, "getall", None)
    values: Iterable[str] = getall("Sec-WebSocket-Protocol", []) if getall else [incoming.get("Sec-WebSocket-Protocol", "")]
    return [p.strip() for value in values for p in value.split(",") if p.strip()]


def is_spdy_upgrade(incoming: Mapping[str, str]) -> bool:
    return "spdy/" in incoming.get("Upgrade", "").lower()
