"""What crosses the proxy in headers, both ways. Pure."""

from __future__ import annotations

from multidict import CIMultiDict, CIMultiDictProxy

from proxy.passthrough.headers import (
    downstream_response_headers,
    is_spdy_upgrade,
    upstream_request_headers,
    websocket_subprotocols,
)


def proxy_of(*pairs: tuple[str, str]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(pairs))


def test_identity_headers_never_travel_upstream() -> None:
    incoming = proxy_of(
        ("Authorization", "Bearer gateway-session"), ("Cookie", "gw_session=x"), ("X-CSRF-Token", "c"),
        ("Impersonate-User", "admin"), ("impersonate-group", "system:masters"), ("Impersonate-Extra-Scopes", "x"),
        ("Impersonate-Uid", "0"), ("X-Remote-User", "admin"), ("x-remote-group", "system:masters"),
        ("X-Remote-Extra-Scope", "x"), ("X-Forwarded-For", "1.2.3.4"), ("Forwarded", "for=1.2.3.4"),
        ("X-Real-IP", "1.2.3.4"), ("Host", "gateway"), ("Content-Length", "10"),
        ("Accept", "application/json"), ("Content-Type", "application/json"), ("User-Agent", "kubectl"),
    )
    out = upstream_request_headers(incoming, "tenant-token")
    assert out.getall("Authorization") == ["Bearer tenant-token"]
    assert sorted(k.lower() for k in out) == ["accept", "authorization", "content-type", "user-agent"]


def test_hop_by_hop_and_connection_nominated_headers_are_dropped_both_ways() -> None:
    incoming = proxy_of(("Connection", "keep-alive, X-Secret-Thing"), ("Connection", "Accept"),
                        ("X-Secret-Thing", "1"), ("Keep-Alive", "timeout=5"), ("TE", "trailers"),
                        ("Transfer-Encoding", "chunked"), ("Upgrade", "h2c"), ("Proxy-Authorization", "x"),
                        ("Accept", "application/json"), ("Audit-Id", "1"))
    out = upstream_request_headers(incoming, "t")
    assert sorted(k.lower() for k in out) == ["audit-id", "authorization"]
    response = downstream_response_headers(proxy_of(
        ("Connection", "close, X-Internal"), ("X-Internal", "1"), ("Transfer-Encoding", "chunked"),
        ("Set-Cookie", "a=b"), ("Content-Type", "application/json"), ("Content-Encoding", "gzip"),
        ("Content-Length", "42"), ("Audit-Id", "x"), ("Warning", '299 - "deprecated"')))
    assert sorted(k.lower() for k in response) == ["audit-id", "content-encoding", "content-length", "content-type", "warning"]


def test_websocket_handshake_headers_are_left_to_the_client_library() -> None:
    incoming = proxy_of(("Sec-WebSocket-Key", "k"), ("Sec-WebSocket-Version", "13"),
                        ("Sec-WebSocket-Protocol", "v5.channel.k8s.io, v4.channel.k8s.io"),
                        ("Sec-WebSocket-Protocol", "base64.channel.k8s.io"), ("Upgrade", "websocket"))
    assert list(upstream_request_headers(incoming, "t", websocket=True)) == ["Authorization"]
    assert websocket_subprotocols(incoming) == ["v5.channel.k8s.io", "v4.channel.k8s.io", "base64.channel.k8s.io"]


def test_spdy_detection() -> None:
    assert is_spdy_upgrade(proxy_of(("Upgrade", "SPDY/3.1")))
    assert not is_spdy_upgrade(proxy_of(("Upgrade", "websocket")))
