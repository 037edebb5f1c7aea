"""What crosses the proxy in headers, both ways (proxy.passthrough.headers). Pure."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.http.answer_headers import SET_BY_STAMP, stamp, stamp_lines
from proxy.passthrough.headers import (
    downstream_response_headers,
    downstream_response_lines,
    forwards_request_header,
    is_spdy_upgrade,
    upstream_request_headers,
    websocket_subprotocols,
)


def headers(*pairs: tuple[str, str]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(pairs))


def names(out: CIMultiDict[str]) -> list[str]:
    return sorted(name.lower() for name, _ in out.items())


@pytest.mark.parametrize("name, value", [
    ("Authorization", "Bearer gateway-session"),
    ("authorization", "Basic YWRtaW46YWRtaW4="),
    ("Cookie", "gw_session=x; gw_csrf=y"),
    ("X-CSRF-Token", "c"),
    ("Impersonate-User", "system:admin"),
    ("impersonate-group", "system:masters"),
    ("Impersonate-Uid", "0"),
    ("Impersonate-Extra-Scopes", "x"),
    ("IMPERSONATE-EXTRA-acme.com%2Fproject", "x"),
    ("X-Remote-User", "admin"),
    ("x-remote-group", "system:masters"),
    ("X-Remote-Extra-Scopes", "x"),
    ("X-Forwarded-For", "1.2.3.4"),
    ("X-Forwarded-Host", "evil"),
    ("X-Forwarded-Proto", "https"),
    ("X-Forwarded-Client-Cert", "Hash=..."),
    ("Forwarded", "for=1.2.3.4"),
    ("X-Real-IP", "1.2.3.4"),
    ("Host", "gateway.example"),
    ("Content-Length", "10"),
    ("Connection", "keep-alive"),
    ("Keep-Alive", "timeout=5"),
    ("Proxy-Authenticate", "Basic"),
    ("Proxy-Authorization", "Basic x"),
    ("Proxy-Connection", "keep-alive"),
    ("TE", "trailers"),
    ("Trailer", "Expires"),
    ("Transfer-Encoding", "chunked"),
    ("Upgrade", "h2c"),
    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ("Sec-WebSocket-Version", "13"),
    ("Sec-WebSocket-Extensions", "permessage-deflate"),
    ("Sec-WebSocket-Protocol", "v5.channel.k8s.io"),
    ("Expect", "100-continue"),  # met by the gateway (proxy.server.front.answer_expect)
    ("Audit-Id", "2f2a"),  # the id of an event in the cluster's audit log: the API server's to choose
])
def test_never_sent_upstream(name: str, value: str) -> None:
    out = upstream_request_headers(headers((name, value), ("Accept", "application/json")), "tenant-token")
    assert names(out) == ["accept", "authorization"]
    assert out.getall("Authorization") == ["Bearer tenant-token"]


@pytest.mark.parametrize("name, value", [
    ("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io"),
    ("Accept-Encoding", "gzip"),
    ("Content-Type", "application/merge-patch+json"),
    ("User-Agent", "kubectl/v1.31.0"),
    ("X-Request-Id", "r1"),
    ("If-None-Match", '"abc"'),
])
def test_ordinary_headers_travel_upstream_unchanged(name: str, value: str) -> None:
    out = upstream_request_headers(headers((name, value)), "t")
    assert out.getall(name) == [value]


def test_exactly_one_authorization_whatever_the_client_sent() -> None:
    incoming = headers(("Authorization", "Bearer a"), ("authorization", "Bearer b"), ("AUTHORIZATION", "Basic c"))
    assert upstream_request_headers(incoming, "tenant").getall("Authorization") == ["Bearer tenant"]


def test_repeated_headers_keep_their_order() -> None:
    incoming = headers(("Accept", "a"), ("X-Thing", "1"), ("Accept", "b"))
    assert upstream_request_headers(incoming, "t").getall("Accept") == ["a", "b"]


def test_the_input_is_not_modified() -> None:
    source = CIMultiDict([("Cookie", "x"), ("Accept", "a")])
    upstream_request_headers(CIMultiDictProxy(source), "t")
    assert list(source.items()) == [("Cookie", "x"), ("Accept", "a")]


@pytest.mark.parametrize("connection", [
    "X-Secret-Thing",
    "x-secret-thing",
    "keep-alive, X-Secret-Thing",
    " close ,X-SECRET-THING , ",
])
def test_connection_nominated_headers_are_dropped_upstream(connection: str) -> None:
    incoming = headers(("Connection", connection), ("X-Secret-Thing", "1"), ("User-Agent", "1"))
    assert names(upstream_request_headers(incoming, "t")) == ["authorization", "user-agent"]


def test_every_connection_header_line_is_honoured() -> None:
    incoming = headers(("Connection", "X-One"), ("Connection", "Accept"), ("X-One", "1"), ("Accept", "a"),
                       ("User-Agent", "1"))
    assert names(upstream_request_headers(incoming, "t")) == ["authorization", "user-agent"]


def test_nominating_authorization_cannot_strip_the_tenant_token() -> None:
    out = upstream_request_headers(headers(("Connection", "Authorization"), ("Authorization", "Bearer x")), "t")
    assert out.getall("Authorization") == ["Bearer t"]


def test_websocket_handshake_is_never_copied_and_bearer_subprotocols_are_dropped() -> None:
    incoming = headers(
        ("Connection", "Upgrade"), ("Upgrade", "websocket"), ("Sec-WebSocket-Key", "k"),
        ("Sec-WebSocket-Version", "13"), ("Sec-WebSocket-Extensions", "permessage-deflate"),
        ("Sec-WebSocket-Protocol", "v5.channel.k8s.io, base64url.bearer.authorization.k8s.io.c2VjcmV0"),
        ("Sec-WebSocket-Protocol", "base64.channel.k8s.io"),
        ("Cookie", "gw_session=x"), ("Origin", "https://gateway.example"),
    )
    # The client library writes the handshake, offering exactly these.
    assert names(upstream_request_headers(incoming, "t")) == ["authorization"]
    assert websocket_subprotocols(incoming) == ["v5.channel.k8s.io", "base64.channel.k8s.io"]
    assert websocket_subprotocols(headers(("Sec-WebSocket-Protocol", "Base64url.Bearer.Authorization.k8s.io.x"))) == []


@pytest.mark.parametrize("name, value", [
    ("Connection", "close"),
    ("Keep-Alive", "timeout=5"),
    ("Transfer-Encoding", "chunked"),
    ("Trailer", "Expires"),
    ("Upgrade", "websocket"),
    ("Proxy-Authenticate", "Basic"),
    ("Proxy-Connection", "close"),
    ("Set-Cookie", "session=attacker; Path=/"),
    ("set-cookie", "a=b"),
    ("WWW-Authenticate", 'Basic realm="kubernetes-master"'),
    ("Access-Control-Allow-Origin", "https://elsewhere.example"),
    ("access-control-allow-credentials", "true"),
])
def test_never_sent_downstream(name: str, value: str) -> None:
    assert names(downstream_response_headers(headers((name, value), ("Audit-Id", "x")))) == ["audit-id"]


def test_response_bodies_keep_their_framing_and_encoding() -> None:
    upstream = headers(("Content-Type", "application/json"), ("Content-Encoding", "gzip"), ("Content-Length", "42"),
                       ("Audit-Id", "x"), ("Warning", '299 - "deprecated"'), ("Warning", '299 - "another"'),
                       ("Cache-Control", "no-cache, private"), ("X-Kubernetes-Pf-Flowschema-Uid", "u"))
    out = downstream_response_headers(upstream)
    assert out["Content-Encoding"] == "gzip" and out["Content-Length"] == "42"
    assert out.getall("Warning") == ['299 - "deprecated"', '299 - "another"']
    assert list(out.items()) == list(upstream.items())


def test_connection_nominated_headers_are_dropped_downstream() -> None:
    upstream = headers(("Connection", "close, X-Internal"), ("X-Internal", "1"), ("Content-Type", "text/plain"))
    assert names(downstream_response_headers(upstream)) == ["content-type"]


@pytest.mark.parametrize("values, expected", [
    ([], []),
    (["v5.channel.k8s.io"], ["v5.channel.k8s.io"]),
    (["v5.channel.k8s.io, v4.channel.k8s.io"], ["v5.channel.k8s.io", "v4.channel.k8s.io"]),
    (["v5.channel.k8s.io,v4.channel.k8s.io", " base64.channel.k8s.io "],
     ["v5.channel.k8s.io", "v4.channel.k8s.io", "base64.channel.k8s.io"]),
    (["SPDY/3.1+portforward.k8s.io"], ["SPDY/3.1+portforward.k8s.io"]),
    ([" , ,"], []),
])
def test_websocket_subprotocols(values: list[str], expected: list[str]) -> None:
    incoming = headers(*(("Sec-WebSocket-Protocol", value) for value in values), ("Accept", "a"))
    assert websocket_subprotocols(incoming) == expected


@pytest.mark.parametrize("pairs, expected", [
    ([("Upgrade", "SPDY/3.1")], True),
    ([("upgrade", "spdy/3.1")], True),
    ([("Upgrade", "websocket"), ("Upgrade", "SPDY/3.1")], True),
    ([("Upgrade", "websocket")], False),
    ([("Upgrade", "h2c")], False),
    ([("X-Stream-Protocol-Version", "v4.channel.k8s.io")], False),
    ([], False),
])
def test_spdy_detection(pairs: list[tuple[str, str]], expected: bool) -> None:
    assert is_spdy_upgrade(headers(*pairs)) is expected


ANSWERS = [
    [("Content-Type", "application/json"), ("Content-Length", "2"), ("Audit-Id", "a1")],
    [("Set-Cookie", "a=b"), ("WWW-Authenticate", "Basic"), ("Access-Control-Allow-Origin", "*"),
     ("access-control-allow-credentials", "true"), ("Transfer-Encoding", "chunked"), ("Warning", "299 - x")],
    [("Connection", "close, X-Secret"), ("X-Secret", "s"), ("connection", "Keep-Alive"), ("Keep-Alive", "5"),
     ("Cache-Control", "no-cache"), ("Cache-Control", "private")],
    [("Server", "kube"), ("X-Request-Id", "theirs"), ("X-Frame-Options", "SAMEORIGIN"), ("Date", "d")],
    # Not UTF-8 (decoded to a surrogate by the upstream client) does not cross; UTF-8 does.
    [("X-Latin", "caf\udce9"), ("Warning", "299 - caf\u00e9"), ("Audit-Id", "a2")],
]


@pytest.mark.parametrize("fields", ANSWERS)
def test_the_byte_lines_keep_what_the_text_headers_keep(fields: list[tuple[str, str]]) -> None:
    """The express lane's rendering of the response rule (downstream_response_lines) and the full path's."""
    text = downstream_response_headers(headers(*fields))
    lines, present = downstream_response_lines([(n.encode(), v.encode("utf-8", "surrogateescape")) for n, v in fields],
                                               SET_BY_STAMP)
    kept = [tuple(line.decode().split(": ", 1)) for line in lines]
    assert kept == [(n, v) for n, v in text.items() if n.lower() not in ("server", "x-request-id")]
    assert present == {n.lower().encode() for n, _ in kept}


@pytest.mark.parametrize("fields", ANSWERS)
def test_the_byte_stamp_adds_what_the_text_stamp_adds(fields: list[tuple[str, str]]) -> None:
    text = downstream_response_headers(headers(*fields))
    stamp(text, "id-1")
    lines, present = downstream_response_lines([(n.encode(), v.encode("utf-8", "surrogateescape")) for n, v in fields],
                                               SET_BY_STAMP)
    lines.extend(stamp_lines(present, "id-1"))
    assert sorted(tuple(line.decode().split(": ", 1)) for line in lines) == sorted(text.items())


@pytest.mark.parametrize("name", sorted({"authorization", "cookie", "x-csrf-token", "impersonate-user",
                                         "x-remote-group", "x-forwarded-for", "forwarded", "x-real-ip", "audit-id",
                                         "host", "keep-alive", "te", "sec-websocket-key", "origin", "referer",
                                         "accept", "user-agent", "content-type", "if-none-match"}))
def test_the_byte_rule_for_request_headers_is_the_text_rule(name: str) -> None:
    """The express lane's rendering of the request rule (forwards_request_header) and the full path's."""
    forwarded = name in upstream_request_headers(headers((name, "v")), "t") and name != "authorization"
    assert forwards_request_header(name.encode()) is forwarded
