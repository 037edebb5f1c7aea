"""What every answer carries: hardening headers, exact CORS origins, the
console's policy and files, the OpenAPI document, and the shape of
aiohttp's own refusals, on /k8s and of what it cannot parse (no cluster)."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import uuid
from typing import Any

import pytest

from proxy.routes import openapi
from proxy.routes.console import CONSOLE_CSP
from tests.support.lanes import BOTH_LANES


@BOTH_LANES
@pytest.mark.parametrize("method, path, status", [
    ("GET", "/healthz", 200),
    ("GET", "/api/v1/workspaces", 401),
    ("GET", "/no/such/route", 404),
    ("GET", f"/k8s/{uuid.UUID(int=1)}/api/v1/namespaces", 401),
])
async def test_every_answer_is_hardened_and_names_no_versions(gateway: Any, method: str, path: str,
                                                              status: int) -> None:
    answer = await gateway.request(method, path)
    assert answer.status == status
    assert answer.headers["Server"] == "tenant-gateway"
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert answer.headers["X-Frame-Options"] == "DENY"
    assert answer.headers["Referrer-Policy"] == "no-referrer"
    assert answer.headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"
    assert answer.headers["X-Request-Id"]


async def test_cors_allows_exact_origins_only(make_gateway: Any) -> None:
    client = await make_gateway(GATEWAY_CORS_ORIGINS="https://ui.example.test")
    allowed = await client.options("/api/v1/me", headers={"Origin": "https://ui.example.test",
                                                            "Access-Control-Request-Method": "POST"})
    assert allowed.status == 204
    assert allowed.headers["Access-Control-Allow-Origin"] == "https://ui.example.test"
    assert allowed.headers["Access-Control-Allow-Credentials"] == "true"
    refused = await client.options("/api/v1/me", headers={"Origin": "https://evil.example.test",
                                                            "Access-Control-Request-Method": "POST"})
    assert refused.status == 403 and "Access-Control-Allow-Origin" not in refused.headers
    plain = await client.get("/healthz", headers={"Origin": "https://evil.example.test"})
    assert "Access-Control-Allow-Origin" not in plain.headers


async def test_the_page_and_its_scripts_carry_the_console_policy(gateway: Any) -> None:
    for path, content_type in (("/", "text/html"), ("/console/app.js", "text/javascript"),
                               ("/console/app.css", "text/css"), ("/console/terminal.js", "text/javascript")):
        response = await gateway.get(path)
        assert response.status == 200, path
        assert response.content_type == content_type
        assert response.headers["Content-Security-Policy"] == CONSOLE_CSP
        assert response.headers["X-Frame-Options"] == "DENY"
    page = await (await gateway.get("/")).text()
    assert "<script" in page and "<script>" not in page and "style=" not in page  # no inline code to allow


async def test_api_answers_keep_the_data_only_policy(gateway: Any) -> None:
    response = await gateway.get("/api/v1/me")
    assert response.headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"


@pytest.mark.parametrize("path", ["/console/", "/console/nope.js", "/console/../app.py", "/console/%2e%2e/app.py",
                                  "/console/index.html", "/console/App.js", "/console/app.js/", "/index.html"])
async def test_only_listed_files_are_served(gateway: Any, path: str) -> None:
    response = await gateway.get(path)
    assert response.status in (404, 405), path
    assert (await response.json())["error"]["code"] in ("not_found", "method_not_allowed")


async def test_openapi_document_matches_the_routes(gateway: Any) -> None:
    document = await (await gateway.get("/api/v1/openapi.json")).json()
    documented = {(path, method.upper()) for path, ops in document["paths"].items() for method in ops}
    registered = set()
    for route in gateway.app.router.routes():
        path = route.resource.canonical
        if path.startswith("/k8s/"):
            path = "/k8s/{workspace_id}/{path}"
            methods = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"} if route.method == "*" else {route.method}
        else:
            methods = {route.method} - {"HEAD"}
        registered |= {(path, m) for m in methods}
    assert documented == registered
    # What this deployment accepts, so a client (or a fuzzer) is not told any string is a tier.
    assert document["components"]["schemas"]["InitRequest"]["properties"]["tier"]["enum"] == ["basic"]
    assert openapi.document(["gold", "basic"])["components"]["schemas"]["InitRequest"]["properties"]["tier"]["enum"] \
        == ["basic", "gold"]
    assert {"200", "201", "400"} <= set(document["paths"]["/api/v1/workspaces/init"]["post"]["responses"])


@BOTH_LANES
async def test_aiohttps_own_refusals_on_k8s(gateway: Any) -> None:
    """No route matches `/k8s/` with an empty workspace: aiohttp's own 404,
    rendered by the same middleware, is a Status too."""
    answer = await gateway.get("/k8s/")
    body = await answer.json()
    assert (answer.status, body["kind"], body["reason"], body["error"]["code"]) == (404, "Status", "NotFound",
                                                                                   "not_found")


async def _raw_exchange(gateway: Any, request: bytes) -> tuple[str, dict[str, str], bytes]:
    """Send bytes as they are (no client library would send them) and read
    the answer: status line, headers, and a body of its Content-Length."""
    context = ssl.create_default_context(cafile=str(gateway.ca_file))
    reader, writer = await asyncio.open_connection(gateway.server.host, gateway.server.port, ssl=context,
                                                   server_hostname="127.0.0.1")
    try:
        writer.write(request)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
        status_line, *lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
        headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
        body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), timeout=10)
    finally:
        writer.close()
    return status_line, headers, body


@pytest.mark.parametrize("request_bytes", [
    b"GET /healthz HTTP/1.1\r\nHost: gw\r\nX-Long: " + b"A" * 20_000 + b"\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer sekrit-token-value\x01\r\n\r\n",
    b"POST /api/v1/auth/login HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\nzz-sekrit\r\n",
], ids=["header-over-the-limit", "control-byte-in-a-header", "broken-chunk-size"])
async def test_what_aiohttp_cannot_parse_is_answered_in_the_contracts_shape(
        gateway: Any, request_bytes: bytes, caplog: pytest.LogCaptureFixture) -> None:
    """aiohttp answers these itself, before any route or middleware: by
    default a text/plain page quoting the bytes, its version in Server,
    and an ERROR line with a traceback that any client could cause at will."""
    with caplog.at_level(logging.INFO):
        status_line, headers, body = await _raw_exchange(gateway, request_bytes)
    assert status_line.split()[1] == "400", status_line  # HTTP/1.0 when the request line was not read
    assert json.loads(body) == {"error": {"code": "bad_request", "message": "the request is not well-formed HTTP/1.1"}}
    assert headers["content-type"].startswith("application/json")
    assert headers["server"] == "tenant-gateway"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["content-security-policy"] == "default-src 'none'; frame-ancestors 'none'"
    assert headers["x-request-id"]
    assert b"AAAA" not in body and b"sekrit" not in body
    # (The event listener's own warnings, a heartbeat late on a busy machine, are not about this request.)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name != "provisioning.events"]
    assert "sekrit" not in caplog.text and "AAAA" not in caplog.text


async def test_a_json_body_that_never_arrives_whole_is_a_408(make_gateway: Any) -> None:
    """A body trickled in (here: 10 bytes of a declared 100, then silence)
    would hold its handler for as long as the client keeps the connection."""
    gateway = await make_gateway(GATEWAY_CLIENT_IDLE_SECONDS="1")
    head = (b"POST /api/v1/auth/login HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n{\"email\":")
    async with asyncio.timeout(10):
        status_line, _headers, body = await _raw_exchange(gateway, head)
    assert status_line.split()[1] == "408", status_line
    assert json.loads(body)["error"]["code"] == "request_timeout"
