"""The express lane (proxy.passthrough.express) against the full path, on
one gateway: a warm bearer GET answered beneath aiohttp's server gets what
the full path would give it, and everything else still reaches the full
path, on the same connection, in order. The API server is the FAKE one of
the test seams (tests/component/test_seams.py): it records what reached
it, answers 401 to a token on cue, and can be stopped mid-test."""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any

from aiohttp import web

from proxy import keys
from tests.component.test_seams import FakeAPIServer, FakeTokenIssuer, k8s_error, provisioned_workspace
from tests.component.test_seams import fake_api_server  # noqa: F401  (the fixture)

# What a client may send and the API server must never see (proxy.passthrough.headers).
HOSTILE = {"Impersonate-User": "system:admin", "Impersonate-Group": "system:masters", "X-Remote-User": "admin",
           "X-Forwarded-For": "10.0.0.1", "Forwarded": "for=10.0.0.1", "X-Real-IP": "10.0.0.1",
           "Audit-Id": "chosen", "X-CSRF-Token": "x", "Referer": "https://evil.example/",
           "Proxy-Authorization": "Basic eA==", "TE": "trailers", "Keep-Alive": "timeout=5"}


def express_answers(gateway: Any) -> int:
    counted: int = gateway.server.app[keys.METRICS]._express_answers  # since the last scrape: never scraped here
    return counted


async def recording_api_server(fake_api_server: FakeAPIServer, answer: Any = None) -> tuple[list[dict[str, str]], Any]:
    seen: list[dict[str, str]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(dict(request.headers))
        if answer is not None:
            answered: web.StreamResponse = await answer(request)
            return answered
        return web.json_response({"kind": "ConfigMapList", "items": []}, headers={"Audit-Id": "server-made",
                                                                                  "Set-Cookie": "a=b"})

    server, upstream = await fake_api_server(handler)
    return seen, (server, upstream)


async def test_a_warm_get_is_answered_by_the_lane_as_the_full_path_answers_it(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    seen, (_server, upstream) = await recording_api_server(fake_api_server)
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    headers = {**user.bearer, **HOSTILE, "Accept": "application/json"}

    cold = await gateway.get(path, headers=headers)  # nothing cached yet: the full path
    assert express_answers(gateway) == 0
    warm = await gateway.get(path, headers=headers)
    assert express_answers(gateway) == 1

    assert cold.status == warm.status == 200
    assert await cold.json() == await warm.json()
    varying = {"date", "x-request-id", "content-length"}  # aiohttp writes a zero-padded Date of its own

    def shape(answer: Any) -> dict[str, str]:
        return {name.lower(): value for name, value in answer.headers.items() if name.lower() not in varying}
    assert shape(warm) == shape(cold)
    assert warm.headers["X-Request-Id"] != cold.headers["X-Request-Id"]
    assert "Set-Cookie" not in warm.headers and warm.headers["Audit-Id"] == "server-made"
    assert warm.headers["Server"] == "tenant-gateway"
    # Upstream, both paths sent the same: the tenant's token, none of the hostile headers.
    assert len(seen) == 2
    sent = [{name.lower(): value for name, value in request.items() if name.lower() != "host"} for request in seen]
    assert sent[0] == sent[1]
    assert sent[1]["authorization"] == "Bearer token-1"
    assert not {name.lower() for name in HOSTILE} & set(sent[1])


async def test_requests_on_one_connection_are_answered_in_order_whichever_path_takes_them(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    """Pipelined, in one write: two warm GETs (the lane), a GET the lane
    lends to the full path (no token: a 401 of the gateway's), a warm GET
    (the lane again), then a POST (lent with its body) and a GET after it
    (the lane's again)."""
    seen, (_server, upstream) = await recording_api_server(fake_api_server)
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    assert (await gateway.get(path, headers=user.bearer)).status == 200  # warm now
    token = user.bearer["Authorization"]

    def get(authorization: str | None = token) -> bytes:
        auth = f"Authorization: {authorization}\r\n" if authorization else ""
        return f"GET {path} HTTP/1.1\r\nHost: gateway\r\n{auth}\r\n".encode()

    body = b'{"kind":"ConfigMap"}'
    post = (f"POST {path} HTTP/1.1\r\nHost: gateway\r\nAuthorization: {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    before = express_answers(gateway)
    context = ssl.create_default_context(cafile=str(gateway.ca_file))
    reader, writer = await asyncio.open_connection(gateway.host, gateway.port, ssl=context)
    try:
        writer.write(get() + get() + get(None) + get() + post + get())
        statuses = [await read_answer(reader) for _ in range(6)]
    finally:
        writer.close()
    assert statuses == [200, 200, 401, 200, 200, 200]
    assert express_answers(gateway) - before == 4
    assert len(seen) == 1 + 5  # the warm-up, then all but the refused one


async def read_answer(reader: asyncio.StreamReader) -> int:
    """One answer's status, its body read to its end (Content-Length or chunked)."""
    async with asyncio.timeout(10):
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        status = int(head.split(" ", 2)[1])
        fields = {line.split(":", 1)[0].lower(): line.split(":", 1)[1].strip() for line in head.split("\r\n")[1:] if line}
        if "content-length" in fields:
            await reader.readexactly(int(fields["content-length"]))
        elif fields.get("transfer-encoding") == "chunked":
            while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
                await reader.readexactly(size + 2)
            await reader.readuntil(b"\r\n")
        return status


async def test_a_refused_token_on_the_lane_is_dropped_and_replaced(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    refused: set[str] = set()

    async def refuse_on_cue(request: web.Request) -> web.StreamResponse:
        if request.headers["Authorization"] in refused:
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        return web.json_response({"kind": "ConfigMapList", "items": []})

    seen, (_server, upstream) = await recording_api_server(fake_api_server, refuse_on_cue)
    issuer = FakeTokenIssuer()
    gateway = await make_gateway(kube=issuer, upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    assert (await gateway.get(path, headers=user.bearer)).status == 200  # warm: token-1 cached
    refused.add("Bearer token-1")  # as when its ServiceAccount was replaced
    seen.clear()
    answer = await gateway.get(path, headers=user.bearer)
    assert answer.status == 200 and express_answers(gateway) == 1
    assert [request["Authorization"] for request in seen] == ["Bearer token-1", "Bearer token-2"]


async def test_an_api_server_gone_is_the_contracts_503_on_the_lane_too(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    _seen, (server, upstream) = await recording_api_server(fake_api_server)
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    assert (await gateway.get(path, headers=user.bearer)).status == 200
    await server.close()
    upstream.pool.close()  # its kept-alive connection went with the server
    answer = await gateway.get(path, headers=user.bearer)
    assert await k8s_error(answer) == (503, "cluster_unavailable")
    assert answer.headers["Content-Type"].startswith("application/json")
    assert answer.headers["X-Content-Type-Options"] == "nosniff" and "X-Request-Id" in answer.headers


async def test_a_chunked_answer_is_relayed_whole_and_chunked(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    pieces = [json.dumps({"piece": i, "pad": "x" * 5000}).encode() for i in range(20)]

    async def in_pieces(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for piece in pieces:
            await response.write(piece)
        await response.write_eof()
        return response

    _seen, (_server, upstream) = await recording_api_server(fake_api_server, in_pieces)
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    assert await (await gateway.get(path, headers=user.bearer)).read() == b"".join(pieces)
    warm = await gateway.get(path, headers=user.bearer)
    assert warm.headers["Transfer-Encoding"] == "chunked" and "Content-Length" not in warm.headers
    assert await warm.read() == b"".join(pieces)
    assert express_answers(gateway) == 1


async def test_headers_that_ask_for_more_than_a_forward_go_to_the_full_path(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    seen, (_server, upstream) = await recording_api_server(fake_api_server)
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    assert (await gateway.get(path, headers=user.bearer)).status == 200
    for extra in ({"Connection": "keep-alive, Accept"}, {"Origin": "https://elsewhere.example"}):
        seen.clear()
        answer = await gateway.get(path, headers={**user.bearer, "Accept": "application/json", **extra})
        assert answer.status == 200, extra
        assert ("accept" in {name.lower() for name in seen[0]}) is ("Connection" not in extra)  # nominated: dropped
    assert express_answers(gateway) == 0


async def test_framing_tricks_never_put_a_request_of_the_clients_making_past_the_gate(
        make_gateway: Any, fake_api_server: FakeAPIServer) -> None:
    """A front proxy (an ingress) may share one connection among many
    clients: the lane must find each request's end exactly where aiohttp
    does, or bytes of one request become another. Each trick carries a
    second request in what should be a body; the API server must never see
    it, and the connection must answer no more requests than were sent."""
    seen_paths: list[str] = []

    async def record_path(request: web.Request) -> web.StreamResponse:
        seen_paths.append(request.path)
        return web.json_response({"kind": "ConfigMapList", "items": []})

    _seen, (_server, upstream) = await recording_api_server(fake_api_server, record_path)
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    assert (await gateway.get(path, headers=user.bearer)).status == 200  # warm
    auth = f"Authorization: {user.bearer['Authorization']}\r\n"
    inner = f"GET {path}/smuggled HTTP/1.1\r\nHost: g\r\n{auth}\r\n"
    warm_get = f"GET {path} HTTP/1.1\r\nHost: g\r\n{auth}\r\n"
    tricks = {
        "a GET with a body": f"GET {path} HTTP/1.1\r\nHost: g\r\n{auth}Content-Length: {len(inner)}\r\n\r\n{inner}",
        "chunked and a length": (f"POST {path} HTTP/1.1\r\nHost: g\r\n{auth}Content-Length: 4\r\n"
                                 f"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n{inner}"),
        "two lengths": (f"POST {path} HTTP/1.1\r\nHost: g\r\n{auth}Content-Length: 0\r\n"
                        f"Content-Length: {len(inner)}\r\n\r\n{inner}"),
        "a signed length": f"POST {path} HTTP/1.1\r\nHost: g\r\n{auth}Content-Length: +{len(inner)}\r\n\r\n{inner}",
        "a space before the colon": (f"POST {path} HTTP/1.1\r\nHost: g\r\n{auth}Transfer-Encoding : chunked\r\n"
                                     f"Content-Length: {len(inner)}\r\n\r\n{inner}"),
        "a folded length": (f"GET {path} HTTP/1.1\r\nHost: g\r\n{auth}X-A: b\r\n Content-Length: {len(inner)}\r\n"
                            f"\r\n{inner}"),
        "bare line feeds": f"GET {path} HTTP/1.1\nHost: g\n{auth.strip()}\nContent-Length: {len(inner)}\n\n{inner}",
    }
    context = ssl.create_default_context(cafile=str(gateway.ca_file))
    for name, trick in tricks.items():
        seen_paths.clear()
        reader, writer = await asyncio.open_connection(gateway.host, gateway.port, ssl=context)
        try:
            writer.write(trick.encode() + warm_get.encode())
            statuses = []
            while len(statuses) < 2:
                try:
                    statuses.append(await read_answer(reader))
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
            try:  # nothing more: no answer to a request that was never sent
                extra = await asyncio.wait_for(reader.read(1), 0.5)
            except (asyncio.TimeoutError, ConnectionError):
                extra = b""
        finally:
            writer.close()
        assert not [p for p in seen_paths if p.endswith("/smuggled")], name
        assert extra == b"", (name, statuses)
