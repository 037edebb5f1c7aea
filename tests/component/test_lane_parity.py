"""The two request paths answer alike: a differential test.

`/k8s/{workspace_id}/...` has two paths: the express lane, which answers a
warm bearer GET beneath aiohttp's server (proxy.passthrough.express), and
aiohttp's full path (proxy.passthrough.gate.Gate.handle). One table of
requests goes, as raw HTTP/1.1 bytes, to two gateways on one database, one
with the lane (`express=True`) and one without (`express=False`), each before
its own FAKE API server (tests/component/test_seams.py) that records what
reached it. Both must answer alike (status line, header fields, body, and
whether the connection serves one more request), and send the API server
alike. Why a table: a rule added to the gate's decision, or a reason the
lane lends, is then checked on both paths by adding one row, and a row's id
says which rule diverged.

Each row also states the lane's verdict on its request (answered here,
lent to the full path, or left to aiohttp for good): a row whose request
never reaches the lane would compare the full path with itself.
"""

from __future__ import annotations

import asyncio
import datetime
import re
import ssl
import string
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Literal

import pytest
from aiohttp import web

from provisioning.db import repositories as repo
from provisioning.models import AuditEvent
from proxy import keys
from proxy.auth import sessions
from proxy.auth.signin import open_session
from proxy.passthrough.express import Admitted, Lend
from tests.fakes.apiserver import FakeAPIServer
from tests.fakes.kube import FakeTokenIssuer
from tests.support.express import HOSTILE

Verdict = Literal["lane", "lent", "aiohttp"]
"""What the lane made of a row's request (ExpressLane.admit): answered it
(Admitted), lent it to the full path (Lend), or left the connection to
aiohttp for good (None)."""

Fields = list[tuple[str, str]]

# ---------------------------------------------------------------------------
# The FAKE API server: one per gateway, identical, each recording what reached it.

Mode = Literal["list", "refuse_first_token", "error_500", "no_content", "not_modified", "chunked",
               "dropped_headers", "gzip", "too_many", "redirect", "empty_200", "custom_status",
               "raw_304_with_length", "raw_204_with_length", "raw_no_content_type", "raw_chunked_no_content_type",
               "raw_empty_no_content_type", "raw_read_to_close", "raw_odd_values", "raw_latin1_value",
               "raw_garbage", "raw_nothing", "raw_cut_mid_body", "big", "refuse_all_tokens"]

FIXED_DATE = "Tue, 01 Jan 2030 00:00:00 GMT"
"""The Date of an answer of the API server's own making (raw_odd_values)."""

RAW_ANSWERS: dict[str, bytes] = {
    "raw_304_with_length": b'HTTP/1.1 304 Not Modified\r\nETag: "v1"\r\nContent-Length: 58\r\n\r\n',
    "raw_204_with_length": b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
    "raw_no_content_type": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    "raw_chunked_no_content_type": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "raw_empty_no_content_type": b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    "raw_read_to_close": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{}",
    # Values with obs-text (UTF-8), inner and outer whitespace, an empty
    # value, a repeated field, a Date and a Server of its own.
    "raw_garbage": b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
    "raw_nothing": b"",
    "raw_cut_mid_body": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"kind\":",
    # obs-text that is no UTF-8: a Latin-1 byte.
    "raw_latin1_value": (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
                         b"X-Latin: caf\xe9\r\n\r\n{}"),
    "raw_odd_values": (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
                       b"X-Utf8: caf\xc3\xa9\r\nX-Pad: \t a  b \t\r\nX-Empty:\r\n"
                       b"Warning: 299 - \"one\"\r\nWarning: 299 - \"two\"\r\n"
                       b"Date: " + FIXED_DATE.encode() + b"\r\nServer: kube-apiserver\r\n\r\n{}"),
}


class FakeAPI:
    """A FAKE API server's behaviour, switched by `mode` once the gateway is
    warm, and the record of every request that reached it: method, target
    as sent (still percent-encoded), header fields, body."""

    def __init__(self) -> None:
        self.mode: Mode = "list"
        self.seen: list[tuple[str, str, Fields, bytes]] = []
        self.port = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        fields = [(name.decode("latin-1").lower(), value.decode("latin-1")) for name, value in request.raw_headers]
        self.seen.append((request.method, request.raw_path, fields, body))
        return await self._answer(request)

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        mode = self.mode
        if mode in RAW_ANSWERS:
            # An answer aiohttp would not write (its framing or its headers
            # as a Go API server, or a proxy before it, may send them): the
            # bytes themselves, then the connection closed, so that nothing
            # aiohttp writes after them is read as another answer.
            assert request.transport is not None
            request.transport.write(RAW_ANSWERS[mode])
            request.transport.close()
            raise asyncio.CancelledError()
        if mode == "refuse_first_token" and request.headers.get("Authorization") == "Bearer token-1":
            # As when the tenant's ServiceAccount was replaced: the cached token is refused.
            return web.json_response({"kind": "Status", "code": 401, "reason": "Unauthorized"}, status=401,
                                     headers={"WWW-Authenticate": 'Basic realm="kubernetes-master"'})
        if mode == "refuse_all_tokens":
            return web.json_response({"kind": "Status", "code": 401, "reason": "Unauthorized"}, status=401)
        if mode == "big":  # several of the relay's reads, and of the client's flow control
            return web.json_response({"kind": "ConfigMapList", "items": [{"data": {"k": "v" * 1000}}] * 300})
        if mode == "error_500":
            return web.json_response({"kind": "Status", "code": 500, "reason": "InternalError",
                                      "message": "etcd is unhappy"}, status=500, headers={"Audit-Id": "server-made"})
        if mode == "no_content":
            return web.Response(status=204, headers={"Audit-Id": "server-made"})
        if mode == "not_modified":
            return web.Response(status=304, headers={"ETag": '"v1"', "Audit-Id": "server-made"})
        if mode == "chunked":
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            for piece in (b'{"kind":"ConfigMapList",', b'"items":[]', b"}"):
                await response.write(piece)
            await response.write_eof()
            return response
        if mode == "dropped_headers":
            # What never reaches the client (proxy.passthrough.headers): cookies,
            # the API server's CORS and challenge, and a header its Connection nominates.
            return web.json_response({"kind": "ConfigMapList", "items": []}, headers={
                "Set-Cookie": "a=b", "Access-Control-Allow-Origin": "*", "WWW-Authenticate": "Basic",
                "Connection": "X-Nominated", "X-Nominated": "1", "Warning": '299 - "deprecated"',
                "Audit-Id": "server-made"})
        if mode == "gzip":
            return web.Response(body=b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\x03\x00\x00\x00\x00\x00\x00\x00"
                                     b"\x00\x00", headers={"Content-Type": "application/json",
                                                           "Content-Encoding": "gzip"})
        if mode == "too_many":
            return web.json_response({"kind": "Status", "code": 429, "reason": "TooManyRequests"}, status=429,
                                     headers={"Retry-After": "7"})
        if mode == "redirect":
            return web.Response(status=302, headers={"Location": "https://elsewhere.example/"})
        if mode == "custom_status":
            return web.json_response({"kind": "Status"}, status=299, reason="Somewhat Fine")
        if mode == "empty_200":
            return web.Response(status=200, body=b"", headers={"Audit-Id": "server-made"})
        return web.json_response({"kind": "ConfigMapList", "apiVersion": "v1", "items": []},
                                 headers={"Audit-Id": "server-made", "Set-Cookie": "a=b"})


@dataclass
class Side:
    """One gateway of the pair and what stands behind it."""

    name: str
    gateway: Any
    api: FakeAPI
    server: Any
    upstream: Any
    verdicts: list[Verdict] = field(default_factory=list)
    """The lane's verdicts, in order (none on the side without a lane)."""


@dataclass
class Workspace:
    """The one user and workspace both gateways serve, and the row's placeholders."""

    id: str
    namespace: str
    token: str
    expired_token: str

    def placeholders(self) -> dict[str, str]:
        k8s = f"/k8s/{self.id}"
        return {
            "ws": self.id, "ns": self.namespace, "k8s": k8s,
            "cm": f"{k8s}/api/v1/namespaces/{self.namespace}/configmaps",
            # The workspace id with its first three characters percent-encoded (`%30` is `0`).
            "ws_escaped": "".join(f"%{ord(c):02X}" for c in self.id[:3]) + self.id[3:],
            # The tenant's namespace with its first letter escaped (`%74` is `t`): still its own.
            "ns_escaped": "%74" + self.namespace[1:],
            "auth": f"Authorization: Bearer {self.token}",
            "token": self.token, "expired": self.expired_token,
        }


# ---------------------------------------------------------------------------
# What a row may do between the warm-up and its request.

Arrangement = Callable[[list[Side], Workspace], Awaitable[None]]


async def _until_heard(sides: list[Side], kind: str, ident: str, change: Callable[[], Awaitable[Any]]) -> None:
    """Run `change`, then wait until every gateway has heard its event
    (`kind` about `ident`): each has then forgotten what it cached."""
    heard: list[set[str]] = [set() for _ in sides]
    for side, seen in zip(sides, heard):
        side.gateway.server.app[keys.EVENTS].subscribe(
            lambda message, seen=seen: seen.add(f"{message.get('kind')}:{message.get('id')}"))
    await change()
    async with asyncio.timeout(10):
        while not all(f"{kind}:{ident}" in seen for seen in heard):
            await asyncio.sleep(0.01)


async def suspend_workspace(sides: list[Side], workspace: Workspace) -> None:
    """The workspace suspended, as the suspend route leaves its row (the
    route itself needs the cluster): the database's trigger tells both."""
    db = sides[0].gateway.server.app[keys.DATABASE]

    async def suspend() -> None:
        async with db.connection() as connection:
            await repo.set_workspace_state(connection, uuid.UUID(workspace.id), "suspended")
    await _until_heard(sides, "workspace_changed", workspace.id, suspend)


async def log_out(sides: list[Side], workspace: Workspace) -> None:
    """The session logged out on one replica; both hear it revoked."""
    session_id = str(sessions.verify(sides[0].gateway.server.app[keys.SETTINGS].session_secret_value,
                                     workspace.token).session_id)

    async def logout() -> None:
        answer = await sides[0].gateway.post("/api/v1/auth/logout",
                                             headers={"Authorization": f"Bearer {workspace.token}"})
        assert answer.status == 204, await answer.text()
    await _until_heard(sides, "session_revoked", session_id, logout)


async def stop_api_servers(sides: list[Side], workspace: Workspace) -> None:
    """The API server gone: nothing listens, and no kept-alive connection to it remains."""
    for side in sides:
        await side.server.close()
        side.upstream.pool.close()


async def begin_drain(sides: list[Side], workspace: Workspace) -> None:
    """The stop has begun (SIGTERM): new requests are refused."""
    for side in sides:
        side.gateway.server.app[keys.DRAIN].begin()


async def lose_events(sides: list[Side], workspace: Workspace) -> None:
    """The event listener gone: no suspension or logout would reach a stream."""
    for side in sides:
        await side.gateway.server.app[keys.EVENTS].stop()


# ---------------------------------------------------------------------------
# The table.

@dataclass(frozen=True)
class Row:
    """One request, sent as `head` (lines joined with `eol`, `$` placeholders
    from Workspace.placeholders) and `body`, after both gateways are warm
    (unless not `warm`), with the FAKE API servers in `api` mode and
    `arrange` done first; and what the lane makes of it (`verdict`)."""

    id: str
    head: tuple[str, ...]
    verdict: Verdict
    body: str = ""
    warm: bool = True
    api: Mode = "list"
    arrange: Arrangement | None = None
    eol: str = "\r\n"
    pipelined: bool = False
    """The plain GET that follows the row's request is sent with it, in one
    write, before any answer (otherwise once its answer has arrived)."""
    differs: str | None = None
    """A difference between the paths that is known and not yet fixed: the
    row is then an xfail(strict=True) naming it, so it fails once fixed."""


def get(target: str = "$cm", *fields: str, method: str = "GET", auth: bool = True,
        version: str = "HTTP/1.1") -> tuple[str, ...]:
    """A request head: the request line, a Host, the user's bearer token (unless not `auth`), `fields`."""
    return (f"{method} {target} {version}", "Host: gateway", *(("$auth",) if auth else ()), *fields)


UNKNOWN_WORKSPACE = "00000000-0000-4000-8000-000000000000"
EXEC = "$k8s/api/v1/namespaces/$ns/pods/p/exec?command=sh&stdout=true"
WEBSOCKET = ("Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13",
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")

ROWS = [
    # --- What the lane answers itself: a warm bearer GET the wall lets through (a plain forward).
    Row("lane: a plain forward inside the namespace", get(), "lane"),
    Row("lane: a query string", get("$cm?labelSelector=app%3Dweb&limit=5"), "lane"),
    Row("lane: hostile headers stay behind", get("$cm", *(f"{n}: {v}" for n, v in HOSTILE.items())), "lane"),
    Row("lane: a cookie beside the bearer token", get("$cm", "Cookie: gw_session=not-a-session"), "lane"),
    Row("lane: Content-Length 0", get("$cm", "Content-Length: 0"), "lane"),
    Row("lane: an empty query", get("$cm?"), "lane"),
    Row("lane: a lower-case bearer scheme", get("$cm", "Authorization: bearer $token", auth=False), "lane"),
    Row("lane: obs-text, padding and an empty value",
        get("$cm", "X-Latin: caf\xe9", "X-Utf8: caf\xc3\xa9", "X-Pad: \t a  b \t", "X-Empty:"), "lane"),
    Row("lane: repeated ordinary headers", get("$cm", "Accept: application/json", "Accept: */*"), "lane"),
    Row("lane: the Namespace object itself", get("$k8s/api/v1/namespaces/$ns"), "lane"),
    Row("lane: an escaped letter of the own namespace", get("$k8s/api/v1/namespaces/$ns_escaped/configmaps"), "lane"),
    Row("lane: a grouped resource", get("$k8s/apis/apps/v1/namespaces/$ns/deployments"), "lane"),
    Row("lane: a pod's log, not followed", get("$k8s/api/v1/namespaces/$ns/pods/p/log?follow=false"), "lane"),
    Row("lane: watch=false is no watch", get("$cm?watch=false"), "lane"),
    Row("lent: with the event listener gone, a short GET (nothing cached is trusted)", get(), "lent",
        arrange=lose_events),
    Row("wall: discovery /api", get("$k8s/api"), "lane"),
    Row("wall: discovery /apis", get("$k8s/apis"), "lane"),
    Row("wall: discovery /version", get("$k8s/version"), "lane"),
    Row("wall: discovery /openapi/v2", get("$k8s/openapi/v2"), "lane"),
    # --- The API server's answers, on the lane.
    Row("api: a 401 once (token replaced), answered after one retry", get(), "lane", api="refuse_first_token"),
    Row("api: a 500", get(), "lane", api="error_500"),
    Row("api: down (503 in the contract's shape)", get(), "lane", arrange=stop_api_servers),
    Row("api: a 204", get(), "lane", api="no_content"),
    Row("api: a 304", get("$cm", 'If-None-Match: "v1"'), "lane", api="not_modified"),
    Row("api: a chunked answer", get(), "lane", api="chunked"),
    Row("api: an empty 200", get(), "lane", api="empty_200"),
    Row("api: headers that never reach the client", get(), "lane", api="dropped_headers"),
    Row("api: a gzip body, relayed as sent", get("$cm", "Accept-Encoding: gzip"), "lane", api="gzip"),
    Row("api: a 429 with Retry-After", get(), "lane", api="too_many"),
    Row("api: a redirect, never chased", get(), "lane", api="redirect"),
    Row("api: a status and reason of its own", get(), "lane", api="custom_status"),
    Row("api: a 304 with a Content-Length", get(), "lane", api="raw_304_with_length"),
    Row("api: a 204 with a Content-Length", get(), "lane", api="raw_204_with_length"),
    Row("api: no Content-Type", get(), "lane", api="raw_no_content_type"),
    Row("api: no Content-Type, chunked", get(), "lane", api="raw_chunked_no_content_type"),
    Row("api: no Content-Type, empty", get(), "lane", api="raw_empty_no_content_type"),
    Row("api: a body read to the close", get(), "lane", api="raw_read_to_close"),
    Row("api: odd header values, its own Date and Server", get(), "lane", api="raw_odd_values"),
    Row("api: 401 to every token", get(), "lane", api="refuse_all_tokens"),
    Row("api: a big answer", get(), "lane", api="big"),
    Row("api: an answer that is no HTTP", get(), "lane", api="raw_garbage"),
    Row("api: hangs up without an answer", get(), "lane", api="raw_nothing"),
    Row("api: an answer cut mid-body", get(), "lane", api="raw_cut_mid_body"),
    # Neither path passes a header that is no UTF-8 (proxy.passthrough.headers).
    Row("api: a Latin-1 byte in a header value", get(), "lane", api="raw_latin1_value"),
    # --- The tenant wall's refusals and its own answers: lent, the full path decides.
    Row("wall: another namespace (deny)", get("$k8s/api/v1/namespaces/other/configmaps"), "lent"),
    Row("wall: cluster-scoped /api/v1/nodes (deny)", get("$k8s/api/v1/nodes"), "lent"),
    Row("wall: escapes that decode to another namespace (deny)",
        get("$k8s/api/v1/namespaces/%6Fther/configmaps"), "lent"),
    Row("wall: an encoded slash (deny)", get("$k8s/api/v1/namespaces/$ns%2Fconfigmaps"), "lent"),
    Row("wall: a dot segment (deny)", get("$k8s/api/v1/namespaces/other/../$ns/configmaps"), "lent"),
    Row("wall: a ';' in the query (deny)", get("$cm?limit=5;watch=true"), "lent"),
    Row("wall: the API server's pod proxy (deny)", get("$k8s/api/v1/namespaces/$ns/pods/p/proxy/x"), "lent"),
    Row("wall: a fragment in the target (deny)", get("$cm#frag"), "lent"),
    Row("wall: the root path (deny)", get("$k8s/"), "lent"),
    Row("wall: no path after the workspace (deny)", get("$k8s"), "lent"),
    Row("wall: the namespace list (own_namespace_list)", get("$k8s/api/v1/namespaces"), "lent"),
    Row("wall: a watch of the namespace list (deny)", get("$k8s/api/v1/namespaces?watch=true"), "lent"),
    Row("wall: a self-review (forward)", get("$k8s/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
                                             "Content-Type: application/json", "Content-Length: 2", method="POST"),
        "lent", body="{}"),
    Row("wall: deleting the own namespace (deny)", get("$k8s/api/v1/namespaces/$ns", method="DELETE"), "lent"),
    Row("wall: a method not proxied (deny)", get(method="OPTIONS"), "lent"),
    # --- Long-running requests: lent (streams take the full path).
    Row("lent: a watch (watch=true)", get("$cm?watch=true"), "lent"),
    Row("lent: a watch (a bare ?watch)", get("$cm?watch"), "lent"),
    Row("lent: a watch (the /watch/ path)", get("$k8s/api/v1/watch/namespaces/$ns/configmaps"), "lent"),
    Row("lent: a followed log", get("$k8s/api/v1/namespaces/$ns/pods/p/log?follow=true"), "lent"),
    Row("lent: an exec without an upgrade", get(EXEC), "lent"),
    Row("lent: a watch with the event listener gone (503)", get("$cm?watch=true"), "lent", arrange=lose_events),
    Row("lent: the drain has begun (503)", get(), "lent", arrange=begin_drain),
    # --- Not a GET to /k8s/.
    Row("lent: HEAD", get(method="HEAD"), "lent"),
    Row("lent: POST with a body", get("$cm", "Content-Type: application/json", "Content-Length: 20",
                                      method="POST"), "lent", body='{"kind":"ConfigMap"}'),
    Row("lent: DELETE", get("$cm/x", method="DELETE"), "lent"),
    Row("lent: a CORS preflight", get("$cm", "Origin: https://elsewhere.example",
                                      "Access-Control-Request-Method: GET", method="OPTIONS", auth=False), "lent"),
    Row("lent: not /k8s/ (the gateway's own route)", get("/api/v1/me"), "lent"),
    Row("lent: an escaped /k8s/ prefix", get("/%6B8s/$ws/api/v1/namespaces/$ns/configmaps"), "lent"),
    Row("lent: an absolute-form target", get("https://gateway$cm"), "lent"),
    # --- Who is asking.
    Row("lent: no bearer token", get(auth=False), "lent"),
    Row("lent: two Authorization headers", get("$cm", "$auth"), "lent"),
    Row("lent: a Basic credential", get("$cm", "Authorization: Basic dXNlcjpwYXNz", auth=False), "lent"),
    Row("lent: a cookie session instead of bearer", get("$cm", "Cookie: gw_session=$token", auth=False), "lent"),
    Row("lent: an empty bearer token", get("$cm", "Authorization: Bearer", auth=False), "lent"),
    Row("lent: a tab after Bearer", get("$cm", "Authorization: Bearer\t$token", auth=False), "lent"),
    Row("lent: an invalid token", get("$cm", "Authorization: Bearer not-a-token", auth=False), "lent"),
    Row("lent: an expired token", get("$cm", "Authorization: Bearer $expired", auth=False), "lent"),
    Row("lent: a session logged out", get(), "lent", arrange=log_out),
    Row("lent: a cold cache (the first request)", get(), "lent", warm=False),
    # --- Which workspace.
    Row("lent: an unknown workspace id", get(f"/k8s/{UNKNOWN_WORKSPACE}/api/v1/namespaces/$ns/configmaps"), "lent"),
    Row("lent: a malformed workspace id", get("/k8s/not-a-uuid/api/v1/namespaces/$ns/configmaps"), "lent"),
    Row("lent: an escaped workspace id", get("/k8s/$ws_escaped/api/v1/namespaces/$ns/configmaps"), "lent"),
    Row("lent: a braced workspace id", get("/k8s/{$ws}/api/v1/namespaces/$ns/configmaps"), "lent"),
    Row("lent: a suspended workspace", get(), "lent", arrange=suspend_workspace),
    # --- Headers that ask for more than a forward.
    Row("lent: a body (Content-Length > 0)", get("$cm", "Content-Length: 2"), "lent", body="{}"),
    Row("lent: Connection: keep-alive", get("$cm", "Connection: keep-alive"), "lent"),
    Row("lent: Connection nominating a header", get("$cm", "Connection: Accept", "Accept: application/json"),
        "lent"),
    Row("lent: Connection: close", get("$cm", "Connection: close"), "lent"),
    Row("lent: Expect: 100-continue", get("$cm", "Expect: 100-continue"), "lent"),
    Row("lent: Expect: something else", get("$cm", "Expect: the-unexpected"), "lent"),
    Row("lent: Origin", get("$cm", "Origin: https://elsewhere.example"), "lent"),
    Row("lent: Proxy-Connection", get("$cm", "Proxy-Connection: keep-alive"), "lent"),
    # --- Framing the lane does not follow: aiohttp's for good.
    Row("aiohttp: Transfer-Encoding chunked", get("$cm", "Transfer-Encoding: chunked"), "aiohttp", body="0\r\n\r\n"),
    Row("aiohttp: a WebSocket upgrade (exec)", get(EXEC, *WEBSOCKET), "aiohttp"),
    Row("aiohttp: a SPDY upgrade", get(EXEC, "Connection: Upgrade", "Upgrade: SPDY/3.1"), "aiohttp"),
    Row("aiohttp: an Upgrade header on a plain GET", get("$cm", "Upgrade: h2c"), "aiohttp"),
    # --- Pipelined: the next request already waiting when each path takes this one.
    Row("pipelined: the lane's, then the lane's", get(), "lane", pipelined=True),
    Row("pipelined: lent with a body, then the lane's",
        get("$cm", "Content-Type: application/json", "Content-Length: 20", method="POST"), "lent",
        body='{"kind":"ConfigMap"}', pipelined=True),
    Row("pipelined: lent, refused, then the lane's", get(auth=False), "lent", pipelined=True),
    Row("pipelined: Connection: close, then nothing", get("$cm", "Connection: close"), "lent", pipelined=True,
        differs="aiohttp's parser (llhttp) reads the request after a `Connection: close` one in the same read "
                "as `Data after Connection: close` and the full path answers 400 bad_request (HTTP/1.0) to "
                "both, serving neither; the lane hands aiohttp one request's bytes at a time, so it answers "
                "the first 200 with `Connection: close` and closes (RFC 9112 9.6)"),
    Row("pipelined: chunked (aiohttp's for good), then aiohttp's", get("$cm", "Transfer-Encoding: chunked"),
        "aiohttp", body="0\r\n\r\n", pipelined=True),
    Row("pipelined: a 401 once, then the lane's", get(), "lane", api="refuse_first_token", pipelined=True),
    # --- Heads aiohttp's parser reads otherwise or refuses: aiohttp's for good.
    Row("aiohttp: no Host", ("GET $cm HTTP/1.1", "$auth"), "aiohttp"),
    Row("aiohttp: two Hosts", get("$cm", "Host: other"), "aiohttp"),
    Row("aiohttp: two Content-Lengths", get("$cm", "Content-Length: 0", "Content-Length: 0"), "aiohttp"),
    Row("aiohttp: a signed Content-Length", get("$cm", "Content-Length: +0"), "aiohttp"),
    Row("aiohttp: bare line feeds", get(), "aiohttp", eol="\n"),
    Row("aiohttp: more than 128 header fields", get("$cm", *(f"X-H{i}: a" for i in range(140))), "aiohttp"),
    Row("aiohttp: a folded header line", get("$cm", "X-A: b", " c"), "aiohttp"),
    Row("aiohttp: a space before the colon", get("$cm", "X-A : b"), "aiohttp"),
    Row("aiohttp: a control byte in a value", get("$cm", "X-A: b\x01c"), "aiohttp"),
    Row("aiohttp: a head past 16 KiB", get("$cm", "X-Big: " + "a" * 17_000), "aiohttp"),
    Row("aiohttp: HTTP/1.0", get(version="HTTP/1.0"), "aiohttp"),
    Row("aiohttp: a lower-case method", get(method="get"), "aiohttp"),
    Row("aiohttp: hixie-76's key", get("$cm", "Sec-WebSocket-Key1: x"), "aiohttp"),
]


# ---------------------------------------------------------------------------
# Raw HTTP/1.1 on the wire.

@dataclass(frozen=True)
class Answer:
    """One answer as the client reads it. The body is the payload (chunked
    framing undone: where chunks break is timing, not meaning; the framing
    itself is in the header fields); `whole` is False if the connection
    closed before the body's end."""

    status_line: str
    fields: Fields
    body: bytes
    whole: bool = True


# Header fields whose values differ between any two answers, whichever path
# gave them: only their form is compared. Date: the second it was written
# (an IMF-fixdate either way; FIXED_DATE, the API server's own, is compared
# whole). X-Request-Id: a counter, new for every request. Audit-Id: the
# name the gateway gives each write's event in the cluster's audit log (a UUID).
_IMF_FIXDATE = re.compile(r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
                          r"\d{4} \d\d:\d\d:\d\d GMT")
_REQUEST_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]+")
_AUDIT_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def comparable(fields: Fields) -> Fields:
    """The header fields as a multiset: sorted by name alone, so fields of
    one name keep their order (which is their meaning: a list's order);
    the varying values reduced to their form."""
    shown = []
    for name, value in fields:
        if name == "date" and _IMF_FIXDATE.fullmatch(value) and value != FIXED_DATE:
            value = "<an IMF-fixdate of now>"
        elif name == "x-request-id" and _REQUEST_ID.fullmatch(value):
            value = "<a request id>"
        elif name == "audit-id" and _AUDIT_ID.fullmatch(value):
            value = "<the audit id the gateway gave a write>"
        shown.append((name, value))
    return sorted(shown, key=lambda field: field[0])


async def read_answer(reader: asyncio.StreamReader, method: str) -> Answer | None:
    """The next answer on the connection, its body read as its framing says;
    None if the gateway closed the connection instead."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    status_line, *lines = head[:-4].decode("latin-1").split("\r\n")
    fields = [(name.strip().lower(), value.strip()) for name, _, value in (line.partition(":") for line in lines)]
    status = int(status_line.split(" ", 2)[1])
    names = dict(fields)
    body = b""
    try:
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            pass
        elif names.get("transfer-encoding") == "chunked":
            while size := int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16):
                body += (await reader.readexactly(size + 2))[:-2]
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass  # trailers
        elif "content-length" in names:
            body = await reader.readexactly(int(names["content-length"]))
        else:
            body = await reader.read()  # to the close
    except (asyncio.IncompleteReadError, ConnectionError) as error:
        partial = error.partial if isinstance(error, asyncio.IncompleteReadError) else b""
        return Answer(status_line, fields, body + partial, whole=False)
    return Answer(status_line, fields, body)


async def exchange(side: Side, request: bytes, method: str, follow_up: bytes, *,
                   pipelined: bool = False) -> list[Answer | None]:
    """Send `request` on a new connection, read its answers (interim 1xx
    ones, then the final one), then send `follow_up` and read its answer;
    `pipelined`: both in one write, before any answer."""
    context = ssl.create_default_context(cafile=str(side.gateway.ca_file))
    reader, writer = await asyncio.open_connection(side.gateway.host, side.gateway.port, ssl=context)
    answers: list[Answer | None] = []
    try:
        async with asyncio.timeout(15):
            writer.write(request + follow_up if pipelined else request)
            await writer.drain()
            while True:
                answer = await read_answer(reader, method)
                answers.append(answer)
                if answer is None or not answer.status_line.split(" ")[1].startswith("1"):
                    break
            if answer is not None and answer.whole:
                try:
                    if not pipelined:
                        writer.write(follow_up)
                        await writer.drain()
                except ConnectionError:
                    answers.append(None)
                else:
                    answers.append(await read_answer(reader, "GET"))
    finally:
        writer.close()
    return answers


def spy_on_the_lane(side: Side) -> None:
    """Record the lane's verdict on each request it reads (ExpressLane.admit)."""
    lane = side.gateway.server.app[keys.EXPRESS]
    admit = lane.admit

    def recording(buffer: bytes | bytearray) -> Any:
        verdict = admit(buffer)
        if verdict is None:
            side.verdicts.append("aiohttp")
        elif isinstance(verdict, Admitted):
            side.verdicts.append("lane")
        elif isinstance(verdict, Lend):
            side.verdicts.append("lent")
        return verdict
    lane.admit = recording


# ---------------------------------------------------------------------------
# The pair of gateways.

async def start_side(name: str, make_gateway: Any, fake_api_server: FakeAPIServer, *, express: bool) -> Side:
    api = FakeAPI()
    server, upstream = await fake_api_server(api.handle)
    api.port = server.port  # type: ignore[assignment]
    # Each its own FAKE token issuer: both gateways send `token-1` first, as one would.
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream, express=express)
    return Side(name, gateway, api, server, upstream)


async def shared_workspace(sides: list[Side]) -> Workspace:
    """One user, signed in, and their workspace, provisioned, made in the
    database directly (the sign-in as login makes it, less the password's
    hashing, the slowest part of a row), once both gateways have heard of
    the provisioning: heard later, its event would empty the caches a
    warm-up filled."""
    app = sides[0].gateway.server.app
    db, settings = app[keys.DATABASE], app[keys.SETTINGS]
    heard: list[set[str]] = [set() for _ in sides]
    for side, seen in zip(sides, heard):
        side.gateway.server.app[keys.EVENTS].subscribe(lambda message, seen=seen: seen.add(str(message.get("id"))))
    user = await repo.create_user(db, f"parity-{uuid.uuid4().hex[:12]}@example.test", "no password: never signs in")
    opened = await open_session(db, settings, user.id, AuditEvent("Login", user.id, None, None, {}))
    assert opened is not None
    namespace = f"tenant-{user.id}"
    workspace, _ = await repo.claim_workspace(db, user.id, namespace, "sa-tenant-admin", "basic")
    await repo.finish_provisioning(db, workspace.id, "uid-1", AuditEvent("WorkspaceProvisioned", user.id,
                                                                         workspace.id, None, {}))
    async with asyncio.timeout(10):
        while not all(str(workspace.id) in seen for seen in heard):
            await asyncio.sleep(0.01)
    long_ago = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=2)
    expired, _ = sessions.mint(settings.session_secret_value, user.id, uuid.uuid4(), long_ago, 3600)
    return Workspace(str(workspace.id), namespace, opened[1].token, expired)


def render(row: Row, workspace: Workspace) -> tuple[bytes, str]:
    """The row's request bytes, and its method (how its answer is read)."""
    lines = [string.Template(line).substitute(workspace.placeholders()) for line in row.head]
    head = row.eol.join(lines) + row.eol + row.eol
    return (head + row.body).encode("latin-1"), lines[0].split(" ", 1)[0].upper()


def comparable_outcome(side: Side, answers: list[Answer | None]) -> dict[str, Any]:
    """The outcome with what legitimately differs between the two gateways
    made alike: header values that vary per answer (`comparable`), and the
    address of each gateway's own FAKE API server (its port), which the
    gateway names upstream in Host and, on a WebSocket handshake, Origin."""
    address = f"127.0.0.1:{side.api.port}"
    seen = [(method, target, comparable([(name, value.replace(address, "127.0.0.1:<its FAKE API server's port>"))
                                         for name, value in fields]), body)
            for method, target, fields, body in side.api.seen]
    shown = [None if answer is None else (answer.status_line, comparable(answer.fields), answer.body,
                                          "whole" if answer.whole else "cut")
             for answer in answers]
    return {"answers": shown, "reached the API server": seen}


def differences(lane: dict[str, Any], full: dict[str, Any]) -> str:
    """Where two outcomes differ, part by part: the failure message."""
    lines = []
    for part in lane:
        ours, theirs = lane[part], full[part]
        for index in range(max(len(ours), len(theirs))):
            one = ours[index] if index < len(ours) else "<nothing>"
            other = theirs[index] if index < len(theirs) else "<nothing>"
            if one != other:
                lines += [f"{part} #{index}:", f"  lane:      {one!r}", f"  full path: {other!r}"]
    return "\n".join(lines)


@pytest.mark.parametrize("row", [
    pytest.param(row, id=row.id, marks=[pytest.mark.xfail(strict=True, reason=row.differs)] if row.differs else [])
    for row in ROWS])
async def test_both_paths_answer_alike(row: Row, make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    lane = await start_side("lane", make_gateway, fake_api_server, express=True)
    full = await start_side("full path", make_gateway, fake_api_server, express=False)
    sides = [lane, full]
    workspace = await shared_workspace(sides)
    warm_up, _ = render(Row("warm-up", get(), "lane"), workspace)
    if row.warm:
        for side in sides:  # the session, the workspace and the tenant token, cached
            answers = await exchange(side, warm_up, "GET", warm_up)
            assert [a.status_line if a else None for a in answers] == ["HTTP/1.1 200 OK"] * 2, side.name
    spy_on_the_lane(lane)
    for side in sides:
        side.api.seen.clear()
        side.api.mode = row.api
    if row.arrange is not None:
        await row.arrange(sides, workspace)
    request, method = render(row, workspace)
    outcomes = []
    for side in sides:
        answers = await exchange(side, request, method, warm_up, pipelined=row.pipelined)
        outcomes.append(comparable_outcome(side, answers))
    assert outcomes[0] == outcomes[1], differences(*outcomes)
    # The row tests what its id says: the lane's verdict on its request.
    assert lane.verdicts[:1] == [row.verdict], lane.verdicts
