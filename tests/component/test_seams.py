"""The pass-through through its test seams (proxy.app.create_app): a FAKE
token issuer (`kube`), a FAKE API server as the pass-through's upstream
(`upstream`) and a clock the test moves (`clock`). They show on cue what
the real components take an hour to show, or cannot be made to do: a
tenant token is reused until its refresh point on the gateway's clock, then
renewed; what reaches the API server is that token alone, never the
client's credential; an API server that hangs is a 503 once the
upstream timeout setting has passed, and one whose certificate its CA did
not sign is a 503 too, as is one a CA other than the configured cluster CA
signed, however trusted by the machine. With them, hostile input that the pass-through
refuses before the API server would see it is a 4xx: a NUL in an exec's
command, a WebSocket key that is no key."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import ssl
import uuid
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
from aiohttp import web

from devstack import pki
from provisioning.kube.errors import from_status
from proxy import keys
from proxy.passthrough.upstream import Upstream
from tests.fakes.apiserver import FakeAPIServer, RecordingAPIServer
from tests.fakes.clock import Clock
from tests.fakes.kube import FakeTokenIssuer
from tests.support.gatewayclient import exec_handshake, k8s_error, provisioned_workspace
from tests.support.lanes import BOTH_LANES

# Every test here holds on both request paths (the express lane on and off).
pytestmark = BOTH_LANES


async def test_a_tenant_token_is_renewed_at_its_refresh_point_on_the_gateways_clock(
        make_gateway: Any, api_server: RecordingAPIServer) -> None:
    seen, upstream = api_server
    issuer, clock = FakeTokenIssuer(), Clock()
    gateway = await make_gateway(kube=issuer, upstream=upstream, clock=clock)
    user, path = await provisioned_workspace(gateway)

    async def get() -> str:
        answer = await gateway.get(path, headers={**user.bearer, "Impersonate-User": "admin",
                                                  "X-Remote-User": "admin"})
        assert answer.status == 200, await answer.text()
        sent = seen[-1]
        assert not [name for name in sent if name.lower().startswith(("impersonate-", "x-remote-"))]
        return sent["Authorization"]

    assert await get() == await get() == "Bearer token-1"
    # An hour's token is renewed when 10 minutes are left (the proxy's refresh margin): not a second before.
    clock.now += 3000 - 1
    assert await get() == "Bearer token-1"
    clock.now += 1
    assert await get() == "Bearer token-2"
    assert issuer.issued == ["token-1", "token-2"]


async def test_an_api_server_that_never_answers_is_a_503_after_the_upstream_timeout_setting(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    """A FAKE API server that takes requests and never answers (a hung
    server, which a real one cannot be made into on cue). The gateway's own
    upstream, built from its settings, gives up after
    GATEWAY_UPSTREAM_TIMEOUT_SECONDS and says the cluster is unavailable."""
    async def hang(request: web.Request) -> web.Response:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    server, _upstream = await fake_api_server(hang)
    gateway = await make_gateway(kube=FakeTokenIssuer(str(server.make_url("")).rstrip("/")),
                                 GATEWAY_UPSTREAM_TIMEOUT_SECONDS="0.5")
    user, path = await provisioned_workspace(gateway)
    async with asyncio.timeout(10):  # the default (60 s) would not answer in time
        assert await k8s_error(await gateway.get(path, headers=user.bearer)) == (503, "cluster_unavailable")


async def test_a_write_whose_client_stops_sending_its_body_is_a_408_not_an_outage(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    """The upstream deadline passes while the client's body is still
    awaited: the client's delay (408), not a cluster that is unavailable."""
    async def read_the_body(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"kind": "ConfigMap"}, status=201)

    async def trickle() -> AsyncIterator[bytes]:
        yield b'{"kind":'
        await asyncio.sleep(3600)

    _server, upstream = await fake_api_server(read_the_body)
    impatient = Upstream(upstream.server, None, timeout=0.5)
    try:
        gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=impatient)
        user, path = await provisioned_workspace(gateway)
        async with asyncio.timeout(10):
            answer = await gateway.post(path, data=trickle(),
                                        headers={**user.bearer, "Content-Type": "application/json"})
            assert await k8s_error(answer) == (408, "request_timeout")
    finally:
        impatient.close()


async def test_a_write_whose_body_breaks_off_is_the_clients_400_not_an_outage(
        make_gateway: Any, fake_api_server: FakeAPIServer, caplog: pytest.LogCaptureFixture) -> None:
    """A tenant sends a chunked body whose second chunk size is garbage and
    waits for the answer: its body, not the API server, failed. A 400, and
    no WARNING: a 503 `cluster_unavailable` would let any tenant raise the
    gateway's outage alarms at will."""
    async def read_the_body(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"kind": "ConfigMap"}, status=201)

    server, _upstream = await fake_api_server(read_the_body)
    gateway = await make_gateway(kube=FakeTokenIssuer(str(server.make_url("")).rstrip("/")))
    user, path = await provisioned_workspace(gateway)
    caplog.set_level(logging.INFO)
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", gateway.server.port, ssl=ssl.create_default_context(cafile=str(gateway.ca_file)),
        server_hostname="127.0.0.1")
    try:
        writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {user.bearer['Authorization']}\r\nContent-Type: application/json\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n8\r\n{\"kind\":\r\nzz\r\n".encode())
        async with asyncio.timeout(10):
            status_line = await reader.readline()
    finally:
        writer.close()
    assert status_line.split()[1] == b"400", status_line
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name != "provisioning.events"]
    assert loud == [], [(r.name, r.getMessage()) for r in loud]


async def test_a_write_whose_client_left_before_the_answer_is_still_audited(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    """The write reached the (FAKE, hung) API server, which may well carry
    it out; the client hangs up before any answer. The audit row is written
    all the same, with no status (0)."""
    arrived = asyncio.Event()

    async def take_and_hang(request: web.Request) -> web.Response:
        await request.read()
        arrived.set()
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    server, _upstream = await fake_api_server(take_and_hang)
    gateway = await make_gateway(kube=FakeTokenIssuer(str(server.make_url("")).rstrip("/")))
    user, path = await provisioned_workspace(gateway)
    write = asyncio.create_task(gateway.post(path, json={"metadata": {"name": "x"}}, headers=user.bearer))
    await asyncio.wait_for(arrived.wait(), 10)
    write.cancel()  # the client hangs up
    with pytest.raises(asyncio.CancelledError):
        await write
    db = gateway.server.app[keys.DATABASE]
    async with asyncio.timeout(10):
        while not (rows := await db.fetch("SELECT details FROM audit_logs WHERE action = 'ProxyWrite'"
                                          " AND user_id = $1", uuid.UUID(user.user_id))):
            await asyncio.sleep(0.1)
    assert [json.loads(r["details"])["status"] for r in rows] == [0]


async def test_an_api_server_whose_certificate_its_ca_did_not_sign_is_a_503(
        make_gateway: Any, fake_api_server: FakeAPIServer, gateway_tls: tuple[ssl.SSLContext, Path]) -> None:
    """The API server shows a certificate the cluster's CA did not sign (a
    rotation the gateway was not told of, or someone in between): the
    gateway fails closed with a 503, never a 400 that blames the client, and
    the tenant's token never leaves. (ssl.SSLCertVerificationError is a
    ValueError as well as an OSError; it was mapped as a bad header.)"""
    seen: list[str] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response({})

    _server, upstream = await fake_api_server(record, ssl=gateway_tls[0])  # the upstream trusts the system's CAs
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    assert await k8s_error(await gateway.get(path, headers=user.bearer)) == (503, "cluster_unavailable")
    assert seen == []


async def test_a_certificate_the_system_trusts_is_refused_when_the_cluster_ca_did_not_sign_it(
        make_gateway: Any, fake_api_server: FakeAPIServer, gateway_tls: tuple[ssl.SSLContext, Path],
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Someone between the gateway and the API server holds a certificate
    for its name from a CA the machine trusts (here the machine's store is
    that CA alone, through SSL_CERT_FILE): with the cluster's CA configured,
    the pass-through trusts that CA only, so it is a 503 and the tenant's
    token never leaves."""
    seen: list[str] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response({})

    monkeypatch.setenv("SSL_CERT_FILE", str(gateway_tls[1]))  # the "public" CA that signed the server
    server, _ = await fake_api_server(record, ssl=gateway_tls[0])
    cluster_ca, _key = pki.make_ca("the-real-cluster-ca")
    pinned = Upstream(f"https://127.0.0.1:{server.port}", cluster_ca.cert_pem)
    try:
        gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=pinned)
        user, path = await provisioned_workspace(gateway)
        assert await k8s_error(await gateway.get(path, headers=user.bearer)) == (503, "cluster_unavailable")
        assert seen == []
    finally:
        pinned.close()


async def test_a_compressed_request_body_crosses_as_sent(make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    # Inflated and relayed under the compressed Content-Length, the rest of
    # the body would be read upstream as a request of the tenant's making
    # (tests/attacks/test_request_smuggling.py plays the attack against the
    # real API server).
    received: list[tuple[str | None, int | None, bytes]] = []

    async def keep(request: web.Request) -> web.Response:
        received.append((request.headers.get("Content-Encoding"), request.content_length, await request.read()))
        return web.json_response({"kind": "ConfigMap"}, status=201)

    _server, upstream = await fake_api_server(keep, auto_decompress=False)  # it keeps bytes as they came
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    body = gzip.compress(b'{"metadata":{"name":"a"}}' + b" " * 10_000 + b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = await gateway.post(path, data=body, headers={**user.bearer, "Content-Type": "application/json",
                                                          "Content-Encoding": "gzip"})
    assert answer.status == 201, await answer.text()
    assert received == [("gzip", len(body), body)]


class RefusingTokenIssuer(FakeTokenIssuer):
    """A FAKE gateway client whose TokenRequests the API server refuses,
    in the words a real one uses (which name the gateway's own account)."""

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        raise from_status(403, json.dumps({"kind": "Status", "reason": "Forbidden", "message": (
            'serviceaccounts "sa-tenant-admin" is forbidden: User '
            '"system:serviceaccount:tenant-gateway-system:tenant-gateway" cannot create resource')}))


async def test_a_tenant_token_the_api_server_will_not_mint_is_a_503_without_its_words(
        make_gateway: Any, api_server: RecordingAPIServer) -> None:
    # The same answer a kubeconfig download gives (provisioning.credentials):
    # nothing the tenant can fix, and not the API server's text.
    _seen, upstream = api_server
    gateway = await make_gateway(kube=RefusingTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    answer = await gateway.get(path, headers=user.bearer)
    assert await k8s_error(answer) == (503, "cluster_unavailable")
    assert "tenant-gateway" not in json.dumps(await answer.json())


async def test_a_token_the_api_server_refuses_is_not_used_again_for_the_namespace_list(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    # `GET /api/v1/namespaces` is answered by the gateway from a read of the
    # tenant's own namespace: a 401 there must drop the cached token too.
    tokens: list[str] = []

    async def refuse_the_first(request: web.Request) -> web.Response:
        tokens.append(request.headers["Authorization"])
        if len(tokens) == 1:
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        return web.json_response({"kind": "Namespace", "metadata": {"name": request.path.rsplit("/", 1)[-1]}})

    _server, upstream = await fake_api_server(refuse_the_first)
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    namespaces = path.split("/api/v1/")[0] + "/api/v1/namespaces"
    assert (await gateway.get(namespaces, headers=user.bearer)).status == 401
    answer = await gateway.get(namespaces, headers=user.bearer)
    assert answer.status == 200, await answer.text()
    assert tokens == ["Bearer token-1", "Bearer token-2"]


async def test_a_namespace_read_answered_with_no_object_is_a_502_not_a_500(
        make_gateway: Any, fake_api_server: FakeAPIServer, caplog: pytest.LogCaptureFixture) -> None:
    """A FAKE API server (or a broken proxy before it) answering 200 with a
    body that is no JSON object, which a real one cannot be made to do."""
    async def garbled(request: web.Request) -> web.Response:
        return web.Response(text="<html>maintenance</html>", content_type="application/json")

    _server, upstream = await fake_api_server(garbled)
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    namespaces = path.split("/api/v1/")[0] + "/api/v1/namespaces"
    with caplog.at_level(logging.ERROR):
        assert await k8s_error(await gateway.get(namespaces, headers=user.bearer)) == (502, "upstream_error")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_bearer_subprotocol_on_a_second_header_line_is_not_logged(
        make_gateway: Any, api_server: RecordingAPIServer, caplog: pytest.LogCaptureFixture) -> None:
    """aiohttp's handshake check reads the first Sec-WebSocket-Protocol line
    only and logs both lists when they do not overlap."""
    from multidict import CIMultiDict

    seen, upstream = api_server
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    secret = "base64url.bearer.authorization.k8s.io.c2VjcmV0LXRva2Vu"
    headers = CIMultiDict(exec_handshake("dGhlIHNhbXBsZSBub25jZQ=="))
    headers.update(user.bearer)
    headers.add("Sec-WebSocket-Protocol", "")
    headers.add("Sec-WebSocket-Protocol", f"{secret}, v5.channel.k8s.io")
    caplog.set_level(logging.DEBUG)
    await gateway.get(path.replace("/configmaps", "/pods/p/exec") + "?command=sh&stdout=true", headers=headers)
    assert seen and "c2VjcmV0LXRva2Vu" not in str(seen[-1])
    assert "c2VjcmV0LXRva2Vu" not in caplog.text


async def test_hostile_exec_handshakes_are_4xx_before_the_api_server(
        make_gateway: Any, api_server: RecordingAPIServer) -> None:
    seen, upstream = api_server
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    exec_path = path.replace("/configmaps", "/pods/p/exec")
    # A NUL in the command: PostgreSQL's jsonb cannot hold it in the exec's
    # audit row, which comes first (no row, no session).
    nul = await gateway.get(f"{exec_path}?command=%00&stdout=true", headers={**user.bearer,
                                                                             **exec_handshake("dGhlIHNhbXBsZSBub25jZQ==")})
    assert await k8s_error(nul) == (400, "invalid_text")
    # A key that is not 16 bytes of base64 (aiohttp's own check raised on non-ASCII).
    for key in ("\u00e9", "not a key"):
        refused = await gateway.get(f"{exec_path}?command=sh&stdout=true", headers={**user.bearer, **exec_handshake(key)})
        assert await k8s_error(refused) == (400, "bad_websocket_handshake"), key
    assert seen == []
    # Extensions aiohttp's own parser cannot read (an int of 4,301 digits) are
    # not a 500: they are the client's, and never go upstream.
    huge = await gateway.get(f"{exec_path}?command=sh&stdout=true", headers={
        **user.bearer, **exec_handshake("dGhlIHNhbXBsZSBub25jZQ=="),
        "Sec-WebSocket-Extensions": "permessage-deflate; server_max_window_bits=" + "1" * 4400})
    # (The FAKE API server answers 200 to every request: a path without WebSockets.)
    assert await k8s_error(huge) == (400, "upgrade_not_supported")
    assert seen and not [name for name in seen[-1] if name.lower() == "sec-websocket-extensions"]


@pytest.mark.parametrize("status, refusal", [
    # A path that takes no WebSocket (a configmap read) is answered as a plain
    # request: the client's mistake, not an API server at fault.
    (200, (400, "upgrade_not_supported")),
    (204, (400, "upgrade_not_supported")),
    # A redirect is never chased (it would carry the tenant's token elsewhere).
    (302, (502, "upstream_error")),
    # The API server's own refusals are passed on: its status, and the
    # gateway's words when it gave none.
    (403, (403, "upgrade_refused")),
    (503, (503, "upgrade_refused")),
])
async def test_an_upgrade_the_api_server_answers_without_switching_is_refused_by_what_it_answered(
        make_gateway: Any, fake_api_server: FakeAPIServer, caplog: pytest.LogCaptureFixture,
        status: int, refusal: tuple[int, str]) -> None:
    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=status, headers={"Location": "https://elsewhere.example/"} if status == 302 else {})

    _server, upstream = await fake_api_server(answer)
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    caplog.set_level(logging.INFO)
    refused = await gateway.get(path, headers={**user.bearer, **exec_handshake("dGhlIHNhbXBsZSBub25jZQ==")})
    assert await k8s_error(refused) == refusal
    # Only the API server's own failures are worth a warning: no tenant can make one at will.
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING and r.getMessage() == "request failed"]
    assert bool(warned) == (refusal[0] >= 500), warned


async def test_an_upgrade_refusal_with_the_api_servers_reason_reaches_the_client_whole(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    """The (FAKE) API server refuses an exec with its Status (a container that
    does not exist) and an APF-style 429 with Retry-After: the client gets
    that answer, as a relayed request would, so kubectl can say why, not
    only the status."""
    status_body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 0,
                   "message": 'container "nope" not found in pod "p"', "reason": "BadRequest"}
    refusals = iter([(400, {}), (429, {"Retry-After": "7"})])

    async def answer(request: web.Request) -> web.Response:
        status, headers = next(refusals)
        return web.json_response({**status_body, "code": status}, status=status,
                                 headers={**headers, "Set-Cookie": "upstream=1"})

    _server, upstream = await fake_api_server(answer)
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    exec_path = path.replace("/configmaps", "/pods/p/exec") + "?command=sh&stdout=true&container=nope"
    for status in (400, 429):
        refused = await gateway.get(exec_path, headers={**user.bearer, **exec_handshake("dGhlIHNhbXBsZSBub25jZQ==")})
        body = await refused.json()
        assert refused.status == status and body["code"] == status
        assert body["message"] == 'container "nope" not found in pod "p"'
        assert "Set-Cookie" not in refused.headers  # the relay's header rules hold
    assert refused.headers["Retry-After"] == "7"


@pytest.mark.parametrize("stream", ["watch", "exec"])
async def test_a_stream_still_opening_when_the_stop_begins_is_answered_503_shutting_down(
        make_gateway: Any, fake_api_server: FakeAPIServer, stream: str) -> None:
    """The stop begins (SIGTERM: Drain.begin, which ends every stream) while
    the FAKE API server has yet to answer a watch's head or an exec's 101: the
    client gets the 503 that the drain gives every request it refuses, never
    a connection closed without an answer."""
    asked = asyncio.Event()

    async def hold_the_answer(request: web.Request) -> web.Response:
        asked.set()
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    _server, upstream = await fake_api_server(hold_the_answer)
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    if stream == "watch":
        opening = gateway.get(f"{path}?watch=true", headers=user.bearer)
    else:
        opening = gateway.get(path.replace("/configmaps", "/pods/p/exec") + "?command=sh&stdout=true",
                              headers={**user.bearer, **exec_handshake("dGhlIHNhbXBsZSBub25jZQ==")})
    answer = asyncio.ensure_future(opening)
    await asyncio.wait_for(asked.wait(), 10)
    gateway.server.app[keys.DRAIN].begin()
    async with asyncio.timeout(10):
        refused = await answer
    assert await k8s_error(refused) == (503, "shutting_down")
    assert (refused.headers["Retry-After"], refused.headers["Connection"]) == ("1", "close")


async def test_a_watch_whose_answer_has_begun_still_ends_cleanly_when_the_stop_begins(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    """Once a watch's answer runs, a stop ends it as the API server ends one:
    after a whole event, with the chunked body's last chunk; no 503 then."""
    async def one_event_then_hold(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"type":"ADDED","object":{"kind":"ConfigMap"}}\n')
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    _server, upstream = await fake_api_server(one_event_then_hold)
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    watch = await gateway.get(f"{path}?watch=true", headers=user.bearer)
    assert watch.status == 200
    async with asyncio.timeout(10):
        assert json.loads(await watch.content.readline())["type"] == "ADDED"
        gateway.server.app[keys.DRAIN].begin()
        assert await watch.content.read() == b""  # the end of the body, not a broken connection
